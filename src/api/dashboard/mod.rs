//! The web dashboard, served by the HTTP API under `/ui/` (`/` redirects to `/ui/runs`; the
//! JSON routes keep their paths). Pages are rendered on the server from the same service calls
//! as the CLI, HTTP and MCP surfaces; charts are SVG drawn here; the one stylesheet and script
//! are embedded. Pages follow the store through server-sent events: `/ui/changes` says when the
//! newest event id moves (the script then re-fetches the page and swaps its live parts), and
//! `/ui/runs/{id}/log?stage=` tails a stage's log (already redacted on disk).
//!
//! Access is the API's: with a token set, a page without it shows the login prompt. The login
//! form puts the token in an HttpOnly, SameSite=Strict cookie that `require_token` accepts.

mod html;
mod nodes;
mod report;
mod run;
mod runs;
mod schedules;
mod svg;
mod tests_page;

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use serde::Deserialize;

use super::{AppState, Failure};
use crate::service::{DEFAULT_TAIL_LINES, LogRequest, ServiceError};

/// The cookie the login form sets.
pub const COOKIE: &str = "lachesis_token";
/// How often an open page's change feed looks at the newest event id.
const CHANGE_CHECK: Duration = Duration::from_millis(200);
/// How often pages refresh while runs are running (their progress moves between events).
const PROGRESS_TICK: Duration = Duration::from_secs(5);
/// How often a log tail looks for new bytes.
const LOG_CHECK: Duration = Duration::from_millis(250);

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
        .route("/ui/tests", get(tests_page))
        .route("/ui/schedules", get(schedules_page))
        .route("/ui/schedules/{name}/pause", post(pause))
        .route("/ui/schedules/{name}/resume", post(resume))
        .route("/ui/nodes", get(nodes_page))
        .route("/ui/report", get(report_page))
        .route("/ui/changes", get(changes))
}

/// Paths anyone may fetch: the login form and the assets (no data in either).
pub fn is_public(path: &str) -> bool {
    path == "/ui/login" || path.starts_with("/ui/assets/")
}

/// Paths that are pages: without the token they answer with the login prompt.
pub fn is_page(path: &str) -> bool {
    path == "/" || path == "/ui" || path.starts_with("/ui/")
}

/// The answer to a page request without a valid token.
pub fn login_required() -> Response {
    (StatusCode::UNAUTHORIZED, Html(html::login(None))).into_response()
}

/// The token in the dashboard cookie, if any.
pub fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .map(percent_decode)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = text.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A page, or the service's error shown in the page frame.
fn page(title: &str, active: &str, rendered: Result<String, ServiceError>) -> Response {
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

fn failure_page(title: &str, active: &str, err: ServiceError) -> Response {
    let failure = Failure::from(err);
    (failure.status, Html(html::page(title, active, false, &html::failure(&failure.message)))).into_response()
}

/// Refuses a form posted from another site's page (a browser names the page's origin).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return true };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    origin.split_once("://").is_some_and(|(_, rest)| rest == host)
}

fn cross_site() -> Response {
    (
        StatusCode::FORBIDDEN,
        Html(html::page("Refused", "", false, &html::failure("a form from another site was refused"))),
    )
        .into_response()
}

async fn login_form() -> Html<String> {
    Html(html::login(None))
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(State(s): State<AppState>, headers: HeaderMap, Form(form): Form<LoginForm>) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    let Some(token) = &s.token else { return Redirect::to("/ui/runs").into_response() };
    let given = form.token.trim();
    if !token.matches(given) {
        return (StatusCode::UNAUTHORIZED, Html(html::login(Some("That is not the API token."))))
            .into_response();
    }
    let cookie = format!("{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict", html::url_segment(given));
    ([(header::SET_COOKIE, cookie)], Redirect::to("/ui/runs")).into_response()
}

async fn logout() -> Response {
    let cookie = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/ui/login")).into_response()
}

async fn runs_page(State(s): State<AppState>, Query(q): Query<runs::RunsQuery>) -> Response {
    page("Runs", "runs", runs::render(&s.service, &q).await)
}

async fn run_page(State(s): State<AppState>, Path(id): Path<String>) -> Response {
    match run::render(&s.service, &id).await {
        Ok((title, body)) => Html(html::page(&title, "runs", true, &body)).into_response(),
        Err(err) => failure_page("Run", "runs", err),
    }
}

