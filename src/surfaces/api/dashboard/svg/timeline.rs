//! A run's stages on one time axis: a bar per stage from its start through "up" to its exit.

use std::fmt::Write;

use super::WIDTH;
use crate::api::dashboard::html::{duration, esc};

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
        crate::api::dashboard::html::time(Some(t0)),
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
}
