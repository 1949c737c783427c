//! The dashboard's forms: stop or re-queue a run, stop or resume a sweep, pause or resume a schedule, resend a webhook delivery. Each refuses a
//! form from another site, then redirects to the page it was posted from.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};

use super::access::{cross_site, same_origin};
use super::pages::failure_page;
use crate::api::AppState;

pub(super) async fn stop(State(s): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    match s.service.stop_run(&id).await {
        Ok(run) => Redirect::to(&format!("/ui/runs/{}", run.id)).into_response(),
        Err(err) => failure_page("Stop", "runs", err),
    }
}

pub(super) async fn requeue(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    match s.service.requeue_run(&id).await {
        Ok(run) => Redirect::to(&format!("/ui/runs/{}", run.id)).into_response(),
        Err(err) => failure_page("Re-queue", "runs", err),
    }
}

pub(super) async fn stop_sweep(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    match s.service.stop_sweep(&id).await {
        Ok(sweep) => Redirect::to(&format!("/ui/sweeps/{}", sweep.id)).into_response(),
        Err(err) => failure_page("Stop", "sweeps", err),
    }
}

pub(super) async fn resume_sweep(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    match s.service.resume_sweep(&id).await {
        Ok(sweep) => Redirect::to(&format!("/ui/sweeps/{}", sweep.id)).into_response(),
        Err(err) => failure_page("Resume", "sweeps", err),
    }
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
    if !same_origin(&headers) {
        return cross_site();
    }
    match s.service.pause_schedule(&name, paused).await {
        Ok(_) => Redirect::to("/ui/schedules").into_response(),
        Err(err) => failure_page("Schedules", "schedules", err),
    }
}

pub(super) async fn resend(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    match s.service.resend_webhook(&id).await {
        Ok(_) => Redirect::to("/ui/webhooks").into_response(),
        Err(err) => failure_page("Webhooks", "webhooks", err),
    }
}
