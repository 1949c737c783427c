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

/// From data to the plot's box: (x0, x1) to (left, right), (y0, y1) to (bottom, top).
struct Scale {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    right: f64,
    bottom: f64,
}

impl Scale {
    /// The line charts' box: the whole width, less the axis labels.
    fn new(x0: f64, x1: f64, y0: f64, y1: f64) -> Scale {
        Scale { x0, x1, y0, y1, right: WIDTH - PAD_RIGHT, bottom: HEIGHT - PAD_Y }
    }
    fn x(&self, x: f64) -> f64 {
        let span = if self.x1 > self.x0 { self.x1 - self.x0 } else { 1.0 };
        PAD_LEFT + (x - self.x0) / span * (self.right - PAD_LEFT)
    }
    fn y(&self, y: f64) -> f64 {
        let span = if self.y1 > self.y0 { self.y1 - self.y0 } else { 1.0 };
        self.bottom - (y - self.y0) / span * (self.bottom - PAD_Y)
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
        let scale = Scale::new(x0, x1, y0, y1);
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

/// One member's line on a sweep's chart.
pub struct MemberLine {
    /// Its member number, and how the legend and tooltip name it (`2 · lr=0.001`).
    pub k: u64,
    pub label: String,
    /// (step, value), ordered by step.
    pub points: Vec<(f64, f64)>,
    /// Why hyperband stopped it, for an early-terminated member: its line is dashed and its
    /// last point (where it was stopped) crossed.
    pub stopped: Option<String>,
    /// The sweep's winner: a thick line, its best point starred.
    pub winner: Option<(f64, f64)>,
    /// In colour and in the legend; the others are drawn thin and grey, counted in one entry.
    pub keyed: bool,
}

/// A sweep's chart: every member's curve of the metric by step, the winner highlighted, the
/// early-terminated members dashed with a cross where they were stopped, and a legend beside
/// the plot with a colour per keyed member.
pub struct MemberChart {
    pub title: String,
    /// The metric and its goal, over the y axis.
    pub y_label: String,
    pub lines: Vec<MemberLine>,
}

/// The keyed members' colours, in the leaderboard's order.
pub const MEMBER_COLOURS: [&str; 12] = [
    "#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#2c7a7b", "#b7791f", "#c53030", "#4c51bf",
    "#276749", "#97266d", "#4a5568",
];
const MUTED: &str = "#a0aec0";
const MEMBER_WIDTH: f64 = 780.0;
const MEMBER_HEIGHT: f64 = 300.0;
/// Where the plot ends and the legend begins.
const LEGEND_X: f64 = 570.0;
const LEGEND_ROW: f64 = 14.0;

impl MemberChart {
    /// The SVG, or `None` when no member has a point.
    pub fn render(&self) -> Option<String> {
        let points = self.lines.iter().flat_map(|l| l.points.iter().copied());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        let mut any = false;
        for (x, y) in points.filter(|(x, y)| x.is_finite() && y.is_finite()) {
            any = true;
            (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
        }
        if !any {
            return None;
        }
        if y1 == y0 {
            (y0, y1) = (y0 - 1.0, y1 + 1.0);
        }
        let scale = Scale { x0, x1, y0, y1, right: LEGEND_X - 16.0, bottom: MEMBER_HEIGHT - PAD_Y - 10.0 };
        let mut svg = format!(
            "<svg class=\"chart members\" viewBox=\"0 0 {MEMBER_WIDTH} {MEMBER_HEIGHT}\" role=\"img\" aria-label=\"{}\">",
            esc(&self.title)
        );
        let (b, r) = (scale.bottom, scale.right);
        let _ = write!(
            svg,
            "<line class=\"axis\" x1=\"{PAD_LEFT}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\"/>\
             <line class=\"axis\" x1=\"{PAD_LEFT}\" y1=\"{PAD_Y}\" x2=\"{PAD_LEFT}\" y2=\"{b}\"/>\
             <text class=\"tick\" x=\"{l}\" y=\"{t}\" text-anchor=\"end\">{top}</text>\
             <text class=\"tick\" x=\"{l}\" y=\"{b}\" text-anchor=\"end\">{bottom}</text>\
             <text class=\"tick\" x=\"{PAD_LEFT}\" y=\"{tx}\">{left}</text>\
             <text class=\"tick\" x=\"{r}\" y=\"{tx}\" text-anchor=\"end\">{right}</text>\
             <text class=\"tick\" x=\"{mid}\" y=\"{tx}\" text-anchor=\"middle\">step</text>\
             <text class=\"tick\" x=\"{PAD_LEFT}\" y=\"{lab}\">{y_label}</text>",
            l = PAD_LEFT - 4.0,
            t = PAD_Y + 4.0,
            top = fmt_num(y1),
            bottom = fmt_num(y0),
            tx = b + 14.0,
            left = fmt_num(x0),
            right = fmt_num(x1),
            mid = (PAD_LEFT + r) / 2.0,
            lab = PAD_Y - 4.0,
            y_label = esc(&self.y_label),
        );
        // The muted lines under the keyed ones, the best on top, the winner over all.
        let colour = |i: usize| MEMBER_COLOURS[i % MEMBER_COLOURS.len()];
        let keyed: Vec<(usize, &MemberLine)> = self.lines.iter().filter(|l| l.keyed).enumerate().collect();
        let muted = self.lines.iter().filter(|l| !l.keyed).map(|l| (MUTED, l));
        let mut order: Vec<(&str, &MemberLine)> = muted.collect();
        order.extend(keyed.iter().rev().filter(|(_, l)| l.winner.is_none()).map(|(i, l)| (colour(*i), *l)));
        order.extend(keyed.iter().filter(|(_, l)| l.winner.is_some()).map(|(i, l)| (colour(*i), *l)));
        for (colour, line) in &order {
            let mut d = String::new();
            let finite = line.points.iter().filter(|(x, y)| x.is_finite() && y.is_finite());
            for (j, (x, y)) in finite.enumerate() {
                let _ = write!(d, "{}{:.1},{:.1}", if j == 0 { "M" } else { " L" }, scale.x(*x), scale.y(*y));
            }
            let mut class = String::from("member");
            for (on, name) in [
                (line.stopped.is_some(), " stopped"),
                (line.winner.is_some(), " winner"),
                (!line.keyed, " muted"),
            ] {
                if on {
                    class.push_str(name);
                }
            }
            let _ = write!(
                svg,
                "<path class=\"{class}\" data-k=\"{k}\" d=\"{d}\" stroke=\"{colour}\"><title>{}</title></path>",
                esc(&line.label),
                k = line.k,
            );
        }
        for (colour, line) in &order {
            if let (Some(why), Some((x, y))) = (&line.stopped, line.points.last()) {
                let (px, py) = (scale.x(*x), scale.y(*y));
                let _ = write!(
                    svg,
                    "<path class=\"stop-marker\" data-k=\"{k}\" data-step=\"{x}\" d=\"M{a:.1},{c:.1} L{b:.1},{e:.1} M{b:.1},{c:.1} L{a:.1},{e:.1}\" stroke=\"{colour}\">\
                     <title>member {k} stopped at step {x}: {}</title></path>",
                    esc(why),
                    k = line.k,
                    a = px - 4.5,
                    b = px + 4.5,
                    c = py - 4.5,
                    e = py + 4.5,
                );
            }
            if let Some((x, y)) = line.winner {
                let (px, py) = (scale.x(x), scale.y(y));
                let _ = write!(
                    svg,
                    "<circle class=\"winner-marker\" data-k=\"{k}\" cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"5\">\
                     <title>the winner, member {k}: {} at step {x}</title></circle>",
                    fmt_num(y),
                    k = line.k,
                );
            }
        }
        // The legend: what the line styles mean, then a colour per keyed member.
        let mut row = PAD_Y + 4.0;
        let sample = |svg: &mut String, row: f64, class: &str, colour: &str| {
            let _ = write!(
                svg,
                "<line class=\"{class}\" x1=\"{}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"{colour}\"/>",
                LEGEND_X,
                LEGEND_X + 22.0,
                y = row - 4.0,
            );
        };
        let text = |svg: &mut String, row: f64, text: &str| {
            let _ = write!(
                svg,
                "<text class=\"legend\" x=\"{}\" y=\"{row:.1}\">{}</text>",
                LEGEND_X + 28.0,
                esc(text)
            );
        };
        if self.lines.iter().any(|l| l.winner.is_some()) {
            svg.push_str("<g class=\"key style\" data-style=\"winner\">");
            sample(&mut svg, row, "member winner", MUTED);
            text(&mut svg, row, "winner (● its best)");
            svg.push_str("</g>");
            row += LEGEND_ROW;
        }
        if self.lines.iter().any(|l| l.stopped.is_some()) {
            svg.push_str("<g class=\"key style\" data-style=\"stopped\">");
            sample(&mut svg, row, "member stopped", MUTED);
            text(&mut svg, row, "early-terminated (× where)");
            svg.push_str("</g>");
            row += LEGEND_ROW;
        }
        row += 4.0;
        for (i, line) in &keyed {
            let _ = write!(svg, "<g class=\"key\" data-k=\"{}\">", line.k);
            let mut class = String::from("member");
            if line.stopped.is_some() {
                class.push_str(" stopped");
            }
            sample(&mut svg, row, &class, colour(*i));
            let label: String = if line.label.chars().count() > 30 {
                format!("{}…", line.label.chars().take(29).collect::<String>())
            } else {
                line.label.clone()
            };
            let _ = write!(
                svg,
                "<text class=\"legend\" x=\"{}\" y=\"{row:.1}\" fill=\"{}\">{}<title>{}</title></text></g>",
                LEGEND_X + 28.0,
                colour(*i),
                esc(&label),
                esc(&line.label)
            );
            row += LEGEND_ROW;
        }
        let others = self.lines.len() - keyed.len();
        if others > 0 {
            svg.push_str("<g class=\"key others\">");
            sample(&mut svg, row, "member muted", MUTED);
            text(&mut svg, row, &format!("{others} other members"));
            svg.push_str("</g>");
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

    #[test]
    fn a_sweep_chart_dashes_and_crosses_stopped_members_and_stars_the_winner() {
        let line = |k: u64, points: Vec<(f64, f64)>, stopped: bool, winner: bool, keyed: bool| MemberLine {
            k,
            label: format!("{k} · lr=<{k}>"),
            points,
            stopped: stopped.then(|| format!("early-terminated by sweep 00000000: member {k}")),
            winner: winner.then_some((2.0, 0.9)),
            keyed,
        };
        let chart = MemberChart {
            title: "reward by step".into(),
            y_label: "reward (maximize)".into(),
            lines: vec![
                line(2, vec![(0.0, 0.1), (1.0, 0.5), (2.0, 0.9)], false, true, true),
                line(0, vec![(0.0, 0.1), (1.0, 0.3), (2.0, 0.4)], false, false, true),
                line(5, vec![(0.0, 0.05), (1.0, 0.06)], true, false, true),
                line(7, vec![(0.0, 0.0), (1.0, 0.01)], true, false, false),
            ],
        }
        .render()
        .unwrap();
        assert_eq!(chart.matches("<path class=\"member").count(), 4, "{chart}");
        assert!(chart.contains("class=\"member winner\" data-k=\"2\""), "{chart}");
        assert!(chart.contains("class=\"member stopped\" data-k=\"5\""), "{chart}");
        assert!(chart.contains("class=\"member stopped muted\" data-k=\"7\""), "{chart}");
        // A cross where each stopped member was stopped: at its last point, step 1.
        assert_eq!(chart.matches("class=\"stop-marker\"").count(), 2, "{chart}");
        assert!(chart.contains("class=\"stop-marker\" data-k=\"5\" data-step=\"1\""), "{chart}");
        assert_eq!(chart.matches("class=\"winner-marker\"").count(), 1, "{chart}");
        // The legend: the two styles, a colour per keyed member (in the leaderboard's order),
        // and the rest counted.
        for (i, k) in [2, 0, 5].iter().enumerate() {
            let key = &chart[chart.find(&format!("<g class=\"key\" data-k=\"{k}\"")).unwrap()..];
            assert!(
                key[..key.find("</g>").unwrap()].contains(&format!("fill=\"{}\"", MEMBER_COLOURS[i])),
                "{chart}"
            );
        }
        assert!(
            chart.contains("data-style=\"stopped\"") && chart.contains("data-style=\"winner\""),
            "{chart}"
        );
        assert!(chart.contains(">1 other members<"), "{chart}");
        assert!(chart.contains("lr=&lt;2&gt;") && !chart.contains("lr=<2>"), "escaped");
        // The winner's line is drawn last: over every other.
        let last = chart.rfind("<path class=\"member").unwrap();
        assert!(chart[last..].starts_with("<path class=\"member winner\""), "{chart}");
        assert!(MemberChart { title: "x".into(), y_label: "x".into(), lines: vec![] }.render().is_none());
    }
}
