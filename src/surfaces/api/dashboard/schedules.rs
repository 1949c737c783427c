//! Schedules: per schedule, accuracy per model over its tests with the baseline (the median of
//! the last 5 succeeded tests) drawn as a line and regressions marked; next due time, firings,
//! skips and catch-ups; pause and resume.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

use super::html::{action_button, badge, esc, time, url_segment};
use super::svg::{LineChart, Series};
use crate::inference::regression::baselines;
use crate::model::{InferenceTest, TestState};
use crate::service::{Result, ScheduleDetail, Service};

/// Per-model accuracy of a test's results (models that produced none are left out).
fn accuracies(test: &InferenceTest) -> BTreeMap<String, f64> {
    test.results
        .as_ref()
        .and_then(|r| r.get("models"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| m.get("error").is_none_or(Value::is_null))
        // A verifiers test's figure is its mean reward.
        .filter_map(|m| {
            let figure = m.get("reward").or_else(|| m.get("accuracy"))?.as_f64()?;
            Some((m.get("model")?.as_str()?.to_string(), figure))
        })
        .collect()
}

/// The accuracy chart of one schedule's tests (newest first, as the service gives them).
pub fn accuracy_chart(name: &str, tests_newest_first: &[InferenceTest]) -> Option<String> {
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for test in tests_newest_first.iter().rev() {
        for (model, accuracy) in accuracies(test) {
            series.entry(model).or_default().push((test.created_at as f64, accuracy));
        }
    }
    // The baseline the newest test is judged against: its predecessors that succeeded.
    let history: Vec<BTreeMap<String, f64>> = tests_newest_first
        .iter()
        .skip(1)
        .filter(|t| t.state == TestState::Succeeded)
        .map(accuracies)
        .collect();
    let baselines = baselines(&history)
        .into_iter()
        .map(|(model, base)| (base, format!("{model} baseline (median of the last 5): {base:.3}")))
        .collect();
    let mut regressions = Vec::new();
    for test in tests_newest_first.iter().filter(|t| t.state == TestState::Regressed) {
        let found = test.results.as_ref().and_then(|r| r.get("regressions")).and_then(Value::as_array);
        for regression in found.into_iter().flatten() {
            let model = regression.get("model").and_then(Value::as_str).unwrap_or("?");
            let current = regression.get("current").and_then(Value::as_f64).unwrap_or(0.0);
            let reason = regression.get("reason").and_then(Value::as_str).unwrap_or("regressed");
            regressions.push((test.created_at as f64, current, format!("{model}: {reason}")));
        }
    }
    LineChart {
        title: format!("accuracy of {name}"),
        series: series.into_iter().map(|(name, points)| Series { name, points }).collect(),
        baselines,
        regressions,
        x_is_time: true,
        ..LineChart::default()
    }
    .render()
}

fn section(detail: &ScheduleDetail) -> String {
    let s = &detail.schedule;
    let target = url_segment(&s.name);
    let mut out = format!(
        "<section class=\"schedule\" data-schedule=\"{name}\"><h2>{name} {state}</h2><p class=\"meta\"><code>{cron}</code>{tz} · \
         environment {env} · models {models} · next due {next}</p><p class=\"actions\">",
        name = esc(&s.name),
        state = badge(if s.paused { "paused" } else { "active" }),
        cron = esc(&s.cron),
        tz = s.tz.as_deref().map(|t| format!(" ({})", esc(t))).unwrap_or_default(),
        env = esc(&s.spec.env_name),
        models = esc(&s.spec.models.join(", ")),
        next = if s.paused { "- (paused)".into() } else { time(detail.next_due) },
    );
    out.push_str(&if s.paused {
        action_button(
            &format!("/ui/schedules/{target}/resume"),
            "Resume",
            &format!("Resume schedule {}?", s.name),
        )
    } else {
        action_button(
            &format!("/ui/schedules/{target}/pause"),
            "Pause",
            &format!("Pause schedule {}?", s.name),
        )
    });
    out.push_str("</p>");
    match accuracy_chart(&s.name, &detail.tests) {
        Some(chart) => out.push_str(&chart),
        None => out.push_str("<p class=\"muted\">No results yet.</p>"),
    }
    out.push_str(
        "<table><thead><tr><th>test</th><th>state</th><th>created</th><th>reason</th></tr></thead><tbody>",
    );
    for t in &detail.tests {
        let _ = write!(
            out,
            "<tr><td><a href=\"/ui/tests?id={id}\">{short}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            badge(t.state.as_str()),
            time(Some(t.created_at)),
            esc(t.reason.as_deref().unwrap_or("")),
            id = t.id,
            short = crate::model::short_id(&t.id),
        );
    }
    out.push_str("</tbody></table>");
    if !detail.events.is_empty() {
        out.push_str("<h3>Firings, catch-ups and skips</h3><ul class=\"events\">");
        for e in detail.events.iter().rev().take(20) {
            let _ = write!(out, "<li>{} {}</li>", time(Some(e.at)), esc(&e.message));
        }
        out.push_str("</ul>");
    }
    out.push_str("</section>");
    out
}

pub async fn render(service: &Service) -> Result<String> {
    let schedules = service.schedules().await?;
    let mut body = String::from("<h1>Schedules</h1>");
    if schedules.is_empty() {
        body.push_str("<p class=\"muted\">No schedule (<code>lachesis schedule add</code> adds one).</p>");
    }
    for schedule in &schedules {
        body.push_str(&section(&service.schedule_detail(&schedule.name).await?));
    }
    Ok(body)
}
