//! W&B's GraphQL endpoint: one POST with the API key as HTTP basic auth (`api:KEY`), an answer
//! read up to a bound, and every failure a `WandbError` with the key masked.

use std::fmt;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::error::{WandbError, decode};
use crate::http_client::error_chain;

/// A W&B answer larger than this is refused rather than buffered; a sampled history of a few
/// hundred rows is well under a megabyte.
const MAX_BODY: usize = 32 << 20;

/// Messages of W&B's own GraphQL errors kept in an error, so a server that answers with hundreds
/// of them does not make an unreadable error.
const MAX_MESSAGES: usize = 5;

/// One W&B server and one API key.
#[derive(Clone)]
pub(super) struct GraphQl {
    base: String,
    key: String,
    http: reqwest::Client,
    timeout: Duration,
}

impl fmt::Debug for GraphQl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // By hand so the key can never be printed.
        f.debug_struct("GraphQl")
            .field("base", &self.base)
            .field("key", &"***")
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl GraphQl {
    /// `base` is the server root (`https://api.wandb.ai`); `timeout` bounds each request, connect
    /// to last byte.
    pub(super) fn new(base: &str, key: &str, timeout: Duration) -> Result<GraphQl, WandbError> {
        // Keys pasted from a file or a terminal come with a trailing newline.
        let key = key.trim().to_string();
        if key.is_empty() {
            return Err(WandbError::Config { detail: "the API key is empty".into() });
        }
        let base = base.trim().trim_end_matches('/').to_string();
        match reqwest::Url::parse(&base) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            // The base itself is not shown: a mistyped variable may hold anything, the key included.
            _ => return Err(WandbError::Config { detail: "the base URL is not an http(s) URL".into() }),
        }
        let http = crate::http_client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            // A redirected POST turns into a GET; a moved server should be reconfigured instead.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| WandbError::Config { detail: error_chain(&e.without_url()) })?;
        Ok(GraphQl { base, key, http, timeout })
    }

    pub(super) fn base(&self) -> &str {
        &self.base
    }

    #[cfg(test)]
    pub(super) fn key(&self) -> &str {
        &self.key
    }

    /// One GraphQL request; the `data` of a clean answer.
    pub(super) async fn request(&self, op: &str, query: &str, variables: Value) -> Result<Value, WandbError> {
        let started = Instant::now();
        let response = self
            .http
            .post(format!("{}/graphql", self.base))
            .basic_auth("api", Some(&self.key))
            .json(&json!({ "query": query, "variables": variables }))
            .send()
            .await
            .map_err(|e| self.transport_error(e))?;
        let status = response.status();
        tracing::debug!(
            op,
            status = status.as_u16(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "W&B answered"
        );
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(WandbError::Unauthorized { code: status.as_u16() });
        }
        let body = self.read_body(response).await?;
        let parsed = crate::pyjson::from_str::<Value>(&body);
        if !status.is_success() {
            // GraphQL servers answer a query they reject with 400/422 and an `errors` list, which
            // says far more than the status.
            return Err(match parsed.as_ref().ok().and_then(|v| self.error_messages(v)) {
                Some(messages) => WandbError::GraphQl { messages },
                None => WandbError::Status { code: status.as_u16() },
            });
        }
        let mut answer = parsed.map_err(|e| WandbError::Decode { detail: self.redact(&e.to_string()) })?;
        if let Some(messages) = self.error_messages(&answer) {
            // Partial data next to errors is not trusted: a missing field would read as "no run".
            return Err(WandbError::GraphQl { messages });
        }
        match answer.get_mut("data").map(Value::take) {
            Some(data @ Value::Object(_)) => Ok(data),
            _ => Err(decode("the answer has no data")),
        }
    }

    async fn read_body(&self, mut response: reqwest::Response) -> Result<String, WandbError> {
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport_error(e))? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(decode(&format!("the answer is larger than {} MiB", MAX_BODY >> 20)));
            }
            body.extend_from_slice(&chunk);
        }
        String::from_utf8(body).map_err(|_| decode("the answer is not UTF-8"))
    }

    /// The messages of a GraphQL `errors` list, if the answer has a non-empty one.
    fn error_messages(&self, answer: &Value) -> Option<Vec<String>> {
        let errors = answer.get("errors")?.as_array().filter(|e| !e.is_empty())?;
        let mut messages: Vec<String> = errors
            .iter()
            .take(MAX_MESSAGES)
            .map(|e| match e.get("message").and_then(Value::as_str) {
                Some(message) => self.redact(message),
                None => self.redact(&e.to_string()),
            })
            .collect();
        if errors.len() > MAX_MESSAGES {
            messages.push(format!("and {} more", errors.len() - MAX_MESSAGES));
        }
        Some(messages)
    }

    fn transport_error(&self, error: reqwest::Error) -> WandbError {
        if error.is_timeout() {
            WandbError::Timeout { after: self.timeout }
        } else {
            // Connection refused, DNS, TLS, a reset mid-answer: all mean W&B can't be read now.
            WandbError::Unreachable { detail: self.redact(&error_chain(&error.without_url())) }
        }
    }

    /// `text` with the API key masked, for anything that came from the server or the network
    /// stack (a server may echo what it was sent).
    fn redact(&self, text: &str) -> String {
        crate::secrets::redact_text(text, &self.key)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use serde_json::json;
    use tokio::net::TcpListener;

    use super::super::fake_server::{Fake, KEY, Reply, assert_no_key, runs, within};
    use crate::wandb::{WandbClient, WandbError};

    #[tokio::test]
    async fn a_wrong_key_is_unauthorized() {
        let fake = Fake::start(|_| runs(vec![])).await;
        let wrong = format!("{KEY}-wrong");
        let error = within(fake.client(&wrong, Some("team")).find_run("p", "x")).await.expect_err("401");
        assert!(matches!(error, WandbError::Unauthorized { code: 401 }), "{error:?}");
        assert_eq!(error.to_string(), "W&B rejected the API key (HTTP 401); check WANDB_API_KEY");
        assert!(!error.is_transient());
        assert!(!error.to_string().contains(&wrong) && !format!("{error:?}").contains(&wrong));
    }

    #[tokio::test]
    async fn forbidden_is_unauthorized_too() {
        let fake =
            Fake::start(|_| Reply::Json(403, r#"{"errors":[{"message":"permission denied"}]}"#.into())).await;
        let error = within(fake.client(KEY, Some("team")).find_run("p", "x")).await.expect_err("403");
        assert!(matches!(error, WandbError::Unauthorized { code: 403 }), "{error:?}");
        assert_no_key(&error);
    }

    #[tokio::test]
    async fn a_server_that_never_answers_times_out() {
        let fake = Fake::start(|_| Reply::Silent).await;
        let client = WandbClient::new(&fake.base, Some("team".into()), KEY, Duration::from_millis(300))
            .expect("client");
        let started = Instant::now();
        let error = within(client.find_run("p", "x")).await.expect_err("timeout");
        assert!(
            matches!(error, WandbError::Timeout { after } if after == Duration::from_millis(300)),
            "{error:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(error.is_transient());
        assert_eq!(error.to_string(), "W&B did not answer within 300ms");
        assert_no_key(&error);
        assert_eq!(fake.bodies().len(), 1, "the request did reach the server");
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        drop(listener);
        let client =
            WandbClient::new(&base, Some("team".into()), KEY, Duration::from_secs(5)).expect("client");
        let error = within(client.find_run("p", "x")).await.expect_err("unreachable");
        assert!(matches!(error, WandbError::Unreachable { .. }), "{error:?}");
        assert!(error.is_transient());
        assert_no_key(&error);
    }

    #[tokio::test]
    async fn graphql_errors_are_reported_with_the_key_masked() {
        let fake = Fake::start(|_| {
            let message = format!("cannot query field \"bogus\"; your key {KEY} is fine");
            Reply::Json(
                200,
                json!({ "errors": [{ "message": message }, { "message": "second" }], "data": null })
                    .to_string(),
            )
        })
        .await;
        let error = within(fake.client(KEY, Some("team")).find_run("p", "x")).await.expect_err("errors");
        let WandbError::GraphQl { messages } = &error else { panic!("{error:?}") };
        assert_eq!(messages.len(), 2);
        assert!(messages[0].contains("cannot query field") && messages[0].contains("***"), "{messages:?}");
        assert_no_key(&error);
    }

    #[tokio::test]
    async fn an_error_status_with_graphql_errors_reports_them() {
        let fake = Fake::start(|_| {
            Reply::Json(400, r#"{"errors":[{"message":"Syntax Error: Unexpected Name"}]}"#.into())
        })
        .await;
        let error = within(fake.client(KEY, Some("team")).find_run("p", "x")).await.expect_err("400");
        assert!(
            matches!(&error, WandbError::GraphQl { messages } if messages[0].starts_with("Syntax Error")),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn a_bare_error_status_is_a_status_error() {
        let fake = Fake::start(|_| Reply::Json(502, "<html>bad gateway</html>".into())).await;
        let error = within(fake.client(KEY, Some("team")).find_run("p", "x")).await.expect_err("502");
        assert!(matches!(error, WandbError::Status { code: 502 }), "{error:?}");
        assert!(error.is_transient());
        assert_eq!(error.to_string(), "W&B answered HTTP 502");
    }
}
