//! Charts drawn as SVG on the server: line charts (steps over time, W&B metrics, accuracy per
//! schedule with baselines and regression markers), bar charts and the stage timeline.

use std::fmt::Write;

use super::html::{duration, esc};

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 220.0;
const PAD_LEFT: f64 = 48.0;
const PAD_RIGHT: f64 = 12.0;
const PAD_Y: f64 = 16.0;

/// One line of a chart.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart: its series, horizontal reference lines (baselines) and marked points.
#[derive(Default)]
pub struct LineChart {
    pub title: String,
    pub series: Vec<Series>,
    /// Horizontal lines: (y, label).
    pub baselines: Vec<(f64, String)>,
    /// Points marked as regressions: (x, y, label).
    pub regressions: Vec<(f64, f64, String)>,
    /// Checkpoints, drawn as diamonds: (x, step, label).
    pub checkpoints: Vec<(f64, f64, String)>,
    /// Preemptions, drawn as dashed vertical lines: (x, label).
    pub preemptions: Vec<(f64, String)>,
    /// Whether x values are milliseconds since the epoch (labelled as times).
    pub x_is_time: bool,
}

struct Scale {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Scale {
    fn x(&self, x: f64) -> f64 {
        let span = if self.x1 > self.x0 { self.x1 - self.x0 } else { 1.0 };
        PAD_LEFT + (x - self.x0) / span * (WIDTH - PAD_LEFT - PAD_RIGHT)
    }
    fn y(&self, y: f64) -> f64 {
        let span = if self.y1 > self.y0 { self.y1 - self.y0 } else { 1.0 };
        HEIGHT - PAD_Y - (y - self.y0) / span * (HEIGHT - 2.0 * PAD_Y)
    }
}

const COLOURS: [&str; 6] = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#4a5568"];

fn fmt_num(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.trunc() { format!("{v:.0}") } else { format!("{v:.3}") }
}

impl LineChart {
    /// The SVG, or `None` when there is no point to draw.
    pub fn render(&self) -> Option<String> {
        let marked = self.checkpoints.iter().map(|(x, y, _)| (*x, *y));
        let points = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .chain(marked)
            .filter(|(x, y)| x.is_finite() && y.is_finite());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        let mut any = false;
        for (x, y) in points {
            any = true;
            (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
        }
        if !any {
            return None;
        }
        for (y, _) in &self.baselines {
            (y0, y1) = (y0.min(*y), y1.max(*y));
        }
        if y0 > 0.0 && y0 < (y1 - y0) {
            y0 = 0.0;
        }
        if y1 == y0 {
            (y0, y1) = (y0 - 1.0, y1 + 1.0);
        }
        let scale = Scale { x0, x1, y0, y1 };
        let mut svg = format!(
            "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{}\">",
            esc(&self.title)
        );
        let _ = write!(
            svg,
            "<line class=\"axis\" x1=\"{PAD_LEFT}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\"/>\
             <line class=\"axis\" x1=\"{PAD_LEFT}\" y1=\"{PAD_Y}\" x2=\"{PAD_LEFT}\" y2=\"{b}\"/>\
             <text class=\"tick\" x=\"{l}\" y=\"{t}\" text-anchor=\"end\">{top}</text>\
             <text class=\"tick\" x=\"{l}\" y=\"{b}\" text-anchor=\"end\">{bottom}</text>",
            b = HEIGHT - PAD_Y,
            r = WIDTH - PAD_RIGHT,
            l = PAD_LEFT - 4.0,
            t = PAD_Y + 4.0,
            top = fmt_num(y1),
            bottom = fmt_num(y0),
        );
        let x_label = |x: f64| {
            if self.x_is_time { super::html::time(Some(x as i64)) } else { fmt_num(x) }
        };
        let _ = write!(
            svg,
            "<text class=\"tick\" x=\"{PAD_LEFT}\" y=\"{h}\">{}</text>\
             <text class=\"tick\" x=\"{r}\" y=\"{h}\" text-anchor=\"end\">{}</text>",
            esc(&x_label(x0)),
            esc(&x_label(x1)),
            h = HEIGHT - 2.0,
            r = WIDTH - PAD_RIGHT,
        );
        for (y, label) in &self.baselines {
            let _ = write!(
                svg,
                "<line class=\"baseline\" data-y=\"{y}\" x1=\"{PAD_LEFT}\" y1=\"{py:.1}\" x2=\"{r}\" y2=\"{py:.1}\"><title>{}</title></line>",
                esc(label),
                py = scale.y(*y),
                r = WIDTH - PAD_RIGHT,
            );
        }
        for (i, series) in self.series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let mut d = String::new();
            for (j, (x, y)) in
                series.points.iter().filter(|(x, y)| x.is_finite() && y.is_finite()).enumerate()
            {
                let _ = write!(d, "{}{:.1},{:.1}", if j == 0 { "M" } else { " L" }, scale.x(*x), scale.y(*y));
            }
            let _ = write!(
                svg,
                "<path class=\"series\" d=\"{d}\" stroke=\"{colour}\"><title>{}</title></path>",
                esc(&series.name)
            );
            if series.points.len() <= 40 {
                for (x, y) in &series.points {
                    let _ = write!(
                        svg,
                        "<circle class=\"point\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{colour}\"/>",
                        scale.x(*x),
                        scale.y(*y)
                    );
                }
            }
            // The key: a swatch of the line's colour beside its name.
            let key_y = PAD_Y + 14.0 + 13.0 * i as f64;
            let _ = write!(
                svg,
                "<g class=\"key\" data-series=\"{name}\"><rect x=\"{}\" y=\"{}\" width=\"14\" height=\"4\" fill=\"{colour}\"/>\
                 <text class=\"legend\" x=\"{}\" y=\"{key_y}\" fill=\"{colour}\">{name}</text></g>",
                PAD_LEFT + 8.0,
                key_y - 5.0,
                PAD_LEFT + 26.0,
                name = esc(&series.name)
            );
        }
        for (x, y, label) in &self.regressions {
            let _ = write!(
                svg,
                "<circle class=\"regression\" data-y=\"{y}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"6\"><title>{}</title></circle>",
                scale.x(*x),
                scale.y(*y),
                esc(label)
            );
        }
        for (x, y, label) in self.checkpoints.iter().filter(|(x, y, _)| x.is_finite() && y.is_finite()) {
            let (px, py) = (scale.x(*x), scale.y(*y));
            let _ = write!(
                svg,
                "<path class=\"checkpoint\" data-step=\"{y}\" d=\"M{px:.1},{:.1} l5,5 l-5,5 l-5,-5 Z\"><title>{}</title></path>",
                py - 5.0,
                esc(label)
            );
        }
        for (x, label) in self.preemptions.iter().filter(|(x, _)| (x0..=x1).contains(x)) {
            let px = scale.x(*x);
            let _ = write!(
                svg,
                "<line class=\"preemption\" x1=\"{px:.1}\" y1=\"{PAD_Y}\" x2=\"{px:.1}\" y2=\"{}\"><title>{}</title></line>",
                HEIGHT - PAD_Y,
                esc(label)
            );
        }
        svg.push_str("</svg>");
        Some(svg)
    }
}

/// Horizontal bars, one per label, scaled to `max`.
pub fn bar_chart(title: &str, bars: &[(String, f64)], max: f64) -> String {
    let row = 24.0;
    let height = row * bars.len() as f64 + 8.0;
    let label_width = 220.0;
    let span = WIDTH - label_width - 60.0;
    let mut svg = format!(
        "<svg class=\"chart bars\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"{}\">",
        esc(title)
    );
    for (i, (label, value)) in bars.iter().enumerate() {
        let y = 4.0 + row * i as f64;
        let w = if max > 0.0 { (value / max).clamp(0.0, 1.0) * span } else { 0.0 };
        let _ = write!(
            svg,
            "<text class=\"tick\" x=\"{lx}\" y=\"{ty}\" text-anchor=\"end\">{}</text>\
             <rect class=\"bar\" x=\"{label_width}\" y=\"{y}\" width=\"{w:.1}\" height=\"{h}\"/>\
             <text class=\"tick\" x=\"{vx:.1}\" y=\"{ty}\">{}</text>",
            esc(label),
            fmt_num(*value),
            lx = label_width - 6.0,
            ty = y + 14.0,
            h = row - 6.0,
            vx = label_width + w + 4.0,
        );
    }
    svg.push_str("</svg>");
    svg
}

/// One stage on the timeline: started, counted up, ended, and marks along the way.
pub struct StageSpan {
    pub name: String,
    /// Its attempt, on the timeline of a run with several (its label says it).
    pub attempt: Option<i64>,
    pub state: String,
    pub started_at: Option<i64>,
    pub ready_at: Option<i64>,
    pub ended_at: Option<i64>,
    /// How it ended ("code 0", "signal 15 (SIGTERM)").
    pub exit: Option<String>,
    /// Stop signals sent to it: (at, label).
    pub signals: Vec<(i64, String)>,
}

/// A bar per stage from its start through "up" to its exit; `now` ends the bars still open.
pub fn timeline(stages: &[StageSpan], now: i64) -> String {
    let row = 30.0;
    let label_width = 110.0;
    let height = row * stages.len() as f64 + 24.0;
    let starts = stages.iter().filter_map(|s| s.started_at);
    let t0 = starts.clone().min().unwrap_or(now);
    let t1 = stages.iter().map(|s| s.ended_at.unwrap_or(now)).chain(starts).max().unwrap_or(now).max(t0 + 1);
    let span = WIDTH - label_width - 110.0;
    let x = |t: i64| label_width + (t - t0) as f64 / (t1 - t0) as f64 * span;
    let mut svg = format!(
        "<svg class=\"chart timeline\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"stage timeline\">"
    );
    for (i, stage) in stages.iter().enumerate() {
        let y = 4.0 + row * i as f64;
        let label = match stage.attempt {
            Some(attempt) => format!("{} #{attempt}", stage.name),
            None => stage.name.clone(),
        };
        let _ = write!(
            svg,
            "<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            label_width - 6.0,
            y + 16.0,
            esc(&label)
        );
        let Some(start) = stage.started_at else {
            let _ = write!(
                svg,
                "<text class=\"tick muted\" x=\"{label_width}\" y=\"{}\">not started</text>",
                y + 16.0
            );
            continue;
        };
        let end = stage.ended_at.unwrap_or(now).max(start);
        let up = stage.ready_at.unwrap_or(end).clamp(start, end);
        let _ = write!(
            svg,
            "<g class=\"stage-bar\" data-stage=\"{name}\" data-state=\"{state}\"{attempt}><title>{label}: {state}, {took}</title>\
             <rect class=\"starting\" x=\"{sx:.1}\" y=\"{y}\" width=\"{sw:.1}\" height=\"20\"/>\
             <rect class=\"up\" x=\"{ux:.1}\" y=\"{y}\" width=\"{uw:.1}\" height=\"20\"/></g>",
            name = esc(&stage.name),
            label = esc(&label),
            attempt = stage.attempt.map(|a| format!(" data-attempt=\"{a}\"")).unwrap_or_default(),
            state = esc(&stage.state),
            took = duration(end - start),
            sx = x(start),
            sw = (x(up) - x(start)).max(1.0),
            ux = x(up),
            uw = if stage.ready_at.is_some() { (x(end) - x(up)).max(1.0) } else { 0.0 },
        );
        for (at, label) in &stage.signals {
            let _ = write!(
                svg,
                "<line class=\"signal\" x1=\"{sx:.1}\" y1=\"{y0}\" x2=\"{sx:.1}\" y2=\"{y1}\"><title>{}</title></line>",
                esc(label),
                sx = x(*at),
                y0 = y - 2.0,
                y1 = y + 22.0,
            );
        }
        if let Some(exit) = &stage.exit {
            let _ = write!(
                svg,
                "<text class=\"exit\" x=\"{:.1}\" y=\"{}\">{}</text>",
                x(end) + 4.0,
                y + 15.0,
                esc(exit)
            );
        }
    }
    let _ = write!(
        svg,
        "<text class=\"tick\" x=\"{label_width}\" y=\"{h}\">{}</text><text class=\"tick\" x=\"{r}\" y=\"{h}\" text-anchor=\"end\">{}</text></svg>",
        super::html::time(Some(t0)),
        duration(t1 - t0),
        h = height - 4.0,
        r = label_width + span,
    );
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_chart_draws_each_series_and_marks_regressions_below_the_baseline() {
        let chart = LineChart {
            title: "accuracy".into(),
            series: vec![Series { name: "m<1>".into(), points: vec![(0.0, 0.8), (1.0, 0.8), (2.0, 0.4)] }],
            baselines: vec![(0.8, "baseline".into())],
            regressions: vec![(2.0, 0.4, "regressed".into())],
            x_is_time: false,
            ..LineChart::default()
        }
        .render()
        .unwrap();
        assert_eq!(chart.matches("class=\"series\"").count(), 1);
        assert!(chart.contains("m&lt;1&gt;") && !chart.contains("m<1>"));
        let attr = |class: &str, name: &str| -> f64 {
            let at = chart.find(&format!("class=\"{class}\"")).unwrap();
            let rest = &chart[at..];
            let start = rest.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
            rest[start..start + rest[start..].find('"').unwrap()].parse().unwrap()
        };
        // SVG y grows downwards: below the baseline is a larger y.
        assert!(attr("regression", "cy") > attr("baseline", "y1"));
        assert!(LineChart::default().render().is_none());
    }

    #[test]
    fn the_timeline_has_a_bar_per_started_stage_with_exits_and_signals() {
        let stage = |name: &str, start, ready, end, exit: Option<&str>| StageSpan {
            name: name.into(),
            attempt: None,
            state: "exited".into(),
            started_at: start,
            ready_at: ready,
            ended_at: end,
            exit: exit.map(str::to_string),
            signals: vec![],
        };
        let mut trainer =
            stage("trainer", Some(1_000), Some(2_000), Some(9_000), Some("signal 15 (SIGTERM)"));
        trainer.signals.push((8_000, "SIGTERM sent".into()));
        let svg = timeline(
            &[
                stage("api", Some(0), Some(500), Some(10_000), Some("code 0")),
                trainer,
                stage("env", None, None, None, None),
            ],
            10_000,
        );
        assert_eq!(svg.matches("class=\"stage-bar\"").count(), 2);
        assert!(svg.contains("not started") && svg.contains("SIGTERM") && svg.contains("code 0"));
        assert_eq!(svg.matches("class=\"signal\"").count(), 1);
    }

    #[test]
    fn each_attempt_has_its_own_bars_and_label() {
        let span = |attempt, start, end| StageSpan {
            name: "trainer".into(),
            attempt: Some(attempt),
            state: "exited".into(),
            started_at: Some(start),
            ready_at: None,
            ended_at: Some(end),
            exit: Some("code 1".into()),
            signals: vec![],
        };
        let svg = timeline(&[span(1, 0, 4_000), span(2, 6_000, 9_000)], 10_000);
        assert_eq!(svg.matches("class=\"stage-bar\"").count(), 2, "{svg}");
        assert!(svg.contains("data-attempt=\"1\"") && svg.contains("data-attempt=\"2\""), "{svg}");
        assert!(svg.contains(">trainer #1<") && svg.contains(">trainer #2<"), "{svg}");
    }

    #[test]
    fn each_line_has_a_key_in_its_colour() {
        let series = |name: &str| Series { name: name.into(), points: vec![(0.0, 0.0), (1.0, 1.0)] };
        let chart = LineChart {
            title: "steps".into(),
            series: vec![series("attempt 1"), series("attempt 2")],
            ..LineChart::default()
        }
        .render()
        .unwrap();
        assert_eq!(chart.matches("class=\"key\"").count(), 2, "{chart}");
        for (i, name) in ["attempt 1", "attempt 2"].iter().enumerate() {
            let key = &chart[chart.find(&format!("data-series=\"{name}\"")).unwrap()..];
            assert!(
                key[..key.find("</g>").unwrap()].contains(&format!("fill=\"{}\"", COLOURS[i])),
                "{chart}"
            );
        }
    }

    #[test]
    fn bars_scale_to_the_maximum() {
        let svg = bar_chart("accuracy", &[("a".into(), 1.0), ("b".into(), 0.5)], 1.0);
        assert_eq!(svg.matches("class=\"bar\"").count(), 2);
    }
}