#[derive(Deserialize)]
struct TestQuery {
    id: Option<String>,
}

async fn tests_page(State(s): State<AppState>, Query(q): Query<TestQuery>) -> Response {
    page(
        "Inference tests",
        "tests",
        tests_page::render(&s.service, q.id.as_deref().filter(|i| !i.is_empty())).await,
    )
}

async fn schedules_page(State(s): State<AppState>) -> Response {
    page("Schedules", "schedules", schedules::render(&s.service).await)
}

async fn nodes_page(State(s): State<AppState>) -> Response {
    page("Nodes", "nodes", nodes::render(&s.service).await)
}

async fn report_page(State(s): State<AppState>, Query(q): Query<super::routes::ReportQuery>) -> Response {
    match super::routes::report_window(q.since.as_deref()) {
        Ok(window) => page("Report", "report", report::render(&s.service, window).await),
        Err(why) => {
            (StatusCode::BAD_REQUEST, Html(html::page("Report", "report", false, &html::failure(&why))))
                .into_response()
        }
    }
}

async fn stop(State(s): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    match s.service.stop(&id).await {
        Ok(run) => Redirect::to(&format!("/ui/runs/{}", run.id)).into_response(),
        Err(err) => failure_page("Stop", "runs", err),
    }
}

async fn requeue(State(s): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    match s.service.requeue(&id).await {
        Ok(run) => Redirect::to(&format!("/ui/runs/{}", run.id)).into_response(),
        Err(err) => failure_page("Re-queue", "runs", err),
    }
}

async fn pause(State(s): State<AppState>, headers: HeaderMap, Path(name): Path<String>) -> Response {
    set_paused(s, headers, name, true).await
}

async fn resume(State(s): State<AppState>, headers: HeaderMap, Path(name): Path<String>) -> Response {
    set_paused(s, headers, name, false).await
}

async fn set_paused(s: AppState, headers: HeaderMap, name: String, paused: bool) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    match s.service.pause_schedule(&name, paused).await {
        Ok(_) => Redirect::to("/ui/schedules").into_response(),
        Err(err) => failure_page("Schedules", "schedules", err),
    }
}

