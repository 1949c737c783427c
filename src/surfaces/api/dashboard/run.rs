//! One run: its stage timeline, progress and step chart, W&B metric curves, events, a live log
//! tail per stage, and stop / re-queue.
//!
//! Progress and metric history are read from the service's serialised results, by these shapes:
//! `progress`: `{step, total, fraction, steps_per_min, eta_seconds, updated_at}` (top level);
//! `history` (top level, or under `metrics` or `metrics.snapshot`): either rows
//! `[{"step": 3, "at": MS, "reward_mean": 0.4, ...}]` (`_step`, `_timestamp` in seconds and
//! `timestamp` are read too) or series `{"reward_mean": [[step, value], ...] | [{"step", "value"}]}`.
//! Whatever is absent is simply not drawn.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

use super::html::{action_button, badge, duration, esc, progress_bar, time, url_segment};
use super::svg::{LineChart, Series, StageSpan, timeline};
use crate::model::{Checkpoint, Event, ProgressPoint, now_millis};
use crate::service::{Result, RunStatus, Service};

/// How long the page waits for a run's metrics (W&B) before it is drawn without them.
const METRICS_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// One row of a run's metric history.
#[derive(Debug, Default, PartialEq)]
pub struct HistoryRow {
    pub step: Option<f64>,
    /// Milliseconds since the epoch.
    pub at: Option<f64>,
    pub values: BTreeMap<String, f64>,
}

const STEP_KEYS: [&str; 2] = ["step", "_step"];
/// `recorded_at`: when lachesis stored a reading (a metric row's); a time, never a metric to chart.
const TIME_KEYS: [&str; 5] = ["at", "updated_at", "recorded_at", "timestamp", "_timestamp"];

/// A time in seconds or milliseconds since the epoch, as milliseconds.
fn as_millis(value: f64) -> f64 {
    if value < 1e11 { value * 1000.0 } else { value }
}

/// The metric history in `results`, in either documented shape; empty when there is none.
pub fn history_rows(results: &Value) -> Vec<HistoryRow> {
    let found = [
        results.get("history"),
        results.pointer("/metrics/history"),
        results.pointer("/metrics/snapshot/history"),
    ]
    .into_iter()
    .flatten()
    .find(|v| !v.is_null());
    match found {
        Some(Value::Array(rows)) => rows
            .iter()
            .filter_map(Value::as_object)
            .map(|row| {
                let mut out = HistoryRow::default();
                for (key, value) in row {
                    let Some(number) = value.as_f64() else { continue };
                    if STEP_KEYS.contains(&key.as_str()) {
                        out.step = Some(number);
                    } else if TIME_KEYS.contains(&key.as_str()) {
                        out.at = Some(as_millis(number));
                    } else {
                        out.values.insert(key.clone(), number);
                    }
                }
                out
            })
            .collect(),
        Some(Value::Object(series)) => {
            let mut by_step: BTreeMap<i64, HistoryRow> = BTreeMap::new();
            for (name, points) in series {
                for point in points.as_array().into_iter().flatten() {
                    let (step, value) = match point {
                        Value::Array(pair) => {
                            (pair.first().and_then(Value::as_f64), pair.get(1).and_then(Value::as_f64))
                        }
                        Value::Object(o) => (
                            STEP_KEYS.iter().find_map(|k| o.get(*k)?.as_f64()),
                            o.get("value").and_then(Value::as_f64),
                        ),
                        _ => (None, None),
                    };
                    if let (Some(step), Some(value)) = (step, value) {
                        let row = by_step.entry(step as i64).or_default();
                        row.step = Some(step);
                        row.values.insert(name.clone(), value);
                    }
                }
            }
            by_step.into_values().collect()
        }
        _ => Vec::new(),
    }
}

