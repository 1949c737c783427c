//! The HTTP API (`lachesis daemon --listen ADDR`): the service layer as JSON over HTTP. One
//! route table (`routes.rs`) builds both the router and the OpenAPI document, so the two can't
//! drift apart. Binds 127.0.0.1 by default; any other address needs a bearer token.

mod routes;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Request, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub use routes::ROUTES;

use crate::metrics::Metrics;
use crate::service::{Service, ServiceError};

/// Request bodies are small JSON documents; anything bigger is refused.
pub const BODY_LIMIT: usize = 64 * 1024;

#[derive(Clone)]
pub struct AppState {
    pub service: Service,
    pub metrics: Arc<Metrics>,
    token: Option<Arc<str>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(
        "listening on {addr} needs a bearer token: set LACHESIS_API_TOKEN (only 127.0.0.1 and ::1 are open without one)"
    )]
    TokenRequired { addr: SocketAddr },
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

/// An error answer: a stable machine code and a message for people.
pub struct Failure {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl Failure {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Failure {
        Failure { status, code, message: message.into() }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.status, axum::Json(json!({ "error": self.code, "message": self.message }))).into_response()
    }
}

impl From<ServiceError> for Failure {
    fn from(err: ServiceError) -> Failure {
        use ServiceError as E;
        // A refused item of a batch answers as that item would alone, with its number.
        let inner = match &err {
            E::InBatch { source, .. } => source.as_ref(),
            other => other,
        };
        let (status, code) = match inner {
            E::UnknownRun(_) | E::UnknownTest(_) | E::UnknownSchedule { .. } => {
                (StatusCode::NOT_FOUND, "not_found")
            }
            E::Environment(crate::environments::LookupError::Unknown { .. }) => {
                (StatusCode::NOT_FOUND, "not_found")
            }
            E::Catalog(crate::workflow::CatalogError::Unknown { .. }) => (StatusCode::NOT_FOUND, "not_found"),
            E::Ambiguous { .. } | E::Environment(_) => (StatusCode::CONFLICT, "ambiguous"),
            E::MissingCredentials { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "missing_credentials"),
            E::Edit(crate::environments::EditError::Locked { .. }) => (StatusCode::FORBIDDEN, "locked_field"),
            E::NoSelection => (StatusCode::CONFLICT, "no_selection"),
            E::NeedsPostgres(_) => (StatusCode::CONFLICT, "needs_postgres"),
            E::UnknownNode { .. } => (StatusCode::NOT_FOUND, "not_found"),
            E::NodeNotLost { .. } => (StatusCode::CONFLICT, "node_not_lost"),
            E::AlreadyEnded { .. } | E::TestEnded { .. } => (StatusCode::CONFLICT, "already_ended"),
            E::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, "store"),
            E::Introspect(_) => (StatusCode::UNPROCESSABLE_ENTITY, "introspection"),
            _ => (StatusCode::BAD_REQUEST, "invalid"),
        };
        Failure::new(status, code, err.to_string())
    }
}

fn is_open_address(addr: &SocketAddr) -> bool {
    match addr.ip() {
        std::net::IpAddr::V4(ip) => ip == std::net::Ipv4Addr::LOCALHOST,
        std::net::IpAddr::V6(ip) => ip == std::net::Ipv6Addr::LOCALHOST,
    }
}

/// Byte-by-byte comparison that takes the same time wherever the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn require_token(State(state): State<AppState>, request: Request<Body>, next: Next) -> Response {
    if let Some(token) = &state.token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !constant_time_eq(given.as_bytes(), token.as_bytes()) {
            return Failure::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid bearer token is required",
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// The application, with the token check when `token` is set.
pub fn app(service: Service, metrics: Arc<Metrics>, token: Option<String>) -> Router {
    let state = AppState { service, metrics, token: token.map(Arc::from) };
    let mut router = Router::new();
    for route in ROUTES {
        router = router.route(route.path, (route.handler)());
    }
    router
        .fallback(|| async {
            Failure::new(StatusCode::NOT_FOUND, "not_found", "no such route (see /openapi.json)")
        })
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// The token the API will require on `addr`; an address other than 127.0.0.1/::1 without one
/// is refused before anything starts.
pub fn token_for(addr: SocketAddr) -> Result<Option<String>, ApiError> {
    let token = std::env::var("LACHESIS_API_TOKEN").ok().filter(|t| !t.is_empty());
    if !is_open_address(&addr) && token.is_none() {
        return Err(ApiError::TokenRequired { addr });
    }
    Ok(token)
}

/// Binds `addr` and serves until the task is dropped.
pub async fn serve(addr: SocketAddr, service: Service, metrics: Arc<Metrics>) -> Result<(), ApiError> {
    let token = token_for(addr)?;
    // On the open loopback address the token is still honoured if one is set.
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|source| ApiError::Bind { addr, source })?;
    tracing::info!(%addr, auth = token.is_some(), "HTTP API listening");
    let app = app(service, metrics, token);
    let _ = axum::serve(listener, app).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole_and_only_loopback_is_open() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd") && !constant_time_eq(b"abc", b"abcd"));
        assert!(
            is_open_address(&"127.0.0.1:1".parse().unwrap()) && is_open_address(&"[::1]:1".parse().unwrap())
        );
        assert!(
            !is_open_address(&"127.0.0.2:1".parse().unwrap())
                && !is_open_address(&"0.0.0.0:1".parse().unwrap())
        );
    }
}
