//! Every HTTP route, once: method, path, what it does, and its handler. The router and the
//! OpenAPI document are both built from `ROUTES`. The handlers are in `handlers/`, a file per
//! noun, but for the health check and the run start (with its body), here.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, patch, post, put};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::handlers::answer::{Answer, Body, ok};
use super::handlers::daemon::{metrics, nodes};
use super::handlers::environments::{config, environment, environments, select, set_config, workflows};
use super::handlers::inference_tests::{list_tests, start_test, stop_test, test_status};
use super::handlers::openapi::openapi;
use super::handlers::report::report;
use super::handlers::runs::{
    edit_run, hold_run, list_runs, release_run, resume_run, run_checkpoints, run_events, run_logs,
    run_results, run_status, stop_run,
};
use super::handlers::schedules::{
    add_schedule, pause_schedule, remove_schedule, resume_schedule, schedule, schedules,
};
use super::{AppState, Failure};
use crate::service::SubmitRequest;

pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    /// Example request body, for the OpenAPI document.
    pub body: Option<&'static str>,
    pub handler: fn() -> MethodRouter<AppState>,
}

macro_rules! route {
    ($method:literal, $path:literal, $summary:literal, $body:expr, $handler:expr) => {
        Route { method: $method, path: $path, summary: $summary, body: $body, handler: || $handler }
    };
}