/// Steps over time from the recorded changes of step, one line per attempt (a resumed attempt's
/// starts at its checkpoint's step), with a marker at each checkpoint: when it was recorded, at
/// its step, and a dashed line at each preemption (from its `stop: preempted by …` event).
/// `None` with fewer than two points.
pub fn attempts_chart(
    series: &[ProgressPoint],
    checkpoints: &[Checkpoint],
    events: &[Event],
) -> Option<String> {
    if series.len() < 2 {
        return None;
    }
    let mut lines: BTreeMap<i64, Vec<(f64, f64)>> = BTreeMap::new();
    for point in series {
        lines.entry(point.attempt).or_default().push((point.at as f64, point.step as f64));
    }
    LineChart {
        title: "steps over time".into(),
        series: lines
            .into_iter()
            .map(|(attempt, points)| Series { name: format!("attempt {attempt}"), points })
            .collect(),
        checkpoints: checkpoint_marks(checkpoints),
        preemptions: events
            .iter()
            .filter_map(|e| Some((e.at as f64, e.message.strip_prefix("stop: ")?.to_string())))
            .filter(|(_, what)| what.starts_with("preempted by run"))
            .collect(),
        x_is_time: true,
        ..LineChart::default()
    }
    .render()
}

/// A marker per checkpoint: (when, step, its tooltip).
fn checkpoint_marks(checkpoints: &[Checkpoint]) -> Vec<(f64, f64, String)> {
    checkpoints
        .iter()
        .map(|c| {
            let path = c.path.as_deref().or(c.weights.as_deref()).unwrap_or("-");
            (
                c.at as f64,
                c.step as f64,
                format!("checkpoint at step {} (attempt {}): {path}", c.step, c.attempt),
            )
        })
        .collect()
}

/// Steps over time: from the history rows that carry both, else from the run's start to the
/// latest progress report.
pub fn step_chart(results: &Value, rows: &[HistoryRow]) -> Option<String> {
    let mut points: Vec<(f64, f64)> = rows.iter().filter_map(|r| Some((r.at?, r.step?))).collect();
    if points.len() < 2 {
        let progress = results.get("progress").filter(|p| p.is_object())?;
        let step = progress.get("step")?.as_f64()?;
        let at = progress.get("updated_at").and_then(Value::as_f64).map(as_millis)?;
        let start = results.get("started_at").and_then(Value::as_f64).unwrap_or(at);
        points = vec![(start, 0.0), (at, step)];
    }
    LineChart {
        title: "steps over time".into(),
        series: vec![Series { name: "step".into(), points }],
        x_is_time: true,
        ..LineChart::default()
    }
    .render()
}

/// One chart per metric, each against the step.
pub fn metric_charts(rows: &[HistoryRow]) -> Vec<(String, String)> {
    let names: std::collections::BTreeSet<&String> = rows.iter().flat_map(|r| r.values.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            let points: Vec<(f64, f64)> = rows
                .iter()
                .enumerate()
                .filter_map(|(i, r)| Some((r.step.unwrap_or(i as f64), *r.values.get(name)?)))
                .collect();
            let chart = LineChart {
                title: name.clone(),
                series: vec![Series { name: name.clone(), points }],
                ..LineChart::default()
            }
            .render()?;
            Some((name.clone(), chart))
        })
        .collect()
}

/// Stop signals and kills the daemon recorded against a stage, while it ran (`from`..`to`: an
/// earlier attempt's stage of the same name has its own).
fn signals(events: &[Event], stage: &str, from: Option<i64>, to: Option<i64>) -> Vec<(i64, String)> {
    events
        .iter()
        .filter(|e| {
            e.stage.as_deref() == Some(stage)
                && (e.message.contains("SIGTERM") || e.message.contains("SIGKILL"))
                && from.is_none_or(|from| e.at >= from)
                && to.is_none_or(|to| e.at <= to)
        })
        .map(|e| (e.at, e.message.clone()))
        .collect()
}

/// The timeline's bars: every attempt's stages, oldest attempt first, each labelled with its
/// attempt when there were several.
fn stage_spans(status: &RunStatus, events: &[Event]) -> Vec<StageSpan> {
    let several = !status.earlier_attempts.is_empty();
    let earlier = status.earlier_attempts.iter().flat_map(|a| a.stages.iter().map(move |s| (a.attempt, s)));
    let current = status.stages.iter().map(|s| (status.run.attempt, s));
    earlier
        .chain(current)
        .map(|(attempt, s)| StageSpan {
            name: s.name.clone(),
            attempt: several.then_some(attempt),
            state: s.record.state.as_str().to_string(),
            started_at: s.record.started_at,
            ready_at: s.ready_at,
            ended_at: s.record.ended_at,
            exit: s.record.exit.map(|e| e.to_string()),
            signals: signals(events, &s.name, s.record.started_at, s.record.ended_at),
        })
        .collect()
}

