//! Webhook notifications (a test finished, a regression, a run completed or failed).
//!
//! Delivery runs in background tasks so a slow or dead receiver never holds up the supervisor; each
//! task reports how it went on a channel and the caller records that as an event. Webhook URLs often
//! carry credentials (`user:pass@`, `?token=`), so only a redacted form of the URL ever appears in
//! logs, reports or error messages.

use crate::http_client::error_chain;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::UnboundedSender;

/// Per-attempt limit on one POST, connect to response headers.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

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

/// A webhook endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhook {
    pub url: String,
}

/// What is POSTed, as JSON, to every webhook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payload {
    /// One of `Payload::TEST_FINISHED`, `REGRESSION`, `RUN_COMPLETED`, `RUN_FAILED`, `RUN_PREEMPTED`,
    /// `MORNING_REPORT`, `DAEMON_UNHEALTHY`, `DAEMON_HEALTHY`.
    pub kind: String,
    /// Which run/test/workflow this is about.
    pub ids: serde_json::Value,
    pub state: String,
    pub summary: serde_json::Value,
    /// Unix seconds.
    pub at: i64,
}

impl Payload {
    pub const TEST_FINISHED: &str = "test_finished";
    pub const REGRESSION: &str = "regression";
    pub const RUN_COMPLETED: &str = "run_completed";
    pub const RUN_FAILED: &str = "run_failed";
    /// A run was stopped for a run of higher priority; it queues again once its stages are gone.
    pub const RUN_PREEMPTED: &str = "run_preempted";
    /// The daemon's morning report (`src/report_poster.rs`): the whole report as the summary.
    pub const MORNING_REPORT: &str = "morning_report";
    /// The daemon's writes to the store started failing (posted once per episode, to
    /// `LACHESIS_WEBHOOKS`): the summary says since when, why and what is held.
    pub const DAEMON_UNHEALTHY: &str = "daemon_unhealthy";
    /// The daemon's writes land again, and what was held is recorded.
    pub const DAEMON_HEALTHY: &str = "daemon_healthy";
}

/// How one notification fared at one webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryReport {
    /// The webhook URL with credentials and query redacted.
    pub url: String,
    pub kind: String,
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
    fn backoff(&self, attempt: u32) -> Duration {
        let growth = self.factor.max(1).checked_pow(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
        self.first_backoff.saturating_mul(growth).min(self.max_backoff)
    }
}

