//! The daemon itself: its telemetry and the nodes that share its store.

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use super::answer::{Answer, ok};
use crate::api::AppState;

pub async fn metrics(State(s): State<AppState>) -> Response {
    let text = s.service.prometheus(&s.telemetry).await;
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

pub async fn nodes(State(s): State<AppState>) -> Answer {
    ok(s.service.nodes().await?)
}
