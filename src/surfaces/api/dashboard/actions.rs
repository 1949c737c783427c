//! The dashboard's forms: stop or re-queue a run, stop or resume a sweep, pause or resume a
//! schedule, resend a webhook delivery. Each refuses a form from another site, then redirects to
//! the page it was posted from.

use std::future::Future;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};

use super::access::{cross_site, same_origin};
use super::pages::failure_page;
use crate::api::AppState;
use crate::service::ServiceError;

/// A form's answer: another site's is refused before `act` runs; else `act`'s outcome, a
/// redirect to the page `to` names, or its failure shown in the page frame (`title`, under the
/// `section` tab).
async fn answer<T>(
    headers: &HeaderMap,
    title: &str,
    section: &str,
    act: impl Future<Output = Result<T, ServiceError>>,
    to: impl FnOnce(T) -> String,
) -> Response {
    if !same_origin(headers) {
        return cross_site();
    }
    match act.await {
        Ok(done) => Redirect::to(&to(done)).into_response(),
        Err(err) => failure_page(title, section, err),
    }
}

pub(super) async fn stop(State(s): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    answer(&headers, "Stop", "runs", s.service.stop_run(&id), |run| format!("/ui/runs/{}", run.id)).await
}

pub(super) async fn requeue(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    answer(&headers, "Re-queue", "runs", s.service.requeue_run(&id), |run| format!("/ui/runs/{}", run.id))
        .await
}

pub(super) async fn stop_sweep(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let to = |sweep: crate::service::SweepSummary| format!("/ui/sweeps/{}", sweep.id);
    answer(&headers, "Stop", "sweeps", s.service.stop_sweep(&id), to).await
}

pub(super) async fn resume_sweep(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let to = |sweep: crate::service::SweepSummary| format!("/ui/sweeps/{}", sweep.id);
    answer(&headers, "Resume", "sweeps", s.service.resume_sweep(&id), to).await
}

pub(super) async fn pause(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    set_paused(s, headers, name, true).await
}

pub(super) async fn resume(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    set_paused(s, headers, name, false).await
}

pub(super) async fn set_paused(s: AppState, headers: HeaderMap, name: String, paused: bool) -> Response {
    let to = |_| "/ui/schedules".to_string();
    answer(&headers, "Schedules", "schedules", s.service.pause_schedule(&name, paused), to).await
}

pub(super) async fn resend(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    answer(&headers, "Webhooks", "webhooks", s.service.resend_webhook(&id), |_| "/ui/webhooks".to_string())
        .await
}
