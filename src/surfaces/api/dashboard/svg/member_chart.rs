//! A sweep's chart: every member's curve of the metric by step, in a colour per keyed member.

use std::fmt::Write;

use super::{PAD_LEFT, PAD_Y, Scale, fmt_num};
use crate::api::dashboard::html::esc;

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
    /// A pbt member's exploits: (the donor's checkpoint step it continued from, what happened),
    /// each a diamond on its line where its curve jumps to the donor's.
    pub exploits: Vec<(f64, String)>,
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
            for (step, what) in &line.exploits {
                // Where the new attempt's curve starts: its first point at or past the step.
                let Some((x, y)) = line.points.iter().find(|(x, _)| x >= step).or(line.points.last()) else {
                    continue;
                };
                let (px, py) = (scale.x(*x), scale.y(*y));
                let _ = write!(
                    svg,
                    "<path class=\"exploit-marker\" data-k=\"{k}\" data-step=\"{step}\" d=\"M{px:.1},{t:.1} L{r:.1},{py:.1} L{px:.1},{b:.1} L{l:.1},{py:.1} Z\" fill=\"{colour}\">\
                     <title>{}</title></path>",
                    esc(what),
                    k = line.k,
                    t = py - 5.0,
                    b = py + 5.0,
                    l = px - 5.0,
                    r = px + 5.0,
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
        if self.lines.iter().any(|l| !l.exploits.is_empty()) {
            svg.push_str("<g class=\"key style\" data-style=\"exploit\">");
            text(&mut svg, row, "◆ continued from another member's checkpoint");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_chart_dashes_and_crosses_stopped_members_and_stars_the_winner() {
        let line = |k: u64, points: Vec<(f64, f64)>, stopped: bool, winner: bool, keyed: bool| MemberLine {
            k,
            label: format!("{k} · lr=<{k}>"),
            points,
            stopped: stopped.then(|| format!("early-terminated by sweep 00000000: member {k}")),
            winner: winner.then_some((2.0, 0.9)),
            keyed,
            exploits: Vec::new(),
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
