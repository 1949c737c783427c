//! Sweeps: start (the sweep file as a JSON string of its YAML, or the sweep as a JSON object),
//! list, the leaderboard, stop.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::answer::{Answer, Body, ok};
use crate::api::{AppState, Failure};
use crate::service::RunRequest;

pub async fn start_sweep(State(s): State<AppState>, Body(body): Body<Value>) -> Response {
    let text = match body {
        Value::String(text) => text,
        // A JSON document is a YAML one: the sweep file as the object says it.
        object @ Value::Object(_) => object.to_string(),
        _ => {
            let problem = "expected the sweep file as a string, or the sweep as an object";
            return Failure::new(StatusCode::BAD_REQUEST, "invalid_body", problem).into_response();
        }
    };
    match s.service.submit_sweep(&text, None, RunRequest::default()).await {
        Ok(started) => {
            let body = json!({
                "id": started.sweep.id,
                "workflow": started.sweep.workflow,
                "state": started.sweep.state,
                "max_live": started.sweep.max_live,
                "members": started.members,
            });
            (StatusCode::CREATED, axum::Json(body)).into_response()
        }
        Err(err) => Failure::from(err).into_response(),
    }
}

pub async fn list_sweeps(State(s): State<AppState>) -> Answer {
    ok(s.service.sweeps().await?)
}

pub async fn sweep_status(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.sweep_status(&id).await?)
}

pub async fn stop_sweep(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.stop_sweep(&id).await?)
}

pub async fn resume_sweep(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.resume_sweep(&id).await?)
}
