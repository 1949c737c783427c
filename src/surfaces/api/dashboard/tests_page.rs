//! Inference tests: the latest tests, and for one of them a per-model accuracy bar chart, the
//! per-step scores, and the failed models' last log lines.

use std::fmt::Write;

use serde_json::Value;

use super::html::{badge, esc, time};
use super::svg::{LineChart, Series, bar_chart};
use crate::service::{Result, Service};

const LISTED: i64 = 50;

pub async fn render(service: &Service, selected: Option<&str>) -> Result<String> {
    let tests = service.tests(LISTED).await?;
    let mut body = String::from("<h1>Inference tests</h1>");
    if tests.is_empty() {
        body.push_str(
            "<p class=\"muted\">No inference test yet (<code>lachesis test</code> queues one).</p>",
        );
        return Ok(body);
    }
    let chosen = match selected {
        Some(id) => id.to_string(),
        None => tests[0].id.to_string(),
    };
    let status = service.test_status(&chosen).await?;
    let test = &status.test;
    let _ = write!(
        body,
        "<h2>Test {} {} on {}</h2><p class=\"meta\">created {} · ended {}{}</p>",
        crate::model::short_id(&test.id),
        badge(test.state.as_str()),
        esc(&test.env_name),
        time(Some(test.created_at)),
        time(test.ended_at),
        test.reason.as_deref().map(|r| format!(" · {}", esc(r))).unwrap_or_default(),
    );
    let models: Vec<&Value> = test
        .results
        .as_ref()
        .and_then(|r| r.get("models"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    if models.is_empty() {
        body.push_str(
            "<table><thead><tr><th>model</th><th>process</th><th>groups written</th></tr></thead><tbody>",
        );
        for (task, groups) in status.tasks.iter().zip(&status.groups_written) {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{groups}</td></tr>",
                esc(&task.model),
                badge(task.record.state.as_str())
            );
        }
        body.push_str("</tbody></table>");
    } else {
        let name = |m: &Value| m.get("model").and_then(Value::as_str).unwrap_or("?").to_string();
        // A verifiers test's figure is its mean reward over vf-eval's rollouts.
        let (heading, title, key) = match test.spec.env_kind {
            crate::model::EnvKind::Atropos => ("Accuracy", "accuracy", "accuracy"),
            crate::model::EnvKind::Verifiers => ("Mean reward", "mean reward", "reward"),
        };
        let bars: Vec<(String, f64)> =
            models.iter().map(|m| (name(m), m.get(key).and_then(Value::as_f64).unwrap_or(0.0))).collect();
        let _ = write!(
            body,
            "<h3>{heading} per model</h3>{}",
            bar_chart(&format!("{title} per model"), &bars, 1.0)
        );
        let series: Vec<Series> = models
            .iter()
            .map(|m| Series {
                name: name(m),
                points: m
                    .get("steps")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|s| Some((s.get("step")?.as_f64()?, s.get("mean_score")?.as_f64()?)))
                    .collect(),
            })
            .collect();
        if let Some(chart) =
            (LineChart { title: "mean score per step".into(), series, ..LineChart::default() }).render()
        {
            let _ = write!(body, "<h3>Score per step</h3>{chart}");
        }
        for model in &models {
            if let Some(error) = model.get("error").and_then(Value::as_str) {
                let _ = write!(
                    body,
                    "<h3 class=\"failed\">{} failed</h3><pre class=\"log\">{}</pre>",
                    esc(&name(model)),
                    esc(error)
                );
            }
        }
    }
    body.push_str(
        "<h2>Latest tests</h2><table><thead><tr><th>test</th><th>state</th><th>environment</th><th>models</th><th>created</th><th>reason</th></tr></thead><tbody>",
    );
    for t in &tests {
        let _ = write!(
            body,
            "<tr><td><a href=\"/ui/tests?id={id}\">{short}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            badge(t.state.as_str()),
            esc(&t.env_name),
            esc(&t.spec.models.join(", ")),
            time(Some(t.created_at)),
            esc(t.reason.as_deref().unwrap_or("")),
            id = t.id,
            short = crate::model::short_id(&t.id),
        );
    }
    body.push_str("</tbody></table>");
    Ok(body)
}
