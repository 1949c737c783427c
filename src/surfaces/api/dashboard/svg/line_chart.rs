//! A line chart: steps over time, W&B metrics, accuracy per schedule with its baselines and
//! regression markers, checkpoints and preemptions.

use std::fmt::Write;

use super::{COLOURS, HEIGHT, PAD_LEFT, PAD_RIGHT, PAD_Y, Scale, WIDTH, fmt_num};
use crate::api::dashboard::html::esc;

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
            if self.x_is_time { crate::api::dashboard::html::time(Some(x as i64)) } else { fmt_num(x) }
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

#[cfg(test)]
mod tests {
    use super::super::COLOURS;
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
}
