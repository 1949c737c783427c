//! A run once queued: listing, status, stop, edits, hold and release, resume, and its results,
//! checkpoints, events and logs. (Queueing one is `routes.rs`'s `start_run`.)

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::answer::{Answer, Body, Q, ok};
use crate::api::{AppState, Failure};
use crate::model::{RunQuery, RunState};
use crate::service::LogRequest;

#[derive(Deserialize)]
pub struct ListQuery {
    pub(super) state: Option<String>,
    pub(super) limit: Option<i64>,
}

pub async fn list_runs(State(s): State<AppState>, Q(q): Q<ListQuery>) -> Answer {
    let state = q
        .state
        .map(|text| text.parse::<RunState>())
        .transpose()
        .map_err(|e| Failure::new(StatusCode::BAD_REQUEST, "invalid", e.to_string()))?;
    ok(s.service.runs(&RunQuery { state, limit: Some(q.limit.unwrap_or(100).clamp(1, 10_000)) }).await?)
}

pub async fn run_status(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.run_status(&id).await?)
}

pub async fn stop_run(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(crate::service::RunSummary::from(&s.service.stop_run(&id).await?))
}

/// The body of `PATCH /runs/{id}`: what changes; absent fields stay.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct EditBody {
    priority: Option<i64>,
    #[serde(default)]
    vars: BTreeMap<String, String>,
    #[serde(default)]
    set: BTreeMap<String, Value>,
    /// Pool units, over the run's own needs (e.g. {"gpu": 1}).
    #[serde(default)]
    needs: crate::model::Needs,
}

pub async fn edit_run(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Body(body): Body<EditBody>,
) -> Answer {
    let set =
        body.set.into_iter().map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_string)));
    let request = crate::service::EditRequest {
        priority: body.priority,
        vars: body.vars,
        set: set.collect(),
        needs: body.needs,
    };
    ok(crate::service::RunSummary::from(&s.service.edit_run(&id, request).await?))
}

pub async fn hold_run(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(crate::service::RunSummary::from(&s.service.hold_run(&id).await?))
}

pub async fn release_run(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(crate::service::RunSummary::from(&s.service.release_run(&id).await?))
}

#[derive(serde::Deserialize)]
pub struct ResumeQuery {
    from: Option<i64>,
}

pub async fn resume_run(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<ResumeQuery>,
) -> Answer {
    ok(crate::service::RunSummary::from(&s.service.resume_run(&id, query.from).await?))
}

pub async fn run_results(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.run_results(&id).await?)
}

pub async fn run_checkpoints(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.run_checkpoints(&id).await?.1)
}

/// `?name=KEY`: that metric's series; without it, each metric's count and last reading.
#[derive(Deserialize)]
pub struct MetricsQuery {
    name: Option<String>,
}

pub async fn run_metrics(State(s): State<AppState>, Path(id): Path<String>, Q(q): Q<MetricsQuery>) -> Answer {
    ok(s.service.run_named_metrics(&id, q.name.as_deref()).await?)
}

pub async fn run_events(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.run_events(&id).await?.1)
}

/// `?stage=&tail=` or `?stage=&offset=&limit=`, each with `&rotation=N` for `<log>.N`.
#[derive(Deserialize)]
pub struct LogQuery {
    stage: Option<String>,
    #[serde(default)]
    rotation: u32,
    tail: Option<usize>,
    offset: Option<u64>,
    limit: Option<u64>,
}

impl LogQuery {
    /// What to read: the last lines unless a byte range is asked for (a limit alone reads from
    /// the start). Both at once is refused: which would the answer be?
    fn request(&self) -> Result<LogRequest, String> {
        match (self.tail, self.offset, self.limit) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                Err("give either tail (lines) or offset/limit (bytes), not both".into())
            }
            (Some(lines), None, None) => Ok(LogRequest::Tail { lines }),
            (None, None, None) => Ok(LogRequest::default()),
            (None, offset, limit) => Ok(LogRequest::Range {
                offset: offset.unwrap_or(0),
                limit: limit.unwrap_or(crate::logs::MAX_ANSWER),
            }),
        }
    }
}

/// Each stage's part of its log: `{"<stage>": {"text", "size", "start", "end", "file", "cut"?,
/// "rotation", "files"}}`.
pub async fn run_logs(State(s): State<AppState>, Path(id): Path<String>, Q(q): Q<LogQuery>) -> Answer {
    let request = q.request().map_err(|why| Failure::new(StatusCode::BAD_REQUEST, "invalid_query", why))?;
    let logs = s.service.run_logs_in(&id, q.stage.as_deref(), q.rotation, request).await?;
    let answer: serde_json::Map<String, Value> = logs
        .into_iter()
        .map(|log| {
            let mut page = json!(log.page);
            page["rotation"] = json!(log.rotation);
            page["files"] = json!(log.files);
            (log.stage, page)
        })
        .collect();
    ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_query_asks_for_lines_or_bytes_never_both() {
        let q = |tail, offset, limit| LogQuery { stage: None, rotation: 0, tail, offset, limit }.request();
        assert_eq!(q(None, None, None), Ok(LogRequest::Tail { lines: crate::service::DEFAULT_TAIL_LINES }));
        assert_eq!(q(Some(5), None, None), Ok(LogRequest::Tail { lines: 5 }));
        assert_eq!(
            q(None, Some(7), None),
            Ok(LogRequest::Range { offset: 7, limit: crate::logs::MAX_ANSWER })
        );
        assert_eq!(q(None, None, Some(9)), Ok(LogRequest::Range { offset: 0, limit: 9 }));
        assert!(q(Some(1), Some(0), None).is_err() && q(Some(1), None, Some(1)).is_err());
    }
}