/// Sends notifications to webhooks.
#[derive(Debug, Clone)]
pub struct WebhookClient {
    client: reqwest::Client,
    policy: RetryPolicy,
    timeout: Duration,
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
        Ok(WebhookClient { client, policy, timeout })
    }

    /// A 5 s per-attempt timeout and the default retry policy.
    pub fn with_defaults() -> Result<Self, WebhookError> {
        WebhookClient::new(DEFAULT_TIMEOUT, RetryPolicy::default())
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
                let outcome = webhooks.send(&hook, &note).await;
                let _ = report.send(outcome);
            });
        }
    }

    /// Delivers `note` to `hook`, retrying per the policy, and says how it went.
    pub async fn send(&self, hook: &Webhook, note: &Payload) -> DeliveryReport {
        let shown = crate::secrets::redact_url(&hook.url);
        let mut report = DeliveryReport {
            url: shown.clone(),
            kind: note.kind.clone(),
            delivered: false,
            attempts: 0,
            error: None,
            last_status: None,
        };
        let body = match serde_json::to_vec(note) {
            Ok(body) => body,
            Err(e) => {
                report.error = Some(format!("cannot encode notification: {e}"));
                return report;
            }
        };
        let url = match parse_url(&hook.url) {
            Ok(url) => url,
            Err(reason) => {
                report.error = Some(AttemptError::InvalidUrl { url: shown, reason }.to_string());
                return report;
            }
        };
        let attempts = self.policy.attempts.max(1);
        loop {
            report.attempts += 1;
            // Only the last attempt's status means anything to the reader of the report.
            report.last_status = None;
            let (outcome, retry_after) = self.attempt(&url, &body).await;
            let error = match outcome {
                Ok(status) => {
                    report.last_status = Some(status.as_u16());
                    report.delivered = true;
                    report.error = None;
                    tracing::debug!(url = %shown, kind = %note.kind, attempts = report.attempts,
                        "webhook delivered");
                    return report;
                }
                Err(error) => error,
            };
            if let AttemptError::Status(status) = &error {
                report.last_status = Some(status.as_u16());
            }
            let message = crate::secrets::redact_url_in(&error.to_string(), &hook.url);
            report.error = Some(message.clone());
            if !error.retryable() || report.attempts >= attempts {
                tracing::warn!(url = %shown, kind = %note.kind, attempts = report.attempts,
                    error = %message, "webhook not delivered");
                return report;
            }
            let wait = match retry_after {
                Some(asked) => asked.min(self.policy.max_backoff),
                None => self.policy.backoff(report.attempts),
            };
            tracing::debug!(url = %shown, attempt = report.attempts, error = %message, ?wait,
                "webhook attempt failed, retrying");
            tokio::time::sleep(wait).await;
        }
    }

    /// One POST. Returns the status on 2xx, else the failure and any `Retry-After` the receiver gave.
    async fn attempt(
        &self,
        url: &reqwest::Url,
        body: &[u8],
    ) -> (Result<StatusCode, AttemptError>, Option<Duration>) {
        let sent = self
            .client
            .post(url.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_vec())
            .send()
            .await;
        match sent {
            Ok(response) => {
                let status = response.status();
                if status.is_success() {
                    (Ok(status), None)
                } else {
                    (Err(AttemptError::Status(status)), retry_after(response.headers()))
                }
            }
            Err(e) if e.is_timeout() => (Err(AttemptError::Timeout(self.timeout)), None),
            Err(e) if e.is_connect() => (Err(AttemptError::Connect(error_chain(&e.without_url()))), None),
            Err(e) => (Err(AttemptError::Request(error_chain(&e.without_url()))), None),
        }
    }
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
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::{Notify, mpsc, watch};
    use tokio::time::{Instant, timeout};

    /// Upper bound on any wait in these tests; generous for a loaded 2-core CI machine.
    const DEADLINE: Duration = Duration::from_secs(10);

    /// What the test receiver does with the next request.
    #[derive(Clone)]
    enum Reply {
        Status(u16),
        StatusWith(u16, &'static str),
        /// Read the request, then never answer.
        Hang,
        /// Answer 200 only once the gate is opened.
        Gated(Arc<Notify>),
    }

    struct Hit {
        at: Instant,
        head: String,
        body: Vec<u8>,
    }

    struct Receiver {
        url: String,
        hits: Arc<Mutex<Vec<Hit>>>,
        count: watch::Receiver<usize>,
    }

    impl Receiver {
        async fn wait_for_hits(&mut self, n: usize) {
            timeout(DEADLINE, self.count.wait_for(|&c| c >= n))
                .await
                .expect("receiver saw too few requests before the deadline")
                .expect("receiver stopped");
        }

        fn gaps(&self) -> Vec<Duration> {
            let hits = self.hits.lock().unwrap();
            hits.windows(2).map(|w| w[1].at - w[0].at).collect()
        }
    }

    /// A minimal HTTP/1.1 receiver on 127.0.0.1:0 answering `script` in order (the last reply
    /// repeats), one request per connection.
    async fn receiver(script: Vec<Reply>) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let hits = Arc::new(Mutex::new(Vec::new()));
        let (count_tx, count) = watch::channel(0usize);
        let recorded = hits.clone();
        tokio::spawn(async move {
            let mut served = 0usize;
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let reply = script[served.min(script.len() - 1)].clone();
                served += 1;
                let (recorded, count_tx) = (recorded.clone(), count_tx.clone());
                tokio::spawn(async move { serve(stream, reply, recorded, count_tx).await });
            }
        });
        Receiver { url, hits, count }
    }

    async fn serve(
        mut stream: TcpStream,
        reply: Reply,
        hits: Arc<Mutex<Vec<Hit>>>,
        count: watch::Sender<usize>,
    ) {
        let Some((head, body)) = read_request(&mut stream).await else { return };
        let at = Instant::now();
        {
            let mut hits = hits.lock().unwrap();
            hits.push(Hit { at, head, body });
            count.send_replace(hits.len());
        }
        let (code, extra) = match reply {
            Reply::Status(code) => (code, ""),
            Reply::StatusWith(code, extra) => (code, extra),
            Reply::Hang => {
                // Hold the connection open without a word until the test ends.
                std::future::pending::<()>().await;
                return;
            }
            Reply::Gated(gate) => {
                gate.notified().await;
                (200, "")
            }
        };
        let response =
            format!("HTTP/1.1 {code} Scripted\r\nContent-Length: 0\r\nConnection: close\r\n{extra}\r\n");
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
    }

    async fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
        let mut data = Vec::new();
        let mut buf = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = stream.read(&mut buf).await.ok().filter(|&n| n > 0)?;
            data.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&data[..head_end]).to_string();
        let length: usize = head
            .lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        while data.len() < head_end + length {
            let n = stream.read(&mut buf).await.ok().filter(|&n| n > 0)?;
            data.extend_from_slice(&buf[..n]);
        }
        Some((head, data[head_end..head_end + length].to_vec()))
    }

    fn fast(attempts: u32, first_ms: u64, max_ms: u64) -> RetryPolicy {
        RetryPolicy {
            attempts,
            first_backoff: Duration::from_millis(first_ms),
            max_backoff: Duration::from_millis(max_ms),
            factor: 2,
        }
    }

    fn webhooks(policy: RetryPolicy) -> WebhookClient {
        WebhookClient::new(Duration::from_secs(2), policy).unwrap()
    }

    fn note() -> Payload {
        Payload {
            kind: Payload::RUN_COMPLETED.to_string(),
            ids: serde_json::json!({"run": "r-1", "test": 7}),
            state: "succeeded".to_string(),
            summary: serde_json::json!({"accuracy": 0.5, "steps": 3}),
            at: 1_770_000_000,
        }
    }

    fn hook(url: &str) -> Webhook {
        Webhook { url: url.to_string() }
    }

    /// A port that refuses connections: bound, then released.
    async fn closed_port_url(tail: &str) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        format!("http://{addr}{tail}")
    }

    #[tokio::test]
    async fn delivers_after_server_errors_with_growing_backoff() {
        let mut rx = receiver(vec![Reply::Status(500), Reply::Status(500), Reply::Status(200)]).await;
        let started = Instant::now();
        let report = webhooks(fast(5, 40, 1000)).send(&hook(&rx.url), &note()).await;
        assert!(report.delivered, "{report:?}");
        assert_eq!((report.attempts, report.error.as_deref(), report.last_status), (3, None, Some(200)));
        rx.wait_for_hits(3).await;
        let gaps = rx.gaps();
        // 40 ms after the first failure, 80 ms after the second.
        assert!(gaps[0] >= Duration::from_millis(40), "{gaps:?}");
        assert!(gaps[1] >= Duration::from_millis(80), "{gaps:?}");
        assert!(started.elapsed() < DEADLINE);
    }

    #[tokio::test]
    async fn body_is_the_notification_as_json() {
        let mut rx = receiver(vec![Reply::Status(204)]).await;
        let report = webhooks(fast(3, 10, 100)).send(&hook(&rx.url), &note()).await;
        assert!(report.delivered && report.attempts == 1, "{report:?}");
        rx.wait_for_hits(1).await;
        let hits = rx.hits.lock().unwrap();
        assert!(hits[0].head.starts_with("POST /hook HTTP/1.1\r\n"), "{}", hits[0].head);
        assert!(
            hits[0].head.to_ascii_lowercase().contains("content-type: application/json"),
            "{}",
            hits[0].head
        );
        let body: serde_json::Value = serde_json::from_slice(&hits[0].body).unwrap();
        assert_eq!(body["kind"], "run_completed");
        assert_eq!(body["ids"], serde_json::json!({"run": "r-1", "test": 7}));
        assert_eq!(body["state"], "succeeded");
        assert_eq!(body["summary"]["accuracy"], 0.5);
        assert_eq!(body["at"], 1_770_000_000);
        let back: Payload = serde_json::from_value(body).unwrap();
        assert_eq!(back, note());
    }

    #[tokio::test]
    async fn client_errors_give_up_at_once() {
        let mut rx = receiver(vec![Reply::Status(404)]).await;
        let report = webhooks(fast(5, 10, 100)).send(&hook(&rx.url), &note()).await;
        assert!(!report.delivered);
        assert_eq!(report.attempts, 1);
        assert_eq!(report.last_status, Some(404));
        assert_eq!(report.error.as_deref(), Some("http 404 Not Found"));
        rx.wait_for_hits(1).await;
        // A redirect is not followed and not retried either.
        let rx = receiver(vec![Reply::StatusWith(302, "Location: http://127.0.0.1:9/elsewhere\r\n")]).await;
        let report = webhooks(fast(5, 10, 100)).send(&hook(&rx.url), &note()).await;
        assert_eq!((report.delivered, report.attempts, report.last_status), (false, 1, Some(302)));
    }

    #[tokio::test]
    async fn connection_refused_is_retried_then_reported() {
        let url = closed_port_url("/hook").await;
        let report = webhooks(fast(3, 10, 50)).send(&hook(&url), &note()).await;
        assert!(!report.delivered);
        assert_eq!((report.attempts, report.last_status), (3, None));
        let error = report.error.unwrap();
        assert!(error.starts_with("connection failed"), "{error}");
        assert!(error.to_lowercase().contains("refused"), "{error}");
    }

    #[tokio::test]
    async fn silent_receiver_times_out_each_attempt() {
        let mut rx = receiver(vec![Reply::Hang]).await;
        let per_attempt = Duration::from_millis(150);
        let started = Instant::now();
        let report =
            WebhookClient::new(per_attempt, fast(2, 10, 50)).unwrap().send(&hook(&rx.url), &note()).await;
        let elapsed = started.elapsed();
        assert!(!report.delivered);
        assert_eq!(report.attempts, 2);
        assert_eq!(report.error.as_deref(), Some("timed out after 150ms"));
        rx.wait_for_hits(2).await;
        assert!(elapsed >= per_attempt * 2, "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    }

    #[tokio::test]
    async fn retry_after_is_honoured() {
        let mut rx = receiver(vec![Reply::StatusWith(429, "Retry-After: 1\r\n"), Reply::Status(200)]).await;
        // The policy's own backoff (10 ms) is far shorter than what the receiver asked for.
        let report = webhooks(fast(3, 10, 5000)).send(&hook(&rx.url), &note()).await;
        assert!(report.delivered && report.attempts == 2, "{report:?}");
        rx.wait_for_hits(2).await;
        let gaps = rx.gaps();
        assert!(gaps[0] >= Duration::from_secs(1), "{gaps:?}");
    }

    #[tokio::test]
    async fn retry_after_is_capped_by_max_backoff() {
        let mut rx =
            receiver(vec![Reply::StatusWith(503, "Retry-After: 3600\r\n"), Reply::Status(200)]).await;
        let report = webhooks(fast(3, 10, 150)).send(&hook(&rx.url), &note()).await;
        assert!(report.delivered && report.attempts == 2, "{report:?}");
        rx.wait_for_hits(2).await;
        let gaps = rx.gaps();
        assert!(gaps[0] >= Duration::from_millis(150), "{gaps:?}");
        assert!(gaps[0] < Duration::from_secs(3), "{gaps:?}");
    }

    #[tokio::test]
    async fn exhausted_retries_report_the_last_error() {
        let mut rx = receiver(vec![Reply::Status(502)]).await;
        let report = webhooks(fast(3, 5, 20)).send(&hook(&rx.url), &note()).await;
        assert_eq!((report.delivered, report.attempts), (false, 3));
        assert_eq!(report.error.as_deref(), Some("http 502 Bad Gateway"));
        rx.wait_for_hits(3).await;
        // attempts = 0 still makes one attempt.
        let report = webhooks(fast(0, 5, 20)).send(&hook(&rx.url), &note()).await;
        assert_eq!(report.attempts, 1);
    }

    #[tokio::test]
    async fn spawn_send_returns_before_delivery() {
        let gate = Arc::new(Notify::new());
        let mut slow = receiver(vec![Reply::Gated(gate.clone())]).await;
        let refusing = receiver(vec![Reply::Status(404)]).await;
        let (tx, mut reports) = mpsc::unbounded_channel();
        webhooks(fast(3, 10, 100)).spawn_send(vec![hook(&slow.url), hook(&refusing.url)], note(), tx);
        // The slow receiver has the request but holds its answer: its report can't exist yet.
        slow.wait_for_hits(1).await;
        let first = timeout(DEADLINE, reports.recv()).await.unwrap().unwrap();
        assert_eq!((first.url.as_str(), first.delivered), (refusing.url.as_str(), false));
        assert!(reports.try_recv().is_err(), "the gated delivery reported before its answer");
        gate.notify_one();
        let second = timeout(DEADLINE, reports.recv()).await.unwrap().unwrap();
        assert_eq!((second.url.as_str(), second.delivered, second.attempts), (slow.url.as_str(), true, 1));
        assert_eq!(second.kind, "run_completed");
        // Every task dropped its sender: the channel closes with nothing more.
        assert!(timeout(DEADLINE, reports.recv()).await.unwrap().is_none());
    }

    #[test]
    fn spawn_send_outside_a_runtime_reports_instead_of_panicking() {
        let (tx, mut reports) = mpsc::unbounded_channel();
        webhooks(fast(3, 10, 100)).spawn_send(vec![hook("http://u:p@127.0.0.1:1/x?t=s")], note(), tx);
        let report = reports.try_recv().unwrap();
        assert_eq!((report.delivered, report.attempts), (false, 0));
        assert_eq!(report.url, "http://***@127.0.0.1:1/x?***");
    }

    #[tokio::test]
    async fn unusable_urls_fail_without_attempts() {
        for url in ["not a url", "ftp://user:pw@host/x?token=abc", ""] {
            let report = webhooks(fast(3, 10, 100)).send(&hook(url), &note()).await;
            assert_eq!((report.delivered, report.attempts), (false, 0), "{url}");
            let error = report.error.unwrap();
            assert!(error.starts_with("invalid webhook url"), "{error}");
            assert!(!error.contains("pw") && !error.contains("abc"), "{error}");
        }
    }

    #[tokio::test]
    async fn secrets_in_the_url_never_reach_reports() {
        let rx = receiver(vec![Reply::Status(404)]).await;
        let secret_url = rx.url.replace("http://", "http://alice:s3cr3t@") + "?token=abc123&x=1";
        let report = webhooks(fast(2, 10, 50)).send(&hook(&secret_url), &note()).await;
        let shown = rx.url.replace("http://", "http://***@") + "?***";
        assert_eq!(report.url, shown);
        let text = serde_json::to_string(&report).unwrap();
        for secret in ["alice", "s3cr3t", "abc123", "token"] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        // reqwest's own errors name the URL; they must come out scrubbed too.
        let refused = closed_port_url("/h?token=abc123").await.replace("http://", "http://alice:s3cr3t@");
        let report = webhooks(fast(2, 10, 50)).send(&hook(&refused), &note()).await;
        let text = serde_json::to_string(&report).unwrap();
        for secret in ["alice", "s3cr3t", "abc123"] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let policy = RetryPolicy::default();
        let waits: Vec<u128> = (1..=8).map(|n| policy.backoff(n).as_millis()).collect();
        assert_eq!(waits, vec![500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        // Huge attempt numbers and factors saturate instead of overflowing.
        let wild = RetryPolicy { factor: 1000, ..RetryPolicy::default() };
        assert_eq!(wild.backoff(40), Duration::from_secs(30));
        let flat = RetryPolicy { factor: 0, ..RetryPolicy::default() };
        assert_eq!(flat.backoff(3), Duration::from_millis(500));
    }
}
