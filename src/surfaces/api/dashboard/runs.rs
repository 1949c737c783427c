//! The runs page: counts by state, a page of the pending queue in claim order, and a paged
//! table; each costs the rows it shows, however deep the queue.

use std::fmt::Write;

use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::html::{badge, duration, esc, progress_cell, time, url_segment};

use crate::model::{RunPage, RunState, StateCounts, now_millis};
use crate::service::{Result, RunSummary, Service};

/// Rows per page of the runs table: a morning's glance, and a page Chromium lays out in a
/// few milliseconds (1,000 rows took it most of a second).
pub const PAGE_SIZE: usize = 100;
/// Rows per page of the queue: the head of a deep queue, not all of it.
pub const QUEUE_PAGE: usize = 50;
/// Pending runs whose waiting note is looked up (each is a read of the run).
const QUEUE_DETAIL: usize = 20;

#[derive(Deserialize, Default)]
pub struct RunsQuery {
    pub state: Option<String>,
    pub workflow: Option<String>,
    pub page: Option<usize>,
    /// The queue's page starts after this pending run (its id); from the head when absent.
    pub after: Option<String>,
}

pub async fn render(service: &Service, query: &RunsQuery) -> Result<String> {
    let state = query.state.as_deref().filter(|s| !s.is_empty()).and_then(|s| s.parse::<RunState>().ok());
    let workflow = query.workflow.as_deref().filter(|w| !w.is_empty());
    // A page far past the end is an empty page, never an overflow.
    let page = query.page.unwrap_or(1).clamp(1, 1_000_000);
    let counts = service.run_counts().await?;
    // One row past the page says whether there is a next one; nothing before the page is read.
    let listed = service
        .runs_page(&RunPage {
            state,
            workflow,
            offset: ((page - 1) * PAGE_SIZE) as i64,
            limit: PAGE_SIZE as i64 + 1,
        })
        .await?;
    let more = listed.len() > PAGE_SIZE;
    let rows = &listed[..listed.len().min(PAGE_SIZE)];
    let waiting = counts.get(RunState::Pending);

    let mut body = String::from("<h1>Runs</h1><div class=\"counts\">");
    let total = counts.total();
    let _ = write!(body, "<a class=\"count\" href=\"/ui/runs\"><b>{total}</b> all</a>");
    for (state, n) in counts.iter() {
        let name = state.as_str();
        let _ = write!(
            body,
            "<a class=\"count\" data-state=\"{s}\" href=\"/ui/runs?state={s}\"><b>{n}</b> {}</a>",
            badge(name),
            s = esc(name)
        );
    }
    body.push_str("</div>");
    body.push_str(&filters(query, &counts));
    body.push_str(&queue(service, query, waiting).await?);

    // The heading's count is the state's (or every run's); a workflow filter is not counted.
    let matching = match (state, workflow) {
        (_, Some(_)) => None,
        (Some(state), None) => Some(counts.get(state)),
        (None, None) => Some(total),
    };
    let shown = match matching {
        Some(n) => format!("{n} run(s)"),
        None => "Runs".to_string(),
    };
    let _ = write!(body, "<h2>{shown}{}</h2>", if more { " (more on the next page)" } else { "" });
    body.push_str(
        "<table class=\"runs\"><thead><tr><th>run</th><th>state</th><th>workflow</th><th>environment</th>\
         <th>attempt</th><th>node</th><th>progress</th><th>started</th><th>duration</th><th>reason</th></tr></thead><tbody>",
    );
    let now = now_millis();
    for run in rows {
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

fn filters(query: &RunsQuery, counts: &StateCounts<RunState>) -> String {
    let current = query.state.as_deref().unwrap_or("");
    let mut options = String::from("<option value=\"\">any state</option>");
    for name in counts.iter().map(|(state, _)| state.as_str()) {
        let selected = if name == current { " selected" } else { "" };
        let _ = write!(options, "<option value=\"{n}\"{selected}>{n}</option>", n = esc(name));
    }
    format!(
        "<form class=\"filters\" method=\"get\" action=\"/ui/runs\"><select name=\"state\">{options}</select>\
         <input name=\"workflow\" placeholder=\"workflow\" value=\"{}\"><button type=\"submit\">Filter</button></form>",
        esc(query.workflow.as_deref().unwrap_or(""))
    )
}

/// One page of the pending runs in the order they will be claimed, with what each waits for,
/// and a link to the next page (keyed by the page's last run, so a page costs its rows).
async fn queue(service: &Service, query: &RunsQuery, waiting: i64) -> Result<String> {
    // An id that does not parse, or that left the queue, starts the page at the head.
    let after = query.after.as_deref().and_then(|a| a.parse::<Uuid>().ok());
    let mut pending = service.queued_runs(after, QUEUE_PAGE as i64 + 1).await?;
    let from_head = pending.is_empty() && after.is_some();
    if from_head {
        pending = service.queued_runs(None, QUEUE_PAGE as i64 + 1).await?;
    }
    if pending.is_empty() {
        return Ok("<h2>Queue</h2><p class=\"muted\">Nothing is waiting.</p>".into());
    }
    let more = pending.len() > QUEUE_PAGE;
    pending.truncate(QUEUE_PAGE);
    // The page's first place, counted on the queue index (1 at the head).
    let first = match (after, from_head) {
        (Some(_), false) => service.run_queue_position(pending[0].id).await?.unwrap_or(1),
        _ => 1,
    };
    let mut out = format!(
        "<h2>Queue ({waiting})</h2><table class=\"queue\"><thead><tr><th>#</th><th>run</th><th>workflow</th>\
         <th>priority</th><th>waiting for</th></tr></thead><tbody>"
    );
    let now = now_millis();
    for (i, run) in pending.iter().enumerate() {
        let place = first + i;
        let waiting = if i < QUEUE_DETAIL {
            match service.resolve_run(&run.id.to_string()).await {
                Ok(full) => service.run_waiting_for(&full).await,
                Err(_) => None,
            }
        } else {
            None
        };
        let waiting = waiting
            .or_else(|| run.held_at.map(|_| "held: a release (`lachesis run release`)".to_string()))
            .or_else(|| {
                let n = run.deps_open;
                (n > 0).then(|| format!("{n} of its dependencies (runs or sweeps) to be met"))
            })
            .or_else(|| {
                run.not_before
                    .filter(|t| *t > now)
                    .map(|t| format!("its retry backoff (until {})", time(Some(t))))
            })
            .unwrap_or_else(|| {
                if place == 1 { "a free slot (next)".into() } else { "the runs ahead of it".into() }
            });
        let _ = write!(
            out,
            "<tr data-run=\"{id}\"><td>{place}</td><td><a href=\"/ui/runs/{id}\">{short}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&run.workflow),
            run.priority,
            esc(&waiting),
            id = run.id,
            short = crate::model::short_id(&run.id),
        );
    }
    out.push_str("</tbody></table>");
    if more || first > 1 {
        out.push_str("<p class=\"pager queue-pager\">");
        if first > 1 {
            out.push_str("<a href=\"/ui/runs\">head of the queue</a> ");
        }
        let _ = write!(out, "places {first}\u{2013}{}", first + pending.len() - 1);
        if let (true, Some(last)) = (more, pending.last()) {
            let _ = write!(
                out,
                " <a href=\"/ui/runs?state={}&amp;workflow={}&amp;after={}\">next</a>",
                url_segment(query.state.as_deref().unwrap_or("")),
                url_segment(query.workflow.as_deref().unwrap_or("")),
                last.id
            );
        }
        out.push_str("</p>");
    }
    Ok(out)
}

fn row(run: &RunSummary, now: i64) -> String {
    // Progress comes from the run's own serialised form, so it shows once the service adds it.
    let value = serde_json::to_value(run).unwrap_or(Value::Null);
    let took =
        run.started_at.map(|s| duration(run.ended_at.unwrap_or(now) - s)).unwrap_or_else(|| "-".into());
    let left = run
        .time_limit_at
        .map(|at| format!("<div class=\"time-left\">{} left</div>", duration(at - now)))
        .unwrap_or_default();
    format!(
        "<tr data-run=\"{id}\" data-state=\"{state}\"><td><a href=\"/ui/runs/{id}\">{short}</a></td><td>{badge}</td>\
         <td>{workflow}</td><td>{env}</td><td>{attempt}</td><td>{node}</td><td class=\"progress-cell\">{progress}{left}</td>\
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
        reason = match (run.reason.as_deref(), run.deps_open) {
            (_, waits) if waits > 0 && run.state == crate::model::RunState::Pending => {
                format!("waits for {waits} dependenc{}", if waits == 1 { "y" } else { "ies" })
            }
            (reason, _) => esc(reason.unwrap_or("")),
        },
    )
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::model::{Run, RunParams};
    use crate::settings::Settings;
    use crate::workflow::Workflow;

    /// The ids of the queue table's rows, in order, and its next link's cursor.
    fn queue_rows(page: &str) -> (Vec<String>, Option<String>) {
        let table =
            page.split("<table class=\"queue\">").nth(1).unwrap_or("").split("</table>").next().unwrap();
        let ids = table.split("<tr data-run=\"").skip(1).map(|r| r[..36].to_string()).collect();
        let next = page.split("after=").nth(1).map(|rest| rest[..36].to_string());
        (ids, next)
    }

    #[test]
    fn a_running_run_with_a_time_limit_shows_the_time_left() {
        let spec = Workflow::parse(
            std::path::Path::new("t.yaml"),
            "name: t\ntime_limit: 2h\nstages:\n  - {name: trainer, argv: ['true']}\n",
        )
        .unwrap();
        let mut run =
            Run::queued(uuid::Uuid::new_v4(), spec, PathBuf::from("/runs"), 0, RunParams::default());
        let now = now_millis();
        (run.state, run.started_at) = (RunState::Running, Some(now - 30 * 60_000));
        let shown = row(&RunSummary::from(&run), now);
        assert!(shown.contains("<div class=\"time-left\">1h 30m left</div>"), "{shown}");
        run.state = RunState::Completed;
        assert!(!row(&RunSummary::from(&run), now).contains("time-left"), "an ended run has none");
    }

    #[tokio::test]
    async fn a_deep_queue_shows_one_page_with_a_link_to_the_next() {
        let home = tempfile::tempdir().unwrap();
        let service = Service::open(Settings::new(Some(home.path().to_path_buf()), None)).await.unwrap();
        let spec = Workflow::parse(
            std::path::Path::new("q.yaml"),
            "name: q\nstages:\n  - {name: trainer, argv: ['true']}\n",
        )
        .unwrap();
        let batch: Vec<_> = (0..(2 * QUEUE_PAGE + PAGE_SIZE))
            .map(|i| {
                let id = uuid::Uuid::new_v4();
                let priority = (i % 2) as i64;
                let run =
                    Run::queued(id, spec.clone(), PathBuf::from("/runs"), priority, RunParams::default());
                let stages = run.pending_stages();
                (run, stages)
            })
            .collect();
        service.insert_runs_as_given(&batch).await.unwrap();
        let order: Vec<String> = service
            .queued_runs(None, batch.len() as i64)
            .await
            .unwrap()
            .iter()
            .map(|r| r.id.to_string())
            .collect();

        let first = render(&service, &RunsQuery::default()).await.unwrap();
        assert!(first.contains(&format!("<h2>Queue ({})</h2>", batch.len())), "the whole queue is counted");
        let (rows, next) = queue_rows(&first);
        assert_eq!(rows, order[..QUEUE_PAGE], "the head of the queue, in claim order");
        assert_eq!(next.as_deref(), Some(order[QUEUE_PAGE - 1].as_str()), "next starts after the page");
        let table_rows = first.matches("<tr data-run=").count() - rows.len();
        assert_eq!(table_rows, PAGE_SIZE, "one page of the runs table");

        let query = RunsQuery { after: next, ..RunsQuery::default() };
        let second = render(&service, &query).await.unwrap();
        let (rows, _) = queue_rows(&second);
        assert_eq!(rows, order[QUEUE_PAGE..2 * QUEUE_PAGE]);
        assert!(
            second.contains(&format!("<td>{}</td>", QUEUE_PAGE + 1)),
            "places continue from the first page"
        );

        // A cursor that is not a run id starts at the head rather than failing.
        let query = RunsQuery { after: Some("../x".into()), ..RunsQuery::default() };
        let (rows, _) = queue_rows(&render(&service, &query).await.unwrap());
        assert_eq!(rows, order[..QUEUE_PAGE]);
    }
}
