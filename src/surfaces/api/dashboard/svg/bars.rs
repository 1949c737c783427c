//! Horizontal bars, one per label.

use std::fmt::Write;

use super::{WIDTH, fmt_num};
use crate::api::dashboard::html::esc;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_maximum() {
        let svg = bar_chart("accuracy", &[("a".into(), 1.0), ("b".into(), 0.5)], 1.0);
        assert_eq!(svg.matches("class=\"bar\"").count(), 2);
    }
}
