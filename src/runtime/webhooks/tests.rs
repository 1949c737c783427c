//! The client's own tests, against a scripted receiver on 127.0.0.1.

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
    /// This status with this body.
    Body(u16, String),
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

async fn serve(mut stream: TcpStream, reply: Reply, hits: Arc<Mutex<Vec<Hit>>>, count: watch::Sender<usize>) {
    let Some((head, body)) = read_request(&mut stream).await else { return };
    let at = Instant::now();
    {
        let mut hits = hits.lock().unwrap();
        hits.push(Hit { at, head, body });
        count.send_replace(hits.len());
    }
    let (code, extra) = match reply {
        Reply::Body(code, text) => {
            let head = format!(
                "HTTP/1.1 {code} Scripted\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                text.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(text.as_bytes()).await;
            let _ = stream.shutdown().await;
            return;
        }
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
        delivery_id: None,
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
    let report = webhooks(fast(5, 40, 1000)).send(&hook(&rx.url), &note(), Uuid::new_v4()).await;
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
    let id = Uuid::new_v4();
    let signer = Signer::new("shh", "test");
    let client = webhooks(fast(3, 10, 100)).signed(signer.clone());
    let report = client.send(&hook(&rx.url), &note(), id).await;
    assert!(report.delivered && report.attempts == 1, "{report:?}");
    assert_eq!(report.delivery_id, Some(id));
    rx.wait_for_hits(1).await;
    let hits = rx.hits.lock().unwrap();
    assert!(hits[0].head.starts_with("POST /hook HTTP/1.1\r\n"), "{}", hits[0].head);
    assert!(hits[0].head.to_ascii_lowercase().contains("content-type: application/json"), "{}", hits[0].head);
    let body: serde_json::Value = serde_json::from_slice(&hits[0].body).unwrap();
    assert_eq!(body["kind"], "run_completed");
    assert_eq!(body["ids"], serde_json::json!({"run": "r-1", "test": 7}));
    assert_eq!(body["state"], "succeeded");
    assert_eq!(body["summary"]["accuracy"], 0.5);
    assert_eq!(body["at"], 1_770_000_000);
    assert_eq!(body["delivery_id"], id.to_string());
    let head = hits[0].head.to_ascii_lowercase();
    assert!(head.contains(&format!("x-lachesis-delivery: {id}")), "{head}");
    assert!(head.contains("x-lachesis-event: run_completed"), "{head}");
    let signature = format!("x-lachesis-signature: {}", signer.sign(&hits[0].body));
    assert!(head.contains(&signature), "{head}");
    let back: Payload = serde_json::from_value(body).unwrap();
    assert_eq!(back, Payload { delivery_id: Some(id.to_string()), ..note() });
}

#[tokio::test]
async fn client_errors_give_up_at_once() {
    let mut rx = receiver(vec![Reply::Status(404)]).await;
    let report = webhooks(fast(5, 10, 100)).send(&hook(&rx.url), &note(), Uuid::new_v4()).await;
    assert!(!report.delivered);
    assert_eq!(report.attempts, 1);
    assert_eq!(report.last_status, Some(404));
    assert_eq!(report.error.as_deref(), Some("http 404 Not Found"));
    rx.wait_for_hits(1).await;
    // A redirect is not followed and not retried either.
    let rx = receiver(vec![Reply::StatusWith(302, "Location: http://127.0.0.1:9/elsewhere\r\n")]).await;
    let report = webhooks(fast(5, 10, 100)).send(&hook(&rx.url), &note(), Uuid::new_v4()).await;
    assert_eq!((report.delivered, report.attempts, report.last_status), (false, 1, Some(302)));
}

#[tokio::test]
async fn connection_refused_is_retried_then_reported() {
    let url = closed_port_url("/hook").await;
    let report = webhooks(fast(3, 10, 50)).send(&hook(&url), &note(), Uuid::new_v4()).await;
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
    let report = WebhookClient::new(per_attempt, fast(2, 10, 50))
        .unwrap()
        .send(&hook(&rx.url), &note(), Uuid::new_v4())
        .await;
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
    let report = webhooks(fast(3, 10, 5000)).send(&hook(&rx.url), &note(), Uuid::new_v4()).await;
    assert!(report.delivered && report.attempts == 2, "{report:?}");
    rx.wait_for_hits(2).await;
    let gaps = rx.gaps();
    assert!(gaps[0] >= Duration::from_secs(1), "{gaps:?}");
}

#[tokio::test]
async fn retry_after_is_capped_by_max_backoff() {
    let mut rx = receiver(vec![Reply::StatusWith(503, "Retry-After: 3600\r\n"), Reply::Status(200)]).await;
    let report = webhooks(fast(3, 10, 150)).send(&hook(&rx.url), &note(), Uuid::new_v4()).await;
    assert!(report.delivered && report.attempts == 2, "{report:?}");
    rx.wait_for_hits(2).await;
    let gaps = rx.gaps();
    assert!(gaps[0] >= Duration::from_millis(150), "{gaps:?}");
    assert!(gaps[0] < Duration::from_secs(3), "{gaps:?}");
}

#[tokio::test]
async fn exhausted_retries_report_the_last_error() {
    let mut rx = receiver(vec![Reply::Status(502)]).await;
    let report = webhooks(fast(3, 5, 20)).send(&hook(&rx.url), &note(), Uuid::new_v4()).await;
    assert_eq!((report.delivered, report.attempts), (false, 3));
    assert_eq!(report.error.as_deref(), Some("http 502 Bad Gateway"));
    rx.wait_for_hits(3).await;
    // attempts = 0 still makes one attempt.
    let report = webhooks(fast(0, 5, 20)).send(&hook(&rx.url), &note(), Uuid::new_v4()).await;
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
        let report = webhooks(fast(3, 10, 100)).send(&hook(url), &note(), Uuid::new_v4()).await;
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
    let report = webhooks(fast(2, 10, 50)).send(&hook(&secret_url), &note(), Uuid::new_v4()).await;
    let shown = rx.url.replace("http://", "http://***@") + "?***";
    assert_eq!(report.url, shown);
    let text = serde_json::to_string(&report).unwrap();
    for secret in ["alice", "s3cr3t", "abc123", "token"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    // reqwest's own errors name the URL; they must come out scrubbed too.
    let refused = closed_port_url("/h?token=abc123").await.replace("http://", "http://alice:s3cr3t@");
    let report = webhooks(fast(2, 10, 50)).send(&hook(&refused), &note(), Uuid::new_v4()).await;
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

#[tokio::test]
async fn one_post_says_whether_to_retry_with_a_bounded_excerpt() {
    let id = Uuid::new_v4();
    let body = note().body(id).unwrap();
    let long = format!("gone\nfor good {}", "x".repeat(10_000));
    let rx = receiver(vec![Reply::Body(410, long)]).await;
    let answer = webhooks(fast(3, 10, 100)).post(&rx.url, id, "run_failed", &body).await;
    let Answer::Refused { status: Some(410), answer } = answer else { panic!("{answer:?}") };
    assert!(answer.starts_with("http 410 Gone: gone\\nfor good xx"), "{answer}");
    assert!(answer.len() < 300, "the excerpt is bounded: {}", answer.len());
    let rx = receiver(vec![Reply::StatusWith(429, "Retry-After: 7\r\n")]).await;
    let answer = webhooks(fast(3, 10, 100)).post(&rx.url, id, "run_failed", &body).await;
    let want = Answer::Retry {
        status: Some(429),
        answer: "http 429 Too Many Requests".into(),
        retry_after: Some(Duration::from_secs(7)),
    };
    assert_eq!(answer, want);
    let rx = receiver(vec![Reply::Status(408)]).await;
    let answer = webhooks(fast(3, 10, 100)).post(&rx.url, id, "run_failed", &body).await;
    assert!(matches!(answer, Answer::Retry { status: Some(408), .. }), "{answer:?}");
    let answer = webhooks(fast(3, 10, 100)).post("ftp://h/x?token=t", id, "run_failed", &body).await;
    assert_eq!(answer.status(), None);
    assert!(matches!(&answer, Answer::Refused { answer, .. } if !answer.contains("token=t")), "{answer:?}");
}
