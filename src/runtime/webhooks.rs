//! Webhook notifications (a run ended, a test finished, a regression, a sweep ended, the
//! daemon's health, the morning report).
//!
//! This module posts: one attempt at a time (`WebhookClient::post`, which the outbox's poster
//! drives), or a whole retried delivery in memory (`WebhookClient::send`, for what cannot go
//! through the store). Every post carries its delivery id and the body's signature. Webhook
//! URLs often carry credentials (`user:pass@`, `?token=`), so only a redacted form of the URL
//! ever appears in logs, reports or error messages.

mod payload;
mod policy;
mod signature;

use crate::http_client::error_chain;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::UnboundedSender;
use uuid::Uuid;

pub use payload::Payload;
pub use policy::{BACKOFF_VAR, OUTBOX_CAP_VAR, OutboxPolicy, PolicyError, RETRY_FOR_VAR};
pub use signature::{SECRET_FILE, SECRET_VAR, SIGNATURE_HEADER, SecretError, Signer, hmac_sha256};

/// Per-attempt limit on one POST, connect to response headers.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The header carrying the delivery's id (also the body's `delivery_id`).
pub const DELIVERY_HEADER: &str = "X-Lachesis-Delivery";
/// The header carrying the payload's kind.
pub const EVENT_HEADER: &str = "X-Lachesis-Event";
/// How much of a refusing receiver's answer is kept (bytes, then one line).
const ANSWER_EXCERPT: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("cannot build http client: {0}")]
    Client(String),
}

/// Why one attempt failed, and whether trying again could help.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error("invalid webhook url {url}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("http {0}")]
    Status(StatusCode),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("connection failed: {0}")]
    Connect(String),
    #[error("request failed: {0}")]
    Request(String),
}

impl AttemptError {
    fn retryable(&self) -> bool {
        match self {
            // 408 is the receiver timing out on us: as transient as a 5xx.
            AttemptError::Status(s) => {
                s.is_server_error()
                    || *s == StatusCode::TOO_MANY_REQUESTS
                    || *s == StatusCode::REQUEST_TIMEOUT
            }
            AttemptError::Timeout(_) | AttemptError::Connect(_) | AttemptError::Request(_) => true,
            AttemptError::InvalidUrl { .. } => false,
        }
    }
}

/// How one POST went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A 2xx.
    Delivered { status: u16 },
    /// Worth another try: a 5xx, 408 or 429 (with the `Retry-After` it gave), a timeout, a
    /// connection error. `answer` says what came back (status and a bounded excerpt).
    Retry { status: Option<u16>, answer: String, retry_after: Option<Duration> },
    /// Refused for good: any other 4xx (or 3xx: a moved webhook is reconfigured, not followed),
    /// an unusable URL.
    Refused { status: Option<u16>, answer: String },
}

impl Answer {
    pub fn status(&self) -> Option<u16> {
        match self {
            Answer::Delivered { status } => Some(*status),
            Answer::Retry { status, .. } | Answer::Refused { status, .. } => *status,
        }
    }

    /// What came back, for a person: the status and an excerpt of the body, or the error.
    pub fn text(&self) -> String {
        match self {
            Answer::Delivered { status } => format!("http {status}"),
            Answer::Retry { answer, .. } | Answer::Refused { answer, .. } => answer.clone(),
        }
    }
}

/// A webhook endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhook {
    pub url: String,
}

/// How one notification fared at one webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryReport {
    /// The webhook URL with credentials and query redacted.
    pub url: String,
    pub kind: String,
    /// The delivery id every attempt carried.
    #[serde(default)]
    pub delivery_id: Option<Uuid>,
    pub delivered: bool,
    /// Requests made (0 when the URL was unusable).
    pub attempts: u32,
    /// Why the last attempt failed; `None` when delivered.
    pub error: Option<String>,
    /// The HTTP status of the last response, if any came back.
    #[serde(default)]
    pub last_status: Option<u16>,
}

