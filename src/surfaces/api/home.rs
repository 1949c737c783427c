//! The API on the home's own socket (`$LACHESIS_HOME/api.sock`), which every daemon serves:
//! the CLI hands it a submission instead of opening the store itself (see `client`). Like any
//! unix listener it is guarded by its mode (0600, inside the private home), not a token.
//!
//! A request may carry the sender's settings fingerprint. It is answered only when that matches
//! the daemon's: a CLI pointed at another store or workflow directory must not have its work
//! done here, so it is told `other_settings` and uses its own store.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use super::{ApiError, Failure, Listen, UnixBindError, app, bind_unix};
use crate::service::Service;
use crate::telemetry::Telemetry;

/// The header carrying `Settings::fingerprint` of the sender.
pub const SETTINGS_HEADER: &str = "x-lachesis-settings";
/// The error code of a request whose settings differ from the daemon's.
pub const OTHER_SETTINGS: &str = "other_settings";

/// Binds the home socket and serves until the task is dropped.
pub async fn serve(service: Service, telemetry: Arc<Telemetry>) -> Result<(), ApiError> {
    let path: PathBuf = service.settings.api_socket_path();
    let listen = Listen::Unix(path.clone());
    let listener = bind_unix(&path).map_err(|e| match e {
        UnixBindError::NotASocket => ApiError::NotASocket { path: path.clone() },
        UnixBindError::Io(source) => ApiError::Bind { listen: listen.clone(), source },
    })?;
    let fingerprint: Arc<str> = service.settings.fingerprint().into();
    let router =
        app(service, telemetry, None).layer(middleware::from_fn_with_state(fingerprint, same_settings));
    let _ = axum::serve(listener, router).await;
    Ok(())
}

async fn same_settings(State(ours): State<Arc<str>>, request: Request<Body>, next: Next) -> Response {
    if let Some(theirs) = request.headers().get(SETTINGS_HEADER)
        && theirs.as_bytes() != ours.as_bytes()
    {
        return Failure::new(
            StatusCode::CONFLICT,
            OTHER_SETTINGS,
            "this daemon uses another store, workflow directory or environment directories than the request's",
        )
        .into_response();
    }
    next.run(request).await
}
