//! Every HTTP route, once: method, path, what it does, and its handler. The router and the
//! OpenAPI document are both built from `ROUTES`.

use std::collections::BTreeMap;

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, patch, post, put};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{AppState, Failure};
use crate::model::RunQuery;
use crate::model::RunState;
use crate::service::{LogRequest, SubmitRequest, TestRequest};

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
    route!(
        "get",
        "/report",
        "The morning report: runs and tests that ended in the window (?since=12h) or still run, with \
         outcome, step, duration, checkpoint, metrics, a failed stage's last 5 log lines, and counts",
        None,
        get(report)
    ),
];

type Answer = Result<axum::Json<Value>, Failure>;

fn ok(value: impl serde::Serialize) -> Answer {
    Ok(axum::Json(serde_json::to_value(value).unwrap_or(Value::Null)))
}

/// A JSON body whose rejections are JSON errors too.
pub struct Body<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = Failure;
    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Body(value)),
            Err(JsonRejection::BytesRejection(e)) => {
                Err(Failure::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", e.body_text()))
            }
            Err(e) => Err(Failure::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                crate::workflow::one_line(&e.body_text()),
            )),
        }
    }
}

async fn health(State(s): State<AppState>) -> Answer {
    let daemon = crate::wake::poke(&s.service.settings.socket_path(), crate::wake::Poke::Probe);
    ok(json!({ "status": "ok", "store": s.service.backend().as_str(), "daemon": daemon }))
}

async fn openapi() -> axum::Json<Value> {
    axum::Json(super::routes::openapi_document())
}

async fn metrics(State(s): State<AppState>) -> Response {
    let text = s.service.prometheus(&s.telemetry).await;
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn nodes(State(s): State<AppState>) -> Answer {
    ok(s.service.nodes().await?)
}

async fn workflows(State(s): State<AppState>) -> Answer {
    let catalog = s.service.settings.catalog().map_err(crate::service::ServiceError::from)?;
    let list: Vec<Value> = catalog
        .names()
        .into_iter()
        .map(|name| match catalog.load(&name) {
            Ok(wf) => json!({ "name": name, "description": wf.description, "stages": wf.stages.iter().map(|s| &s.name).collect::<Vec<_>>(), "credentials": wf.credentials }),
            Err(err) => json!({ "name": name, "error": err.to_string() }),
        })
        .collect();
    ok(list)
}

async fn environments(State(s): State<AppState>) -> Answer {
    let d = s.service.environments();
    ok(
        json!({ "environments": d.environments, "warnings": d.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>() }),
    )
}

async fn environment(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    ok(s.service.environment(&name)?)
}

async fn config(State(s): State<AppState>) -> Answer {
    ok(s.service.config().await?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SelectBody {
    name: String,
}

async fn select(State(s): State<AppState>, Body(body): Body<SelectBody>) -> Answer {
    ok(s.service.select(&body.name).await?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ValueBody {
    value: Value,
}

async fn set_config(
    State(s): State<AppState>,
    Path(field): Path<String>,
    Body(body): Body<ValueBody>,
) -> Answer {
    let raw = match body.value {
        Value::String(text) => text,
        other => other.to_string(),
    };
    let value = s.service.set_config(&field, &raw).await?;
    ok(json!({ "field": field, "value": value }))
}

#[derive(Deserialize)]
struct ListQuery {
    state: Option<String>,
    limit: Option<i64>,
}

async fn list_runs(State(s): State<AppState>, Q(q): Q<ListQuery>) -> Answer {
    let state = q
        .state
        .map(|text| text.parse::<RunState>())
        .transpose()
        .map_err(|e| Failure::new(StatusCode::BAD_REQUEST, "invalid", e.to_string()))?;
    ok(s.service.list(&RunQuery { state, limit: Some(q.limit.unwrap_or(100).clamp(1, 10_000)) }).await?)
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

async fn run_status(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.status(&id).await?)
}

async fn stop_run(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(crate::service::RunSummary::from(&s.service.stop(&id).await?))
}

/// The body of `PATCH /runs/{id}`: what changes; absent fields stay.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct EditBody {
    priority: Option<i64>,
    #[serde(default)]
    vars: BTreeMap<String, String>,
    #[serde(default)]
    set: BTreeMap<String, Value>,
    /// Pool units, over the run's own needs (e.g. {"gpu": 1}).
    #[serde(default)]
    needs: crate::model::Needs,
}

async fn edit_run(State(s): State<AppState>, Path(id): Path<String>, Body(body): Body<EditBody>) -> Answer {
    let set =
        body.set.into_iter().map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_string)));
    let request = crate::service::EditRequest {
        priority: body.priority,
        vars: body.vars,
        set: set.collect(),
        needs: body.needs,
    };
    ok(crate::service::RunSummary::from(&s.service.edit(&id, request).await?))
}

async fn hold_run(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(crate::service::RunSummary::from(&s.service.hold(&id).await?))
}

async fn release_run(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(crate::service::RunSummary::from(&s.service.release(&id).await?))
}

#[derive(serde::Deserialize)]
struct ResumeQuery {
    from: Option<i64>,
}

async fn resume_run(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<ResumeQuery>,
) -> Answer {
    ok(crate::service::RunSummary::from(&s.service.resume(&id, query.from).await?))
}

async fn run_results(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.results(&id).await?)
}