/// Retries with exponential backoff: the wait after failed attempt n is
/// `first_backoff * factor^(n-1)`, at most `max_backoff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, including the first (0 is treated as 1).
    pub attempts: u32,
    pub first_backoff: Duration,
    /// Also caps a receiver's `Retry-After`, so one receiver can't park a task for hours.
    pub max_backoff: Duration,
    pub factor: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            first_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            factor: 2,
        }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt `attempt` (1-based), before any `Retry-After`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let growth = self.factor.max(1).checked_pow(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
        self.first_backoff.saturating_mul(growth).min(self.max_backoff)
    }

    /// The wait after failed attempt `attempt` whose receiver asked for `retry_after`: what it
    /// asked, capped by `max_backoff`, else the backoff.
    pub fn wait(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(asked) => asked.min(self.max_backoff),
            None => self.backoff(attempt),
        }
    }
}

/// Sends notifications to webhooks.
#[derive(Debug, Clone)]
pub struct WebhookClient {
    client: reqwest::Client,
    policy: RetryPolicy,
    timeout: Duration,
    signer: Option<Signer>,
}

impl WebhookClient {
    /// `timeout` bounds each attempt.
    pub fn new(timeout: Duration, policy: RetryPolicy) -> Result<Self, WebhookError> {
        let client = crate::http_client::builder()
            .timeout(timeout)
            // A redirected POST may turn into a GET or carry the body elsewhere; a webhook that
            // moved should be reconfigured, not followed.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| WebhookError::Client(error_chain(&e.without_url())))?;
        Ok(WebhookClient { client, policy, timeout, signer: None })
    }

    /// A 5 s per-attempt timeout and the default retry policy.
    pub fn with_defaults() -> Result<Self, WebhookError> {
        WebhookClient::new(DEFAULT_TIMEOUT, RetryPolicy::default())
    }

