//! Inference tests: list, queue, status and stop.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::answer::{Answer, Body, Q, ok};
use super::runs::ListQuery;
use crate::api::{AppState, Failure};
use crate::service::TestRequest;

pub async fn list_tests(State(s): State<AppState>, Q(q): Q<ListQuery>) -> Answer {
    ok(s.service.tests(q.limit.unwrap_or(100).clamp(1, 10_000)).await?)
}

pub async fn start_test(State(s): State<AppState>, Body(body): Body<TestRequest>) -> Response {
    match s.service.submit_test(body).await {
        Ok(test) => (StatusCode::CREATED, axum::Json(json!(test))).into_response(),
        Err(err) => Failure::from(err).into_response(),
    }
}

pub async fn test_status(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    let status = s.service.test_status(&id).await?;
    ok(json!({ "test": status.test, "tasks": status.tasks }))
}

pub async fn stop_test(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.stop_test(&id).await?)
}
