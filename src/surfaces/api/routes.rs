//! Every HTTP route, once: method, path, what it does, and its handler. The router and the
//! OpenAPI document are both built from `ROUTES`. The handlers are in `handlers/`, a file per
//! noun, but for the health check and the run start (with its body), here.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, patch, post, put};

use serde_json::{Value, json};

use super::handlers::answer::Body;
use super::handlers::daemon::{metrics, nodes};
use super::handlers::environments::{config, environment, environments, select, set_config, workflows};
use super::handlers::inference_tests::{list_tests, start_test, stop_test, test_status};
use super::handlers::openapi::openapi;
use super::handlers::report::report;
use super::handlers::runs::{
    edit_run, hold_run, list_runs, release_run, resume_run, run_checkpoints, run_events, run_logs,
    run_metrics, run_results, run_status, stop_run,
};
use super::handlers::schedules::{
    add_schedule, pause_schedule, remove_schedule, resume_schedule, schedule, schedules,
};
use super::handlers::sweeps::{list_sweeps, resume_sweep, start_sweep, stop_sweep, sweep_status};
use super::handlers::webhooks::{deliveries, resend};
use super::{AppState, Failure};
use crate::service::RunRequest;

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
    route!(
        "get",
        "/health",
        "Liveness, and whether the daemon's writes land: 503 with `writes_failing` (since, kind, error, held) while the store refuses them",
        None,
        get(health)
    ),
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
    route!(
        "get",
        "/environments",
        "Environments of every kind (Atropos on disk, verifiers installed or laid out by vf-init), each with its kind and source; warnings",
        None,
        get(environments)
    ),
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
        "/runs/{id}/metrics",
        "A run's training metrics by name with their last reading and count, or one's series (?name=)",
        None,
        get(run_metrics)
    ),
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
         1 MiB), of every stage or ?stage=, of the live file or a rotated one (?rotation=N: <log>.N); \
         per stage {text, size, start, end, file, cut, rotation, files: [{rotation, size}]}",
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
    route!("get", "/sweeps", "Sweeps, newest first", None, get(list_sweeps)),
    route!(
        "post",
        "/sweeps",
        "Queue a sweep: its file as a string of YAML, or the sweep as an object (W&B's format with lachesis' keys)",
        Some(
            r#"{"method": "grid", "workflow": "demo", "metric": {"name": "loss"}, "parameters": {"lr": {"values": [0.001, 0.01]}}}"#
        ),
        post(start_sweep)
    ),
    route!(
        "get",
        "/sweeps/{id}",
        "A sweep's leaderboard: each member's parameters, state, best and last metric value, best first",
        None,
        get(sweep_status)
    ),
    route!(
        "post",
        "/sweeps/{id}/stop",
        "Stop a sweep: its pending members are cancelled, its started ones stopped",
        None,
        post(stop_sweep)
    ),
    route!(
        "post",
        "/sweeps/{id}/resume",
        "Resume a stopped sweep: the members its stop ended, and those that failed with attempts left, \
         run again; a bayes sweep gets new members up to its run_cap. A sweep that ended by itself is refused",
        None,
        post(resume_sweep)
    ),
    route!(
        "get",
        "/report",
        "The morning report: runs and tests that ended in the window (?since=12h) or still run, with \
         outcome, step, duration, checkpoint, metrics, a failed stage's last 5 log lines, and counts",
        None,
        get(report)
    ),
    route!(
        "get",
        "/webhooks/deliveries",
        "Webhook deliveries, newest first (?limit=, at most 500; ?before= the answer's next_before): \
         id, event, subject, target (redacted), state (pending, delivered, failed), attempts, last answer",
        None,
        get(deliveries)
    ),
    route!(
        "post",
        "/webhooks/deliveries/{id}/resend",
        "Send a failed webhook delivery again (an id or its prefix): same delivery id, a fresh retry window",
        None,
        post(resend)
    ),
];

/// 200 while the daemon's writes land; 503, with the same body, while the store refuses them
/// (`writes_failing`: since when, the fault's kind, its error, what is held).
async fn health(State(s): State<AppState>) -> Response {
    let daemon = crate::wake::poke(&s.service.settings.socket_path(), crate::wake::Poke::Probe);
    let health = s.service.health();
    let (status, code) = match health.is_healthy() {
        true => ("ok", StatusCode::OK),
        false => ("failing", StatusCode::SERVICE_UNAVAILABLE),
    };
    let body = json!({
        "status": status,
        "store": s.service.backend().as_str(),
        "daemon": daemon,
        "writes_failing": health.writes_failing,
    });
    (code, axum::Json(body)).into_response()
}

/// One object queues one run; a list queues them all in one transaction, or none.
async fn start_run(State(s): State<AppState>, Body(body): Body<Value>) -> Response {
    let invalid = |e: String| Failure::new(StatusCode::BAD_REQUEST, "invalid_body", e).into_response();
    match body {
        Value::Array(items) => {
            let mut requests = Vec::with_capacity(items.len());
            for (index, item) in items.into_iter().enumerate() {
                match RunRequest::from_value(item) {
                    Ok(request) => requests.push(request),
                    Err(e) => return invalid(format!("run {} of the batch: {e}", index + 1)),
                }
            }
            if requests.is_empty() {
                return invalid("an empty list queues nothing".into());
            }
            match s.service.submit_runs(requests).await {
                Ok(runs) => {
                    let summaries: Vec<_> = runs.iter().map(crate::service::RunSummary::from).collect();
                    (StatusCode::CREATED, axum::Json(json!(summaries))).into_response()
                }
                Err(err) => Failure::from(err).into_response(),
            }
        }
        item => match RunRequest::from_value(item) {
            Ok(request) => match s.service.submit_run(request).await {
                Ok(run) => (StatusCode::CREATED, axum::Json(json!(crate::service::RunSummary::from(&run))))
                    .into_response(),
                Err(err) => Failure::from(err).into_response(),
            },
            Err(e) => invalid(e.to_string()),
        },
    }
}