pub static ROUTES: &[Route] = &[
    route!("get", "/health", "Liveness: the store answers", None, get(health)),
    route!("get", "/openapi.json", "This API as OpenAPI 3.1", None, get(openapi)),
    route!("get", "/metrics", "Prometheus metrics", None, get(metrics)),
    route!("get", "/workflows", "Workflows in the workflow directory", None, get(workflows)),
    route!(
        "get",
        "/nodes",
        "Daemons sharing the PostgreSQL store: labels, heartbeat, runs",
        None,
        get(nodes)
    ),
    route!("get", "/environments", "Atropos environments found on disk", None, get(environments)),
    route!("get", "/environments/{name}", "One environment", None, get(environment)),
    route!("get", "/selection", "The selected environment and its configuration", None, get(config)),
    route!("post", "/selection", "Select an environment", Some(r#"{"name": "gsm8k"}"#), post(select)),
    route!("put", "/config/{field}", "Set a configurable field", Some(r#"{"value": 16}"#), put(set_config)),
    route!("get", "/runs", "Runs, newest first (?state=, ?limit=)", None, get(list_runs)),
    route!(
        "post",
        "/runs",
        "Queue a run, or a list of runs in one transaction (answers a list, in order)",
        Some(r#"{"workflow": "demo", "priority": 0, "needs": {"gpu": 1}, "after": []}"#),
        post(start_run)
    ),
    route!("get", "/runs/{id}", "A run with its stages", None, get(run_status)),
    route!("post", "/runs/{id}/stop", "Stop a run (a pending one is cancelled)", None, post(stop_run)),
    route!(
        "patch",
        "/runs/{id}",
        "Edit a pending run: priority, vars, set, needs (refused once it has left the queue)",
        Some(r#"{"priority": 5, "vars": {"steps": "3"}, "needs": {"gpu": 1}}"#),
        patch(edit_run)
    ),
    route!(
        "post",
        "/runs/{id}/hold",
        "Keep a pending run out of the queue until released",
        None,
        post(hold_run)
    ),
    route!("post", "/runs/{id}/release", "Put a held run back in the queue", None, post(release_run)),
    route!(
        "post",
        "/runs/{id}/resume",
        "Queue a failed or stopped run again as its next attempt, from its last checkpoint or ?from=STEP",
        None,
        post(resume_run)
    ),
    route!(
        "get",
        "/runs/{id}/results",
        "A run's outcome, stage exits and trained weights",
        None,
        get(run_results)
    ),
    route!("get", "/runs/{id}/events", "A run's event history", None, get(run_events)),
    route!(
        "get",
        "/runs/{id}/checkpoints",
        "A run's checkpoints across attempts, oldest first: {attempt, step, path, weights, at}",
        None,
        get(run_checkpoints)
    ),
    route!(
        "get",
        "/runs/{id}/logs",
        "A run's stage logs, bounded: the last 200 lines (?tail=N) or bytes ?offset=&limit= (at most \
         1 MiB), of every stage or ?stage=; per stage {text, size, start, end, file, cut}",
        None,
        get(run_logs)
    ),
    route!("get", "/tests", "Inference tests, newest first", None, get(list_tests)),
    route!(
        "post",
        "/tests",
        "Queue an inference test",
        Some(r#"{"models": ["qwen/qwen3-8b"], "steps": 3}"#),
        post(start_test)
    ),
    route!("get", "/tests/{id}", "An inference test with its per-model results", None, get(test_status)),
    route!("post", "/tests/{id}/stop", "Cancel an inference test", None, post(stop_test)),
    route!("get", "/schedules", "Schedules", None, get(schedules)),
    route!(
        "post",
        "/schedules",
        "Add a schedule",
        Some(r#"{"name": "nightly", "cron": "0 3 * * *", "env": "gsm8k"}"#),
        post(add_schedule)
    ),
    route!("get", "/schedules/{name}", "One schedule with its recent tests", None, get(schedule)),
    route!("post", "/schedules/{name}/pause", "Pause a schedule", None, post(pause_schedule)),
    route!("post", "/schedules/{name}/resume", "Resume a schedule", None, post(resume_schedule)),
    route!("delete", "/schedules/{name}", "Remove a schedule", None, delete(remove_schedule)),
    route!(
        "get",
        "/report",
        "The morning report: runs and tests that ended in the window (?since=12h) or still run, with \
         outcome, step, duration, checkpoint, metrics, a failed stage's last 5 log lines, and counts",
        None,
        get(report)
    ),
];

async fn health(State(s): State<AppState>) -> Answer {
    let daemon = crate::wake::poke(&s.service.settings.socket_path(), crate::wake::Poke::Probe);
    ok(json!({ "status": "ok", "store": s.service.backend().as_str(), "daemon": daemon }))
}

/// The body of `POST /runs`, one run's worth.
#[derive(Debug, Deserialize, Serialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    workflow: Option<String>,
    env: Option<String>,
    #[serde(default)]
    set: BTreeMap<String, Value>,
    #[serde(default)]
    vars: BTreeMap<String, String>,
    #[serde(default)]
    priority: i64,
    /// Overrides the workflow's `stall_timeout` (e.g. "30m").
    #[serde(default)]
    stall_timeout: Option<crate::workflow::Dur>,
    /// Queue it held: not claimed until `POST /runs/{id}/release`.
    #[serde(default)]
    hold: bool,
    /// Overrides the workflow's `time_limit` (e.g. "10h").
    #[serde(default)]
    time_limit: Option<crate::workflow::Dur>,
    /// Units of the daemon's pools, over the workflow's `needs` (e.g. {"gpu": 2}).
    #[serde(default, skip_serializing_if = "crate::model::Needs::is_empty")]
    needs: crate::model::Needs,
    /// Runs to wait for: `[{"run": "3f2a", "when": "ok|any|failed", "name": "train"}]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    after: Vec<AfterBody>,
}

/// One dependency in a `POST /runs` body: a run id (or unique prefix), the condition (`ok`,
/// the default: it completed; `any`; `failed`) and an optional name for `{after.NAME.*}`.
#[derive(Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AfterBody {
    run: String,
    #[serde(default)]
    when: crate::model::When,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

impl From<StartBody> for SubmitRequest {
    fn from(body: StartBody) -> SubmitRequest {
        let set = body
            .set
            .into_iter()
            .map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_string)))
            .collect();
        SubmitRequest {
            workflow: body.workflow,
            env_name: body.env,
            vars: body.vars,
            set,
            priority: body.priority,
            stall_timeout: body.stall_timeout.map(|d| d.0),
            hold: body.hold,
            time_limit: body.time_limit.map(|d| d.0),
            needs: body.needs,
            after: body
                .after
                .into_iter()
                .map(|a| crate::service::After {
                    target: crate::service::AfterTarget::Run(a.run),
                    when: a.when,
                    name: a.name,
                })
                .collect(),
        }
    }
}

/// What the CLI sends for a run it hands to the daemon (see `api::client`).
impl From<&SubmitRequest> for StartBody {
    fn from(request: &SubmitRequest) -> StartBody {
        StartBody {
            workflow: request.workflow.clone(),
            env: request.env_name.clone(),
            set: request.set.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect(),
            vars: request.vars.clone(),
            priority: request.priority,
            stall_timeout: request.stall_timeout.map(crate::workflow::Dur),
            hold: request.hold,
            time_limit: request.time_limit.map(crate::workflow::Dur),
            needs: request.needs.clone(),
            // A batch's own runs (a pipeline) are never handed over one by one.
            after: request
                .after
                .iter()
                .filter_map(|a| match &a.target {
                    crate::service::AfterTarget::Run(run) => {
                        Some(AfterBody { run: run.clone(), when: a.when, name: a.name.clone() })
                    }
                    crate::service::AfterTarget::Earlier(_) => None,
                })
                .collect(),
        }
    }
}

/// One object queues one run; a list queues them all in one transaction, or none.
async fn start_run(State(s): State<AppState>, Body(body): Body<Value>) -> Response {
    let invalid = |e: String| Failure::new(StatusCode::BAD_REQUEST, "invalid_body", e).into_response();
    match body {
        Value::Array(items) => {
            let mut requests = Vec::with_capacity(items.len());
            for (index, item) in items.into_iter().enumerate() {
                match serde_json::from_value::<StartBody>(item) {
                    Ok(body) => requests.push(SubmitRequest::from(body)),
                    Err(e) => return invalid(format!("run {} of the batch: {e}", index + 1)),
                }
            }
            if requests.is_empty() {
                return invalid("an empty list queues nothing".into());
            }
            match s.service.submit_many(requests).await {
                Ok(runs) => {
                    let summaries: Vec<_> = runs.iter().map(crate::service::RunSummary::from).collect();
                    (StatusCode::CREATED, axum::Json(json!(summaries))).into_response()
                }
                Err(err) => Failure::from(err).into_response(),
            }
        }
        item => match serde_json::from_value::<StartBody>(item) {
            Ok(body) => match s.service.submit(body.into()).await {
                Ok(run) => (StatusCode::CREATED, axum::Json(json!(crate::service::RunSummary::from(&run))))
                    .into_response(),
                Err(err) => Failure::from(err).into_response(),
            },
            Err(e) => invalid(e.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cli_request_survives_the_trip_through_the_body() {
        let request = SubmitRequest {
            workflow: Some("demo".into()),
            env_name: Some("gsm8k".into()),
            vars: [("steps".to_string(), "3".to_string())].into(),
            set: [("group_size".to_string(), "16".to_string()), ("name".to_string(), "a \"b\"".to_string())]
                .into(),
            priority: -2,
            stall_timeout: Some(std::time::Duration::from_millis(1500)),
            hold: true,
            time_limit: Some(std::time::Duration::from_secs(36_000)),
            needs: crate::model::Needs::from_pairs([("gpu".to_string(), 2)]).unwrap(),
            after: vec![crate::service::After {
                target: crate::service::AfterTarget::Run("3f2a".into()),
                when: crate::model::When::Failed,
                name: Some("train".into()),
            }],
        };
        let json = serde_json::to_string(&StartBody::from(&request)).unwrap();
        let body: StartBody = serde_json::from_str(&json).unwrap();
        assert_eq!(SubmitRequest::from(body), request);
        let empty: StartBody =
            serde_json::from_str(&serde_json::to_string(&StartBody::default()).unwrap()).unwrap();
        assert_eq!(SubmitRequest::from(empty), SubmitRequest::default());
    }
}