/// `change` whenever the newest event id of the store moves (and once at the start); and,
/// while a run is running, every `PROGRESS_TICK`, since progress reports need not be events.
async fn changes(State(s): State<AppState>) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let start = (s.service, -1i64, tokio::time::Instant::now(), 0u64);
    let stream = futures_util::stream::unfold(start, |(service, last, mut ticked, mut ticks)| async move {
        loop {
            let now = service.last_event_id().await.unwrap_or(last);
            if now != last {
                let event = SseEvent::default().event("change").data(now.to_string());
                return Some((Ok(event), (service, now, ticked, ticks)));
            }
            if ticked.elapsed() >= PROGRESS_TICK {
                ticked = tokio::time::Instant::now();
                let counts = service.live_run_counts().await.unwrap_or_default();
                if counts.iter().any(|(state, n)| state == "running" && *n > 0) {
                    ticks += 1;
                    let event = SseEvent::default().event("change").data(format!("{now}.{ticks}"));
                    return Some((Ok(event), (service, now, ticked, ticks)));
                }
            }
            tokio::time::sleep(CHANGE_CHECK).await;
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[derive(Deserialize)]
struct LogQuery {
    stage: Option<String>,
}

/// A stage's last lines, then each complete line as it is written. Every read goes through
/// `Service::logs`, bounded and off the daemon's thread; a log that shrank under the tail
/// (rotated or truncated) is followed again from its start.
async fn log_tail(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<LogQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, Response> {
    let opening = s
        .service
        .logs(&id, q.stage.as_deref(), LogRequest::Tail { lines: DEFAULT_TAIL_LINES })
        .await
        .map_err(|e| failure_page("Log", "runs", e))?;
    let Some(opening) = opening.into_iter().next() else {
        return Err((StatusCode::NOT_FOUND, "no such stage").into_response());
    };
    let tail = LogFollow {
        service: s.service.clone(),
        id,
        stage: opening.stage,
        file: opening.page.file,
        previous: false,
        offset: opening.page.end,
        pending: opening.page.text,
    };
    let stream = futures_util::stream::unfold(tail, |mut tail| async move {
        loop {
            if let Some(lines) = take_whole_lines(&mut tail.pending) {
                return Some((Ok(SseEvent::default().data(lines)), tail));
            }
            tokio::time::sleep(LOG_CHECK).await;
            // The rest of the file a rotation moved to `<log>.1`, then the new one from its start.
            let previous = tail.file != 0 && tail.previous;
            let request = if previous {
                LogRequest::Previous { offset: tail.offset, limit: crate::logs::MAX_ANSWER }
            } else {
                LogRequest::Range { offset: tail.offset, limit: crate::logs::MAX_ANSWER }
            };
            let page = match tail.service.logs(&tail.id, Some(&tail.stage), request).await {
                Ok(mut logs) if !logs.is_empty() => logs.swap_remove(0).page,
                _ => return None, // the run was forgotten meanwhile
            };
            if previous {
                if page.file == tail.file {
                    tail.pending.push_str(&page.text);
                    tail.offset = page.end;
                }
                if page.file != tail.file || page.end >= page.size {
                    (tail.previous, tail.file, tail.offset) = (false, 0, 0);
                }
                continue;
            }
            if page.file == 0 {
                continue; // not there (yet, or between a rotation's two renames)
            }
            if tail.file != 0 && page.file != tail.file {
                tail.previous = true;
                continue;
            }
            tail.file = page.file;
            if page.size < tail.offset {
                tail.offset = 0; // truncated
                continue;
            }
            tail.offset = page.end;
            tail.pending.push_str(&page.text);
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

struct LogFollow {
    service: crate::service::Service,
    id: String,
    stage: String,
    /// The file being read (see `LogPage::file`; 0 before there is one).
    file: u64,
    /// It rotated: reading the rest of `file`, now `<log>.1`.
    previous: bool,
    /// Where the next read starts.
    offset: u64,
    /// Text read but not sent: the start of a line still being written.
    pending: String,
}

/// The complete lines of `pending`, taken out without their final newline; a line longer than
/// one answer is taken as it is, so what waits stays bounded.
fn take_whole_lines(pending: &mut String) -> Option<String> {
    let end = match pending.rfind('\n') {
        Some(end) => end,
        None if pending.len() as u64 >= crate::logs::MAX_ANSWER => pending.len(),
        None => return None,
    };
    let rest = pending.split_off((end + 1).min(pending.len()));
    let mut lines = std::mem::replace(pending, rest);
    lines.truncate(end);
    Some(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_tail_sends_whole_lines_and_keeps_the_rest_bounded() {
        let mut pending = "a\nb\npart".to_string();
        assert_eq!(take_whole_lines(&mut pending).as_deref(), Some("a\nb"));
        assert_eq!(take_whole_lines(&mut pending), None);
        assert_eq!(pending, "part", "a line still being written waits");
        pending.push_str("ial\n");
        assert_eq!(take_whole_lines(&mut pending).as_deref(), Some("partial"));
        let mut long = "x".repeat(crate::logs::MAX_ANSWER as usize);
        assert_eq!(take_whole_lines(&mut long).map(|l| l.len() as u64), Some(crate::logs::MAX_ANSWER));
        assert!(long.is_empty());
    }

    #[test]
    fn the_cookie_is_found_among_others_and_decoded() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, "a=1; lachesis_token=ab%3Bc; b=2".parse().unwrap());
        assert_eq!(cookie_token(&headers).as_deref(), Some("ab;c"));
        assert_eq!(cookie_token(&HeaderMap::new()), None);
    }

    #[test]
    fn pages_and_public_paths_are_told_apart_from_the_json_api() {
        assert!(is_page("/") && is_page("/ui/runs") && !is_page("/runs"));
        assert!(is_public("/ui/login") && is_public("/ui/assets/app.js") && !is_public("/ui/runs"));
    }

    #[test]
    fn forms_from_other_origins_are_refused() {
        let mut headers = HeaderMap::new();
        assert!(same_origin(&headers));
        headers.insert(header::HOST, "127.0.0.1:8080".parse().unwrap());
        headers.insert(header::ORIGIN, "http://127.0.0.1:8080".parse().unwrap());
        assert!(same_origin(&headers));
        headers.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(!same_origin(&headers));
    }
}
