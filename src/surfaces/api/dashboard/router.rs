//! The dashboard's routes: its pages, their forms, the live feeds and the two embedded assets.

use axum::Router;
use axum::http::header;
use axum::response::Redirect;
use axum::routing::{get, post};

use super::access::{login, login_form, logout};
use super::actions::{pause, requeue, resend, resume, resume_sweep, stop, stop_sweep};
use super::live::{changes, log_tail};
use super::pages::{
    environments_page, nodes_page, report_page, run_page, runs_page, schedules_page, sweep_page, sweeps_page,
    tests_page, webhooks_page,
};
use crate::api::AppState;

const CSS: &str = include_str!("app.css");
const JS: &str = include_str!("app.js");

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/runs") }))
        .route("/ui", get(|| async { Redirect::to("/ui/runs") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/runs") }))
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/assets/app.css", get(|| async { ([(header::CONTENT_TYPE, "text/css")], CSS) }))
        .route("/ui/assets/app.js", get(|| async { ([(header::CONTENT_TYPE, "text/javascript")], JS) }))
        .route("/ui/runs", get(runs_page))
        .route("/ui/runs/{id}", get(run_page))
        .route("/ui/runs/{id}/stop", post(stop))
        .route("/ui/runs/{id}/requeue", post(requeue))
        .route("/ui/runs/{id}/log", get(log_tail))
        .route("/ui/sweeps", get(sweeps_page))
        .route("/ui/sweeps/{id}", get(sweep_page))
        .route("/ui/sweeps/{id}/stop", post(stop_sweep))
        .route("/ui/sweeps/{id}/resume", post(resume_sweep))
        .route("/ui/environments", get(environments_page))
        .route("/ui/tests", get(tests_page))
        .route("/ui/schedules", get(schedules_page))
        .route("/ui/schedules/{name}/pause", post(pause))
        .route("/ui/schedules/{name}/resume", post(resume))
        .route("/ui/webhooks", get(webhooks_page))
        .route("/ui/webhooks/{id}/resend", post(resend))
        .route("/ui/nodes", get(nodes_page))
        .route("/ui/report", get(report_page))
        .route("/ui/changes", get(changes))
}