async fn run_checkpoints(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.checkpoints(&id).await?.1)
}

async fn run_events(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.events(&id).await?.1)
}

/// `?stage=&tail=` or `?stage=&offset=&limit=`, each with `&rotation=N` for `<log>.N`.
#[derive(Deserialize)]
struct LogQuery {
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
async fn run_logs(State(s): State<AppState>, Path(id): Path<String>, Q(q): Q<LogQuery>) -> Answer {
    let request = q.request().map_err(|why| Failure::new(StatusCode::BAD_REQUEST, "invalid_query", why))?;
    let logs = s.service.logs_in(&id, q.stage.as_deref(), q.rotation, request).await?;
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

async fn list_tests(State(s): State<AppState>, Q(q): Q<ListQuery>) -> Answer {
    ok(s.service.list_tests(q.limit.unwrap_or(100).clamp(1, 10_000)).await?)
}

async fn start_test(State(s): State<AppState>, Body(body): Body<TestRequest>) -> Response {
    match s.service.submit_test(body).await {
        Ok(test) => (StatusCode::CREATED, axum::Json(json!(test))).into_response(),
        Err(err) => Failure::from(err).into_response(),
    }
}

async fn test_status(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    let status = s.service.test_status(&id).await?;
    ok(json!({ "test": status.test, "tasks": status.tasks }))
}

async fn stop_test(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.cancel_test(&id).await?)
}

async fn schedules(State(s): State<AppState>) -> Answer {
    ok(s.service.schedules().await?)
}

/// The schedule's own fields, and the test each firing runs (every other field, read as a
/// `TestRequest`, which rejects fields neither it nor the schedule knows: serde's `flatten`
/// would let unknown fields through).
#[derive(Deserialize)]
#[serde(try_from = "serde_json::Map<String, Value>")]
struct ScheduleBody {
    name: String,
    cron: String,
    tz: Option<String>,
    webhooks: Vec<String>,
    max_drop: Option<f64>,
    test: TestRequest,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleFields {
    name: String,
    cron: String,
    tz: Option<String>,
    #[serde(default)]
    webhooks: Vec<String>,
    max_drop: Option<f64>,
}

impl TryFrom<serde_json::Map<String, Value>> for ScheduleBody {
    type Error = serde_json::Error;
    fn try_from(mut body: serde_json::Map<String, Value>) -> Result<Self, Self::Error> {
        let own: serde_json::Map<String, Value> = ["name", "cron", "tz", "webhooks", "max_drop"]
            .into_iter()
            .filter_map(|key| body.remove_entry(key))
            .collect();
        let own: ScheduleFields = serde_json::from_value(Value::Object(own))?;
        let test: TestRequest = serde_json::from_value(Value::Object(body))?;
        Ok(ScheduleBody {
            name: own.name,
            cron: own.cron,
            tz: own.tz,
            webhooks: own.webhooks,
            max_drop: own.max_drop,
            test,
        })
    }
}

/// Turns any refusal axum answers in plain text (a path segment that isn't UTF-8, a wrong
/// method, a wrong content type) into the JSON error every other refusal is.
pub async fn json_refusals(response: Response) -> Response {
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let status = response.status();
    if !status.is_client_error() || is_json {
        return response;
    }
    let code = match status {
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::NOT_FOUND => "not_found",
        _ => "invalid_request",
    };
    let text = axum::body::to_bytes(response.into_body(), 4096).await.unwrap_or_default();
    let message = crate::workflow::one_line(String::from_utf8_lossy(&text).trim());
    let message = if message.is_empty() { status.to_string() } else { message };
    Failure::new(status, code, message).into_response()
}

/// A query string whose rejections are JSON errors, like the bodies'.
pub struct Q<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> axum::extract::FromRequestParts<S> for Q<T> {
    type Rejection = Failure;
    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Failure> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(Q(value)),
            Err(e) => Err(Failure::new(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                crate::workflow::one_line(&e.body_text()),
            )),
        }
    }
}