pub async fn render(service: &Service, id: &str) -> Result<(String, String)> {
    let status: RunStatus = service.run_status(id).await?;
    let full_id = status.run.id.to_string();
    let (_, events) = service.run_events(&full_id).await?;
    // Results add the W&B metrics, which may wait on W&B: the page doesn't wait long for them.
    let results =
        tokio::time::timeout(METRICS_WAIT, service.run_results(&full_id)).await.ok().and_then(Result::ok);
    let mut value = serde_json::to_value(&status).unwrap_or(Value::Null);
    // The status carries progress on its run; the page reads it at the top level.
    if let Some(progress) = value.pointer("/run/progress").cloned()
        && let Value::Object(fields) = &mut value
    {
        fields.entry("progress").or_insert(progress);
    }
    let series = match service.resolve_run(&full_id).await {
        Ok(run) => service.run_progress_series(&run).await.unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let checkpoints = service.run_checkpoints_of(status.run.id).await.unwrap_or_default();
    if let (Some(results), Value::Object(fields)) = (&results, &mut value)
        && let Ok(Value::Object(more)) = serde_json::to_value(results)
    {
        for (key, more_value) in more {
            fields.entry(key).or_insert(more_value);
        }
    }
    let run = &status.run;
    let now = now_millis();
    let short = crate::model::short_id(&run.id);
    let mut body = format!(
        "<div class=\"live\" id=\"live-run\"><h1>Run {short} {}</h1><p class=\"meta\">workflow <b>{}</b> · environment <b>{}</b> · attempt {} · node {} · \
         created {} · started {} · ended {}{}</p>",
        badge(run.state.as_str()),
        esc(&run.workflow),
        esc(run.env_name.as_deref().unwrap_or("-")),
        run.attempt,
        esc(run.node.as_deref().unwrap_or("-")),
        time(Some(run.created_at)),
        time(run.started_at),
        time(run.ended_at),
        run.started_at
            .map(|s| format!(" · took {}", duration(run.ended_at.unwrap_or(now) - s)))
            .unwrap_or_default(),
    );
    if let (Some(first), Some(since)) = (status.first_started_at, status.since_first_start_ms)
        && run.attempt > 1
    {
        let _ = write!(
            body,
            "<p class=\"meta attempts\">first attempt started {} · {} since, over {} attempts</p>",
            time(Some(first)),
            duration(since),
            run.attempt
        );
    }
    if let Some(member) = &run.sweep {
        let _ = write!(
            body,
            "<p class=\"meta sweep\">member {} of <a href=\"/ui/sweeps/{}\">sweep {}</a></p>",
            member.k,
            member.sweep,
            crate::model::short_id(&member.sweep)
        );
    }
    if let Some(reason) = &run.reason {
        let _ = write!(body, "<p class=\"reason\">{}</p>", esc(reason));
    }
    if !run.needs.is_empty() {
        // What it asked of the daemon's pools and, while it is live, the units it holds.
        let units: Vec<String> = run
            .units
            .iter()
            .map(|(pool, units)| {
                format!("{pool} {}", if units.is_empty() { "none".into() } else { units.join(",") })
            })
            .collect();
        let held = if units.is_empty() {
            String::new()
        } else {
            format!(" · units <b>{}</b>", esc(&units.join(" · ")))
        };
        let _ =
            write!(body, "<p class=\"meta pools\">needs <b>{}</b>{held}</p>", esc(&run.needs.to_string()));
    }
    if let Some(from) = &status.resumed_from {
        let _ = write!(
            body,
            "<p class=\"resumed\">attempt {} resumed from step {} ({})</p>",
            run.attempt,
            from.step,
            esc(&from.path)
        );
    }
    if let Some(at) = run.time_limit_at {
        let _ = write!(body, "<p class=\"time-left\">time left {} (time limit)</p>", duration(at - now));
    }
    if let Some(last) = checkpoints.last() {
        let where_ = last.path.as_deref().or(last.weights.as_deref()).unwrap_or("-");
        let _ = write!(
            body,
            "<p class=\"checkpoint\">last checkpoint: step {} (attempt {}) {}</p>",
            last.step,
            last.attempt,
            esc(where_)
        );
    }
    if let Some(line) = crate::model::headline_line(&status.metrics) {
        let _ = write!(body, "<p class=\"metrics\">metrics: {}</p>", esc(&line));
    }
    if !status.after.is_empty() {
        body.push_str("<p class=\"after\">after ");
        let deps: Vec<String> = status
            .after
            .iter()
            .map(|d| {
                let pages = match d.awaited {
                    crate::model::Awaited::Run { .. } => "runs",
                    crate::model::Awaited::Sweep { .. } => "sweeps",
                };
                format!(
                    "<a href=\"/ui/{pages}/{}\">{}</a>: {}",
                    d.awaited.id(),
                    esc(&d.describe()),
                    d.settled.as_str()
                )
            })
            .collect();
        body.push_str(&deps.join(" · "));
        body.push_str("</p>");
    }
    let target = url_segment(&run.id.to_string());
    body.push_str("<p class=\"actions\">");
    if !run.state.is_terminal() {
        body.push_str(&action_button(
            &format!("/ui/runs/{target}/stop"),
            "Stop",
            &format!("Stop run {short}?"),
        ));
    } else {
        body.push_str(&action_button(
            &format!("/ui/runs/{target}/requeue"),
            "Re-queue",
            &format!("Queue a new run of {} like {short}?", run.workflow),
        ));
    }
    body.push_str("</p>");

    let _ = write!(
        body,
        "<h2>Progress</h2><div class=\"run-progress\">{}</div>",
        progress_bar(value.get("progress"))
    );
    let spans = stage_spans(&status, &events);
    let _ = write!(body, "<h2>Stages</h2>{}", timeline(&spans, now));

    let rows = history_rows(&value);
    // The recorded changes of step draw the chart; W&B's history stands in without them.
    if let Some(chart) = attempts_chart(&series, &checkpoints, &events).or_else(|| step_chart(&value, &rows))
    {
        let _ = write!(body, "<h2>Steps over time</h2><div class=\"step-chart\">{chart}</div>");
    }
    let charts = metric_charts(&rows);
    if !charts.is_empty() {
        body.push_str("<h2>Training metrics</h2><div class=\"metric-charts\">");
        for (name, chart) in charts {
            let _ = write!(body, "<figure><figcaption>{}</figcaption>{chart}</figure>", esc(&name));
        }
        body.push_str("</div>");
    } else if results.is_none() {
        body.push_str("<p class=\"muted\">No metric history: the metrics did not answer in time.</p>");
    } else if let Some(error) = results.as_ref().and_then(|r| r.metrics.wandb_error.as_ref()) {
        let _ = write!(body, "<p class=\"muted\">No metric history: {}</p>", esc(error));
    }

    body.push_str("</div><h2>Logs</h2><div class=\"tabs\">");
    for (i, stage) in status.stages.iter().enumerate() {
        let _ = write!(
            body,
            "<button type=\"button\" class=\"tab{}\" data-log=\"/ui/runs/{target}/log?stage={}\">{}</button>",
            if i == 0 { " active" } else { "" },
            url_segment(&stage.name),
            esc(&stage.name)
        );
    }
    body.push_str("</div><pre id=\"log\" class=\"log\"></pre>");

    body.push_str("<div class=\"live\" id=\"live-events\"><h2>Events</h2><table class=\"events\"><thead><tr><th>at</th><th>kind</th><th>stage</th><th>what</th></tr></thead><tbody>");
    for event in &events {
        let states = match (event.from_state, event.to_state) {
            (Some(from), Some(to)) => format!("{from} → {to}: "),
            _ => String::new(),
        };
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}{}</td></tr>",
            time(Some(event.at)),
            event.kind.as_str(),
            esc(event.stage.as_deref().unwrap_or("")),
            esc(&states),
            esc(&event.message)
        );
    }
    body.push_str("</tbody></table></div>");
    Ok((format!("Run {short}"), body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn history_rows_and_series_both_read() {
        let rows = history_rows(&json!({ "metrics": { "history": [
            { "_step": 1, "_timestamp": 1_700_000_000.0, "reward_mean": 0.1, "loss": 2.0 },
            { "_step": 2, "_timestamp": 1_700_000_060.0, "reward_mean": 0.3, "loss": 1.5 },
        ] } }));
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].step, Some(2.0));
        assert_eq!(rows[1].at, Some(1_700_000_060_000.0));
        assert_eq!(rows[0].values["reward_mean"], 0.1);
        // A stored row says when it was recorded: a time, not a curve of its own.
        let stored = history_rows(
            &json!({ "history": [{ "step": 2, "loss": 0.25, "recorded_at": 1_795_846_173_388_i64 }] }),
        );
        assert_eq!((stored[0].values.len(), stored[0].at), (1, Some(1_795_846_173_388.0)));
        let series = history_rows(&json!({ "history": {
            "train/percent_correct": [[1, 0.2], [2, 0.4]],
            "eval/percent_correct": [{ "step": 2, "value": 0.35 }],
        } }));
        assert_eq!(series.len(), 2);
        assert_eq!(series[1].values.len(), 2);
        assert!(history_rows(&json!({ "metrics": { "snapshot": null } })).is_empty());
    }

    #[test]
    fn charts_are_drawn_from_history_or_progress_and_not_from_nothing() {
        let value = json!({ "history": [
            { "step": 1, "at": 1_700_000_000_000i64, "reward_mean": 0.1 },
            { "step": 5, "at": 1_700_000_060_000i64, "reward_mean": 0.4 },
        ] });
        let rows = history_rows(&value);
        assert!(step_chart(&value, &rows).unwrap().contains("class=\"series\""));
        let charts = metric_charts(&rows);
        assert_eq!(charts.len(), 1);
        assert_eq!(charts[0].0, "reward_mean");
        let progress_only = json!({ "started_at": 1_700_000_000_000i64, "progress": {
            "step": 30, "total": 120, "fraction": 0.25, "steps_per_min": 6.0, "eta_seconds": 900,
            "updated_at": 1_700_000_300_000i64 } });
        assert!(step_chart(&progress_only, &[]).is_some());
        assert!(step_chart(&json!({ "started_at": 1 }), &[]).is_none());
    }

    #[test]
    fn each_attempt_is_a_line_each_checkpoint_a_marker_and_each_preemption_a_dashed_line() {
        let point = |attempt, step, at| ProgressPoint { attempt, step, total: Some(10), at };
        let series = [point(1, 0, 1_000), point(1, 6, 7_000), point(2, 6, 9_000), point(2, 10, 13_000)];
        let saved = |attempt, step: i64, at| Checkpoint {
            attempt,
            step,
            path: Some(format!("tinker://a/weights/{step:06}")),
            weights: None,
            at,
        };
        let preempted = Event {
            id: 1,
            run_id: uuid::Uuid::nil(),
            at: 7_500,
            kind: crate::model::EventKind::State,
            from_state: None,
            to_state: None,
            stage: None,
            message: "stop: preempted by run 3f2a9c1e for 1 gpu unit; ≈ 1s of work since the checkpoint at step 6 will be redone".into(),
        };
        let chart =
            attempts_chart(&series, &[saved(1, 6, 6_500), saved(2, 8, 11_000)], &[preempted]).unwrap();
        assert_eq!(chart.matches("class=\"preemption\"").count(), 1, "{chart}");
        assert!(chart.contains("<title>preempted by run 3f2a9c1e for 1 gpu unit;"), "{chart}");
        assert_eq!(chart.matches("class=\"series\"").count(), 2, "{chart}");
        assert!(chart.contains("<title>attempt 2</title>"), "{chart}");
        assert_eq!(chart.matches("class=\"checkpoint\"").count(), 2, "{chart}");
        assert!(
            chart.contains("data-step=\"6\"")
                && chart
                    .contains("<title>checkpoint at step 6 (attempt 1): tinker://a/weights/000006</title>"),
            "{chart}"
        );
        assert!(attempts_chart(&series[..1], &[], &[]).is_none(), "one point is no line");
    }
}