    /// Signs every body with `signer` (the daemon's clients always have one).
    pub fn signed(mut self, signer: Signer) -> Self {
        self.signer = Some(signer);
        self
    }

    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Starts one delivery task per webhook and returns at once; each task sends its
    /// `DeliveryReport` on `report` when it is done. Outside a tokio runtime nothing can be
    /// delivered, and every hook is reported undelivered straight away.
    pub fn spawn_send(&self, hooks: Vec<Webhook>, note: Payload, report: UnboundedSender<DeliveryReport>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            for hook in hooks {
                // The receiver may be gone; there is no one else to tell.
                let _ = report.send(DeliveryReport {
                    url: crate::secrets::redact_url(&hook.url),
                    kind: note.kind.clone(),
                    delivery_id: None,
                    delivered: false,
                    attempts: 0,
                    error: Some("no async runtime to deliver on".to_string()),
                    last_status: None,
                });
            }
            return;
        };
        for hook in hooks {
            let (webhooks, note, report) = (self.clone(), note.clone(), report.clone());
            runtime.spawn(async move {
                let outcome = webhooks.send(&hook, &note, Uuid::new_v4()).await;
                let _ = report.send(outcome);
            });
        }
    }

    /// Delivers `note` to `hook` as delivery `id` in memory, retrying per the policy, and says
    /// how it went.
    pub async fn send(&self, hook: &Webhook, note: &Payload, id: Uuid) -> DeliveryReport {
        let shown = crate::secrets::redact_url(&hook.url);
        let mut report = DeliveryReport {
            url: shown.clone(),
            kind: note.kind.clone(),
            delivery_id: Some(id),
            delivered: false,
            attempts: 0,
            error: None,
            last_status: None,
        };
        let body = match note.body(id) {
            Ok(body) => body,
            Err(e) => {
                report.error = Some(format!("cannot encode notification: {e}"));
                return report;
            }
        };
        let attempts = self.policy.attempts.max(1);
        loop {
            let answer = self.post(&hook.url, id, &note.kind, &body).await;
            if !matches!(&answer, Answer::Refused { status: None, .. }) {
                report.attempts += 1;
            }
            // Only the last attempt's status means anything to the reader of the report.
            report.last_status = answer.status();
            let retry_after = match answer {
                Answer::Delivered { .. } => {
                    report.delivered = true;
                    report.error = None;
                    tracing::debug!(url = %shown, kind = %note.kind, attempts = report.attempts,
                        "webhook delivered");
                    return report;
                }
                Answer::Refused { answer, .. } => {
                    tracing::warn!(url = %shown, kind = %note.kind, attempts = report.attempts,
                        error = %answer, "webhook not delivered");
                    report.error = Some(answer);
                    return report;
                }
                Answer::Retry { answer, retry_after, .. } => {
                    report.error = Some(answer);
                    retry_after
                }
            };
            if report.attempts >= attempts {
                tracing::warn!(url = %shown, kind = %note.kind, attempts = report.attempts,
                    error = report.error.as_deref().unwrap_or(""), "webhook not delivered");
                return report;
            }
            let wait = self.policy.wait(report.attempts, retry_after);
            tracing::debug!(url = %shown, attempt = report.attempts, ?wait, "webhook attempt failed, retrying");
            tokio::time::sleep(wait).await;
        }
    }

    /// One POST of `body` (a payload of `kind` with its `delivery_id`) to `url` as delivery
    /// `id`, signed when this client has a signer. Never names the URL unredacted.
    pub async fn post(&self, url: &str, id: Uuid, kind: &str, body: &[u8]) -> Answer {
        let parsed = match parse_url(url) {
            Ok(parsed) => parsed,
            Err(reason) => {
                let shown = crate::secrets::redact_url(url);
                let answer = AttemptError::InvalidUrl { url: shown, reason }.to_string();
                return Answer::Refused { status: None, answer };
            }
        };
        let mut request = self
            .client
            .post(parsed)
            .header(CONTENT_TYPE, "application/json")
            .header(DELIVERY_HEADER, id.to_string())
            .header(EVENT_HEADER, kind);
        if let Some(signer) = &self.signer {
            request = request.header(SIGNATURE_HEADER, signer.sign(body));
        }
        let error = match request.body(body.to_vec()).send().await {
            Ok(response) if response.status().is_success() => {
                return Answer::Delivered { status: response.status().as_u16() };
            }
            Ok(response) => {
                let status = response.status();
                let retry_after = retry_after(response.headers());
                let excerpt = excerpt(response).await;
                let error = AttemptError::Status(status);
                let answer = match excerpt.is_empty() {
                    true => error.to_string(),
                    false => format!("{error}: {excerpt}"),
                };
                let answer = crate::secrets::redact_url_in(&answer, url);
                return match error.retryable() {
                    true => Answer::Retry { status: Some(status.as_u16()), answer, retry_after },
                    false => Answer::Refused { status: Some(status.as_u16()), answer },
                };
            }
            Err(e) if e.is_timeout() => AttemptError::Timeout(self.timeout),
            Err(e) if e.is_connect() => AttemptError::Connect(error_chain(&e.without_url())),
            Err(e) => AttemptError::Request(error_chain(&e.without_url())),
        };
        let answer = crate::secrets::redact_url_in(&error.to_string(), url);
        Answer::Retry { status: None, answer, retry_after: None }
    }
}

/// The start of a refusing receiver's body, on one line: at most `ANSWER_EXCERPT` bytes are
/// read, whatever it sends.
async fn excerpt(mut response: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < ANSWER_EXCERPT {
        match tokio::time::timeout(Duration::from_secs(1), response.chunk()).await {
            Ok(Ok(Some(chunk))) => bytes.extend_from_slice(&chunk),
            _ => break,
        }
    }
    bytes.truncate(ANSWER_EXCERPT);
    crate::text::one_line(String::from_utf8_lossy(&bytes).trim())
}

/// What a delivery keeps of its webhook's URL besides its redacted form: the SHA-256 of the URL
/// (hex), by which a daemon finds it again among its `LACHESIS_WEBHOOKS`.
pub fn target_key(url: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(url.trim().as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_url(raw: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(raw.trim()).map_err(|e| e.to_string())?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(format!("scheme {other} is not http or https")),
    }
}

/// `Retry-After` in seconds. The HTTP-date form is ignored (the normal backoff applies), since
/// receivers that rate-limit webhooks send seconds.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests;