async fn add_schedule(State(s): State<AppState>, Body(body): Body<ScheduleBody>) -> Response {
    let added = s
        .service
        .add_schedule(&body.name, &body.cron, body.tz.as_deref(), &body.test, body.webhooks, body.max_drop)
        .await;
    match added {
        Ok(schedule) => (StatusCode::CREATED, axum::Json(json!(schedule))).into_response(),
        Err(err) => Failure::from(err).into_response(),
    }
}

async fn schedule(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    let detail = s.service.schedule_detail(&name).await?;
    ok(json!({ "schedule": detail.schedule, "tests": detail.tests }))
}

async fn pause_schedule(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    ok(s.service.pause_schedule(&name, true).await?)
}

async fn resume_schedule(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    ok(s.service.pause_schedule(&name, false).await?)
}

async fn remove_schedule(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    ok(s.service.remove_schedule(&name).await?)
}

#[derive(Deserialize)]
pub(super) struct ReportQuery {
    pub since: Option<String>,
}

/// The report's window from `?since=` (a duration longer than zero, at most 30 days), or the
/// default 12 hours.
pub(super) fn report_window(since: Option<&str>) -> Result<std::time::Duration, String> {
    match since {
        None => Ok(crate::service::DEFAULT_WINDOW),
        Some(text) => text
            .parse::<crate::workflow::Dur>()
            .and_then(crate::workflow::Dur::positive)
            .map(|d| d.0)
            .map_err(|why| format!("since: {why}")),
    }
}

async fn report(State(s): State<AppState>, Q(q): Q<ReportQuery>) -> Answer {
    let window = report_window(q.since.as_deref())
        .map_err(|why| Failure::new(StatusCode::BAD_REQUEST, "invalid_query", why))?;
    ok(s.service.report(window).await?)
}

/// OpenAPI 3.1, generated from the route table.
pub fn openapi_document() -> Value {
    let mut paths: BTreeMap<String, serde_json::Map<String, Value>> = BTreeMap::new();
    for route in ROUTES {
        let params: Vec<Value> = route
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" } }))
            .collect();
        let mut op = json!({
            "summary": route.summary,
            "operationId": format!("{}{}", route.method, route.path.replace(['/', '{', '}', '.'], "_")),
            "parameters": params,
            "responses": {
                "200": { "description": "OK (201 for creations)", "content": { "application/json": {} } },
                "default": { "description": "An error", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
            },
        });
        if let Some(example) = route.body {
            op["requestBody"] = json!({
                "required": true,
                "content": { "application/json": { "schema": { "type": "object" }, "example": serde_json::from_str::<Value>(example).unwrap_or_default() } },
            });
        }
        paths.entry(route.path.to_string()).or_default().insert(route.method.to_string(), op);
    }
    json!({
        "openapi": "3.1.0",
        "info": { "title": "lachesis", "version": env!("CARGO_PKG_VERSION"), "description": "Queue, start and supervise RL training runs and inference tests." },
        "paths": paths,
        "components": {
            "schemas": { "Error": { "type": "object", "required": ["error", "message"], "properties": { "error": { "type": "string" }, "message": { "type": "string" } } } },
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
        },
        "security": [{ "bearer": [] }],
    })
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

    #[test]
    fn a_report_window_is_a_positive_duration_or_the_default() {
        assert_eq!(report_window(None), Ok(crate::service::DEFAULT_WINDOW));
        assert_eq!(report_window(Some("30m")), Ok(std::time::Duration::from_secs(1800)));
        for bad in ["0", "0s", "soon", "-1h", "31d", ""] {
            let why = report_window(Some(bad)).unwrap_err();
            assert!(why.starts_with("since: ") && !why.contains('\n'), "{bad}: {why}");
        }
    }

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
