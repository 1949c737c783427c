//! The runs page: counts by state, the pending queue in claim order, and a paged table.

use std::fmt::Write;

use serde::Deserialize;
use serde_json::Value;

use super::html::{badge, duration, esc, progress_cell, time, url_segment};
use crate::model::RunQuery;
use crate::model::{RunState, now_millis};
use crate::service::{Result, RunSummary, Service};

/// Rows per page of the runs table: a morning's glance, and a page Chromium lays out in a
/// few milliseconds (1,000 rows took it most of a second).
pub const PAGE_SIZE: usize = 100;
/// Pending runs whose waiting note is looked up (each is a status call).
const QUEUE_DETAIL: usize = 20;

#[derive(Deserialize, Default)]
pub struct RunsQuery {
    pub state: Option<String>,
    pub workflow: Option<String>,
    pub page: Option<usize>,
}

pub async fn render(service: &Service, query: &RunsQuery) -> Result<String> {
    let state = query.state.as_deref().filter(|s| !s.is_empty()).and_then(|s| s.parse::<RunState>().ok());
    let workflow = query.workflow.as_deref().filter(|w| !w.is_empty());
    let page = query.page.unwrap_or(1).max(1);
    let counts = service.run_counts().await?;
    // The service lists newest first; a page is a window of that order.
    let wanted = if workflow.is_some() { 10_000 } else { page * PAGE_SIZE + 1 };
    let listed = service.list(&RunQuery { state, limit: Some(wanted as i64) }).await?;
    let matching: Vec<&RunSummary> =
        listed.iter().filter(|r| workflow.is_none_or(|w| r.workflow == w)).collect();
    let rows: Vec<&RunSummary> =
        matching.iter().skip((page - 1) * PAGE_SIZE).take(PAGE_SIZE).copied().collect();
    let more = matching.len() > page * PAGE_SIZE;
    let pending = service.list(&RunQuery { state: Some(RunState::Pending), limit: Some(200) }).await?;

    let mut body = String::from("<h1>Runs</h1><div class=\"counts\">");
    let total: i64 = counts.iter().map(|(_, n)| n).sum();
    let _ = write!(body, "<a class=\"count\" href=\"/ui/runs\"><b>{total}</b> all</a>");
    for (name, n) in &counts {
        let _ = write!(
            body,
            "<a class=\"count\" data-state=\"{s}\" href=\"/ui/runs?state={s}\"><b>{n}</b> {}</a>",
            badge(name),
            s = esc(name)
        );
    }
    body.push_str("</div>");
    body.push_str(&filters(query, &counts));
    body.push_str(&queue(service, &pending).await);

    let _ = write!(
        body,
        "<h2>{} run(s){}</h2>",
        matching.len(),
        if more { " (more on the next page)" } else { "" }
    );
    body.push_str(
        "<table class=\"runs\"><thead><tr><th>run</th><th>state</th><th>workflow</th><th>environment</th>\
         <th>attempt</th><th>node</th><th>progress</th><th>started</th><th>duration</th><th>reason</th></tr></thead><tbody>",
    );
    let now = now_millis();
    for run in &rows {
        body.push_str(&row(run, now));
    }
    body.push_str("</tbody></table>");
    if page > 1 || more {
        body.push_str("<p class=\"pager\">");
        let link = |p: usize| {
            format!(
                "/ui/runs?state={}&amp;workflow={}&amp;page={p}",
                url_segment(query.state.as_deref().unwrap_or("")),
                url_segment(query.workflow.as_deref().unwrap_or(""))
            )
        };
        if page > 1 {
            let _ = write!(body, "<a href=\"{}\">previous</a> ", link(page - 1));
        }
        let _ = write!(body, "page {page} ");
        if more {
            let _ = write!(body, "<a href=\"{}\">next</a>", link(page + 1));
        }
        body.push_str("</p>");
    }
    Ok(body)
}

fn filters(query: &RunsQuery, counts: &[(String, i64)]) -> String {
    let current = query.state.as_deref().unwrap_or("");
    let mut options = String::from("<option value=\"\">any state</option>");
    for (name, _) in counts {
        let selected = if name == current { " selected" } else { "" };
        let _ = write!(options, "<option value=\"{n}\"{selected}>{n}</option>", n = esc(name));
    }
    format!(
        "<form class=\"filters\" method=\"get\" action=\"/ui/runs\"><select name=\"state\">{options}</select>\
         <input name=\"workflow\" placeholder=\"workflow\" value=\"{}\"><button type=\"submit\">Filter</button></form>",
        esc(query.workflow.as_deref().unwrap_or(""))
    )
}

/// The pending runs in the order they will be claimed, with what each waits for.
async fn queue(service: &Service, pending: &[RunSummary]) -> String {
    if pending.is_empty() {
        return "<h2>Queue</h2><p class=\"muted\">Nothing is waiting.</p>".into();
    }
    let mut out = format!(
        "<h2>Queue ({})</h2><table class=\"queue\"><thead><tr><th>#</th><th>run</th><th>workflow</th>\
         <th>priority</th><th>waiting for</th></tr></thead><tbody>",
        pending.len()
    );
    let now = now_millis();
    for (i, run) in pending.iter().enumerate() {
        let waiting = if i < QUEUE_DETAIL {
            service.status(&run.id.to_string()).await.ok().and_then(|s| s.waiting_for)
        } else {
            None
        };
        let waiting = waiting
            .or_else(|| run.held_at.map(|_| "held: a release (`lachesis run release`)".to_string()))
            .or_else(|| {
                run.not_before
                    .filter(|t| *t > now)
                    .map(|t| format!("its retry backoff (until {})", time(Some(t))))
            })
            .unwrap_or_else(
                || if i == 0 { "a free slot (next)".into() } else { "the runs ahead of it".into() },
            );
        let _ = write!(
            out,
            "<tr><td>{}</td><td><a href=\"/ui/runs/{id}\">{short}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            i + 1,
            esc(&run.workflow),
            run.priority,
            esc(&waiting),
            id = run.id,
            short = crate::model::short_id(&run.id),
        );
    }
    out.push_str("</tbody></table>");
    out
}

fn row(run: &RunSummary, now: i64) -> String {
    // Progress comes from the run's own serialised form, so it shows once the service adds it.
    let value = serde_json::to_value(run).unwrap_or(Value::Null);
    let took =
        run.started_at.map(|s| duration(run.ended_at.unwrap_or(now) - s)).unwrap_or_else(|| "-".into());
    format!(
        "<tr data-run=\"{id}\" data-state=\"{state}\"><td><a href=\"/ui/runs/{id}\">{short}</a></td><td>{badge}</td>\
         <td>{workflow}</td><td>{env}</td><td>{attempt}</td><td>{node}</td><td class=\"progress-cell\">{progress}</td>\
         <td>{started}</td><td>{took}</td><td class=\"reason\">{reason}</td></tr>",
        id = run.id,
        short = crate::model::short_id(&run.id),
        state = run.state.as_str(),
        badge = badge(run.state.as_str()),
        workflow = esc(&run.workflow),
        env = esc(run.env_name.as_deref().unwrap_or("-")),
        attempt = run.attempt,
        node = esc(run.node.as_deref().unwrap_or("-")),
        progress = progress_cell(value.get("progress")),
        started = time(run.started_at),
        reason = esc(run.reason.as_deref().unwrap_or("")),
    )
}
