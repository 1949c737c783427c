//! The CLI's way to the home's daemon: `run start` sends its run over the daemon's home socket
//! (`home.rs`), and the daemon writes it with the store connection it already holds. The command
//! then neither opens the store nor reads its schema, and costs about half the CPU.
//!
//! Nothing is lost to a missing daemon: when none listens, or it runs with other settings, the
//! caller is told so before anything was sent and uses the store itself, as before.

use std::time::Duration;

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::StatusCode;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;

use super::home::{OTHER_SETTINGS, SETTINGS_HEADER};
use crate::service::{RunRequest, RunSummary};
use crate::settings::Settings;

/// How long a daemon that took a request may take to answer it. Past the store's own busy
/// timeout (15 s), which is what a direct submission would wait at most.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon refused the request; its message is the one the store path would give, and
    /// its HTTP status says whether the request or the daemon was at fault.
    #[error("{message}")]
    Refused { status: u16, message: String },
    /// Sent, but no answer came: whether it was done is unknown.
    #[error(
        "the daemon took the request but did not answer ({0}); it may have been done: check `lachesis run list`"
    )]
    Unanswered(String),
}

/// Queues one run through the home's daemon. `None`: no daemon with these settings listens,
/// and nothing was sent.
pub async fn submit(settings: &Settings, request: &RunRequest) -> Result<Option<RunSummary>, ClientError> {
    let body = serde_json::to_vec(request)
        .map_err(|e| ClientError::Refused { status: 400, message: e.to_string() })?;
    post(settings, "/runs", body).await
}

/// The health of the home's daemon (`GET /health`, answered 200 or 503 with the same body):
/// None when no daemon with these settings answers.
pub async fn health(settings: &Settings) -> Option<crate::reconciler::Health> {
    let request = hyper::Request::get("/health")
        .header(HOST, "lachesis")
        .header(SETTINGS_HEADER, settings.fingerprint())
        .body(Full::new(Bytes::new()))
        .ok()?;
    let (status, bytes) = exchange(settings, request, ANSWER_WITHIN).await.ok()??;
    match status {
        StatusCode::OK | StatusCode::SERVICE_UNAVAILABLE => serde_json::from_slice(&bytes).ok(),
        _ => None,
    }
}

/// POSTs a JSON `body` to the daemon of `settings`' home and reads its answer as `T`.
async fn post<T: DeserializeOwned>(
    settings: &Settings,
    path: &str,
    body: Vec<u8>,
) -> Result<Option<T>, ClientError> {
    let request = hyper::Request::post(path)
        .header(HOST, "lachesis")
        .header(CONTENT_TYPE, "application/json")
        .header(SETTINGS_HEADER, settings.fingerprint())
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| ClientError::Refused { status: 400, message: e.to_string() })?;
    let Some((status, bytes)) = exchange(settings, request, ANSWER_WITHIN).await? else { return Ok(None) };
    let unanswered = |e: &dyn std::fmt::Display| ClientError::Unanswered(e.to_string());
    if status.is_success() {
        return serde_json::from_slice(&bytes).map(Some).map_err(|e| unanswered(&e));
    }
    let failure: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    if status == StatusCode::CONFLICT && failure["error"] == OTHER_SETTINGS {
        return Ok(None);
    }
    let message = failure["message"].as_str().map_or_else(|| status.to_string(), str::to_string);
    Err(ClientError::Refused { status: status.as_u16(), message })
}

/// Sends `request` to the daemon of `settings`' home: its status and body, or None when no
/// daemon could be reached (and nothing was sent).
async fn exchange(
    settings: &Settings,
    request: hyper::Request<Full<Bytes>>,
    within: Duration,
) -> Result<Option<(StatusCode, Bytes)>, ClientError> {
    // Any failure to connect leaves nothing done: a stale socket, no daemon, a foreign file.
    let Ok(stream) = tokio::net::UnixStream::connect(settings.api_socket_path()).await else {
        return Ok(None);
    };
    let Ok((mut sender, connection)) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    else {
        return Ok(None);
    };
    tokio::spawn(connection);
    let unanswered = |e: &dyn std::fmt::Display| ClientError::Unanswered(e.to_string());
    let exchange = async {
        let response = sender.send_request(request).await.map_err(|e| unanswered(&e))?;
        let status = response.status();
        let bytes = response.into_body().collect().await.map_err(|e| unanswered(&e))?.to_bytes();
        Ok::<_, ClientError>((status, bytes))
    };
    let answer = tokio::time::timeout(within, exchange)
        .await
        .map_err(|_| unanswered(&format!("no answer within {}s", within.as_secs())))??;
    Ok(Some(answer))
}

/// GETs `path` from the daemon listening on `settings`' home socket, whatever its settings:
/// the answer's status and JSON body (null when it is not JSON). `None` when no daemon answers
/// within `within`.
pub async fn get(settings: &Settings, path: &str, within: Duration) -> Option<(u16, serde_json::Value)> {
    let request = hyper::Request::get(path).header(HOST, "lachesis").body(Full::new(Bytes::new())).ok()?;
    let (status, bytes) = exchange(settings, request, within).await.ok().flatten()?;
    Some((status.as_u16(), serde_json::from_slice(&bytes).unwrap_or_default()))
}
