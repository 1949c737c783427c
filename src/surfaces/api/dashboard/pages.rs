//! The page handlers: each renders its page from the service, inside the page frame.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use super::{environments, html, nodes, report, run, runs, schedules, sweeps, tests_page, webhooks};
use crate::api::{AppState, Failure};
use crate::service::ServiceError;

/// A page, or the service's error shown in the page frame.
pub(super) fn page(title: &str, active: &str, rendered: Result<String, ServiceError>) -> Response {
    match rendered {
        Ok(body) => Html(html::page(
            title,
            active,
            true,
            &format!("<div class=\"live\" id=\"live-page\">{body}</div>"),
        ))
        .into_response(),
        Err(err) => failure_page(title, active, err),
    }
}

pub(super) fn failure_page(title: &str, active: &str, err: ServiceError) -> Response {
    let failure = Failure::from(err);
    (failure.status, Html(html::page(title, active, false, &html::failure(&failure.message)))).into_response()
}

pub(super) async fn runs_page(State(s): State<AppState>, Query(q): Query<runs::RunsQuery>) -> Response {
    page("Runs", "runs", runs::render(&s.service, &q).await)
}

pub(super) async fn run_page(State(s): State<AppState>, Path(id): Path<String>) -> Response {
    match run::render(&s.service, &id).await {
        Ok((title, body)) => Html(html::page(&title, "runs", true, &body)).into_response(),
        Err(err) => failure_page("Run", "runs", err),
    }
}

pub(super) async fn sweeps_page(State(s): State<AppState>) -> Response {
    page("Sweeps", "sweeps", sweeps::render_list(&s.service).await)
}

pub(super) async fn sweep_page(State(s): State<AppState>, Path(id): Path<String>) -> Response {
    match sweeps::render(&s.service, &id).await {
        Ok((title, body)) => page(&title, "sweeps", Ok(body)),
        Err(err) => failure_page("Sweep", "sweeps", err),
    }
}

#[derive(Deserialize)]
pub(super) struct TestQuery {
    id: Option<String>,
}

pub(super) async fn tests_page(State(s): State<AppState>, Query(q): Query<TestQuery>) -> Response {
    page(
        "Inference tests",
        "tests",
        tests_page::render(&s.service, q.id.as_deref().filter(|i| !i.is_empty())).await,
    )
}

pub(super) async fn schedules_page(State(s): State<AppState>) -> Response {
    page("Schedules", "schedules", schedules::render(&s.service).await)
}

pub(super) async fn webhooks_page(
    State(s): State<AppState>,
    Query(q): Query<webhooks::DeliveriesQuery>,
) -> Response {
    page("Webhooks", "webhooks", webhooks::render(&s.service, &q).await)
}

pub(super) async fn environments_page(State(s): State<AppState>) -> Response {
    page("Environments", "environments", environments::render(&s.service).await)
}

pub(super) async fn nodes_page(State(s): State<AppState>) -> Response {
    page("Nodes", "nodes", nodes::render(&s.service).await)
}

pub(super) async fn report_page(
    State(s): State<AppState>,
    Query(q): Query<crate::api::handlers::report::ReportQuery>,
) -> Response {
    match crate::api::handlers::report::report_window(q.since.as_deref()) {
        Ok(window) => page("Report", "report", report::render(&s.service, window).await),
        Err(why) => {
            (StatusCode::BAD_REQUEST, Html(html::page("Report", "report", false, &html::failure(&why))))
                .into_response()
        }
    }
}
