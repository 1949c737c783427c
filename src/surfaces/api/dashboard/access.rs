//! Who may see the dashboard: the public paths, the login form and its cookie, and the check
//! that a form was posted from the dashboard's own pages.

use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::html;
use crate::api::AppState;

/// The cookie the login form sets.
pub const COOKIE: &str = "lachesis_token";

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

/// Refuses a form posted from another site's page (a browser names the page's origin).
pub(super) fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return true };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    origin.split_once("://").is_some_and(|(_, rest)| rest == host)
}

pub(super) fn cross_site() -> Response {
    (
        StatusCode::FORBIDDEN,
        Html(html::page("Refused", "", false, &html::failure("a form from another site was refused"))),
    )
        .into_response()
}

pub(super) async fn login_form() -> Html<String> {
    Html(html::login(None))
}

#[derive(Deserialize)]
pub(super) struct LoginForm {
    token: String,
}

pub(super) async fn login(
    State(s): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
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

pub(super) async fn logout() -> Response {
    let cookie = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/ui/login")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

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
