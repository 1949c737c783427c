//! A small Weights & Biases client: finds a training run by its display name and reads its
//! summary and sampled history over W&B's GraphQL API (`snapshot.rs` turns what it reads into
//! the numbers lachesis stores).
//!
//! W&B hands several fields back as JSON encoded inside a JSON string (`summaryMetrics`, history
//! rows on some servers), and Python-side writers may leave `NaN`/`Infinity` in them; both are
//! decoded here, the non-finite numbers as null. The API key is sent only as HTTP basic auth
//! (`api:KEY`) and is kept out of every error, log line and `Debug` output.

use crate::http_client::error_chain;
use std::fmt;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::snapshot::{history_keys_of, history_readings, whole};
use crate::model::MetricReading;

/// Where the hosted W&B API lives.
pub const DEFAULT_BASE: &str = "https://api.wandb.ai";

/// A W&B answer larger than this is refused rather than buffered; a sampled history of a few
/// hundred rows is well under a megabyte.
const MAX_BODY: usize = 32 << 20;

/// Runs fetched per display-name lookup. Display names are not unique in W&B (a run relaunched
/// under the same name makes a second run), so a few are fetched and the newest is taken.
const RUNS_PER_LOOKUP: u32 = 10;

/// Messages of W&B's own GraphQL errors kept in an error, so a server that answers with hundreds
/// of them does not make an unreadable error.
const MAX_MESSAGES: usize = 5;

const FIND_RUN: &str = "query LachesisFindRun($project: String!, $entity: String!, $filters: JSONString!, \
$first: Int!, $order: String) { project(name: $project, entityName: $entity) { runs(filters: $filters, \
first: $first, order: $order) { edges { node { name displayName state summaryMetrics historyKeys } } } } }";

const HISTORY: &str = "query LachesisHistory($project: String!, $entity: String!, $name: String!, \
$specs: [JSONString!]!) { project(name: $project, entityName: $entity) { run(name: $name) { \
sampledHistory(specs: $specs) } } }";

const VIEWER: &str = "query LachesisViewer { viewer { entity } }";

#[derive(Debug, thiserror::Error)]
pub enum WandbError {
    #[error("invalid W&B client settings: {detail}")]
    Config { detail: String },
    #[error("W&B rejected the API key (HTTP {code}); check WANDB_API_KEY")]
    Unauthorized { code: u16 },
    #[error("W&B did not answer within {after:?}")]
    Timeout { after: Duration },
    #[error("cannot reach W&B: {detail}")]
    Unreachable { detail: String },
    #[error("W&B answered with GraphQL errors: {}", messages.join("; "))]
    GraphQl { messages: Vec<String> },
    #[error("cannot decode W&B's answer: {detail}")]
    Decode { detail: String },
    #[error("W&B answered HTTP {code}")]
    Status { code: u16 },
    #[error("W&B names no default entity for this API key; set WANDB_ENTITY")]
    NoEntity,
    #[error("W&B has no run {run} in project {project}")]
    NoRun { project: String, run: String },
}

impl WandbError {
    /// Whether asking again later could give a different answer (the caller then falls back to
    /// the stored snapshot and retries on its next poll rather than reporting a broken setup).
    pub fn is_transient(&self) -> bool {
        match self {
            WandbError::Timeout { .. } | WandbError::Unreachable { .. } => true,
            WandbError::Status { code } => *code >= 500 || *code == 429 || *code == 408,
            _ => false,
        }
    }
}

/// A W&B run found by display name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRef {
    /// W&B's run id (`node.name`), the one `history` takes and the run URL ends with.
    pub id: String,
    pub display_name: String,
    /// `running`, `finished`, `crashed`, `failed`, `killed`, … as W&B reports it.
    pub state: Option<String>,
    /// `summaryMetrics`, decoded: the last value logged under each key.
    pub summary: Map<String, Value>,
    /// The metric names the run has history for (`historyKeys.keys`), sorted.
    #[serde(default)]
    pub history_keys: Vec<String>,
    /// `historyKeys.lastStep`.
    #[serde(default)]
    pub last_step: Option<i64>,
    /// The run's page in the W&B web UI.
    #[serde(default)]
    pub url: Option<String>,
}

#[cfg(test)]
impl RunRef {
    /// A finished run `r1` whose summary is `summary`.
    pub(crate) fn finished_with(summary: Value) -> RunRef {
        RunRef {
            id: "r1".into(),
            display_name: "x".into(),
            state: Some("finished".into()),
            summary: summary.as_object().cloned().unwrap_or_default(),
            history_keys: vec![],
            last_step: None,
            url: Some("https://wandb.ai/team/p/runs/r1".into()),
        }
    }
}

/// Talks to one W&B server with one API key.
#[derive(Clone)]
pub struct WandbClient {
    base: String,
    entity: Option<String>,
    key: String,
    http: reqwest::Client,
    timeout: Duration,
    /// The key's default entity, asked once when `WANDB_ENTITY` is not set.
    default_entity: tokio::sync::OnceCell<String>,
}

impl fmt::Debug for WandbClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // By hand so the key can never be printed.
        f.debug_struct("WandbClient")
            .field("base", &self.base)
            .field("entity", &self.entity)
            .field("key", &"***")
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl WandbClient {
    /// `base` is the server root (`https://api.wandb.ai`); `timeout` bounds each request, connect
    /// to last byte.
    pub fn new(base: &str, entity: Option<String>, key: &str, timeout: Duration) -> Result<Self, WandbError> {
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
        let entity = entity.map(|e| e.trim().to_string()).filter(|e| !e.is_empty());
        Ok(WandbClient { base, entity, key, http, timeout, default_entity: tokio::sync::OnceCell::new() })
    }

    /// A client from `WANDB_API_KEY`, `WANDB_BASE_URL` and `WANDB_ENTITY`; `None` when no key is
    /// set (W&B is optional).
    pub fn from_env(timeout: Duration) -> Result<Option<Self>, WandbError> {
        Self::from_lookup(crate::environ::var, timeout)
    }

    fn from_lookup(
        var: impl Fn(&str) -> Option<String>,
        timeout: Duration,
    ) -> Result<Option<Self>, WandbError> {
        // An empty variable is how shells and compose files unset things.
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let Some(key) = set("WANDB_API_KEY") else {
            return Ok(None);
        };
        let base = set("WANDB_BASE_URL").unwrap_or_else(|| DEFAULT_BASE.to_string());
        Self::new(&base, set("WANDB_ENTITY"), &key, timeout).map(Some)
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The newest run of `project` whose display name is `display_name`, or `None` when the
    /// project has no such run (or no such project exists).
    pub async fn find_run(&self, project: &str, display_name: &str) -> Result<Option<RunRef>, WandbError> {
        let entity = self.entity().await?;
        let variables = json!({
            "project": project,
            "entity": entity,
            // JSONString arguments are JSON text inside the JSON body.
            "filters": json!({ "display_name": display_name }).to_string(),
            "first": RUNS_PER_LOOKUP,
            "order": "-created_at",
        });
        let data = self.graphql("find_run", FIND_RUN, variables).await?;
        let Some(project_node) = data.get("project").filter(|p| !p.is_null()) else {
            tracing::debug!(project, entity = %entity, "W&B project not found");
            return Ok(None);
        };
        let edges = project_node
            .get("runs")
            .and_then(|runs| runs.get("edges"))
            .and_then(Value::as_array)
            .ok_or_else(|| decode("project.runs.edges is missing"))?;
        // The server filters already; checking again guards against a server whose filter is
        // looser (a prefix or pattern match would hand back someone else's run).
        let mut matching = edges
            .iter()
            .filter_map(|edge| edge.get("node"))
            .filter(|node| node.get("displayName").and_then(Value::as_str) == Some(display_name));
        let Some(node) = matching.next() else {
            return Ok(None);
        };
        let others = matching.count();
        if others > 0 {
            tracing::debug!(
                project,
                display_name,
                others,
                "several W&B runs share a display name; taking the newest"
            );
        }
        let mut run = self.run_from_node(node, display_name)?;
        run.url = run_url(&self.base, &entity, project, &run.id);
        Ok(Some(run))
    }

    fn run_from_node(&self, node: &Value, display_name: &str) -> Result<RunRef, WandbError> {
        let id = node
            .get("name")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| decode("run node has no name"))?
            .to_string();
        let state = node.get("state").and_then(Value::as_str).map(str::to_string);
        let summary = match embedded_json(node.get("summaryMetrics"), "summaryMetrics")? {
            Some(Value::Object(map)) => map,
            None => Map::new(),
            Some(_) => return Err(decode("summaryMetrics is not an object")),
        };
        // historyKeys is informative only: a shape this client does not know leaves it empty
        // rather than losing the summary.
        let keys = embedded_json(node.get("historyKeys"), "historyKeys").ok().flatten();
        let mut history_keys: Vec<String> = keys
            .as_ref()
            .and_then(|k| k.get("keys"))
            .and_then(Value::as_object)
            .map(|k| k.keys().cloned().collect())
            .unwrap_or_default();
        history_keys.sort();
        let last_step = keys.as_ref().and_then(|k| k.get("lastStep")).and_then(whole);
        Ok(RunRef {
            id,
            display_name: display_name.to_string(),
            state,
            summary,
            history_keys,
            last_step,
            url: None,
        })
    }

    /// Up to `samples` rows of `keys` (plus `_step`, always) from run `run_id`'s history, as W&B
    /// samples them, oldest first. Each row holds the keys that were logged at that step.
    pub async fn history(
        &self,
        project: &str,
        run_id: &str,
        keys: &[&str],
        samples: u32,
    ) -> Result<Vec<Map<String, Value>>, WandbError> {
        let entity = self.entity().await?;
        // Rows are useless for a curve without their step.
        let mut wanted: Vec<&str> = Vec::with_capacity(keys.len() + 1);
        if !keys.contains(&"_step") {
            wanted.push("_step");
        }
        wanted.extend_from_slice(keys);
        let spec = json!({ "keys": wanted, "samples": samples.max(1) }).to_string();
        let variables = json!({ "project": project, "entity": entity, "name": run_id, "specs": [spec] });
        let data = self.graphql("history", HISTORY, variables).await?;
        let no_run = || WandbError::NoRun { project: project.to_string(), run: run_id.to_string() };
        let run = data
            .get("project")
            .filter(|p| !p.is_null())
            .ok_or_else(no_run)?
            .get("run")
            .filter(|r| !r.is_null())
            .ok_or_else(no_run)?;
        let sampled = match embedded_json(run.get("sampledHistory"), "sampledHistory")? {
            Some(Value::Array(per_spec)) => per_spec,
            None => return Ok(Vec::new()),
            Some(_) => return Err(decode("sampledHistory is not a list")),
        };
        // One list of rows per spec; a server that flattens the single spec's list is read too.
        let rows = match sampled.first() {
            None => return Ok(Vec::new()),
            Some(Value::Array(_)) => match sampled.into_iter().next() {
                Some(Value::Array(rows)) => rows,
                _ => Vec::new(),
            },
            Some(_) => sampled,
        };
        let total = rows.len();
        let rows: Vec<Map<String, Value>> = rows
            .into_iter()
            .filter_map(|row| match row {
                Value::Object(map) => Some(map),
                Value::String(text) => match crate::pyjson::from_str::<Value>(&text) {
                    Ok(Value::Object(map)) => Some(map),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        if rows.len() < total {
            // One odd row should not cost the whole curve.
            tracing::debug!(
                run = run_id,
                skipped = total - rows.len(),
                "skipped W&B history rows that are not objects"
            );
        }
        Ok(rows)
    }

    /// The metric history of `run` (found with `find_run`) by name, up to `samples` sampled rows
    /// per key: the keys results and the report show (`HISTORY_KEYS`), the `named` ones (a
    /// sweep's metric, whatever its key; at most `MAX_NAMED_KEYS`), then up to `MAX_OTHER_KEYS`
    /// more of the keys W&B says the run logs (not its `_` keys), each reading under its W&B key. Keys are
    /// asked for one at a time: W&B samples only rows holding every key asked for, and eval
    /// metrics are logged at other steps than training ones. Only keys the run has history for
    /// are asked for, when W&B says which those are. NaN and infinities are dropped.
    pub async fn metric_readings(
        &self,
        project: &str,
        run: &RunRef,
        named: &[&str],
        samples: u32,
    ) -> Result<Vec<MetricReading>, WandbError> {
        let mut readings = Vec::new();
        for key in history_keys_of(run, named) {
            let rows = self.history(project, &run.id, &[key], samples).await?;
            readings.extend(history_readings(&rows, key));
        }
        Ok(readings)
    }

    /// The entity runs are looked up under: `WANDB_ENTITY`, else the key's default entity.
    async fn entity(&self) -> Result<String, WandbError> {
        if let Some(entity) = &self.entity {
            return Ok(entity.clone());
        }
        let entity = self
            .default_entity
            .get_or_try_init(|| async {
                let data = self.graphql("viewer", VIEWER, json!({})).await?;
                data.get("viewer")
                    .and_then(|v| v.get("entity"))
                    .and_then(Value::as_str)
                    .filter(|e| !e.is_empty())
                    .map(str::to_string)
                    .ok_or(WandbError::NoEntity)
            })
            .await?;
        Ok(entity.clone())
    }

    /// One GraphQL request; the `data` of a clean answer.
    async fn graphql(&self, op: &str, query: &str, variables: Value) -> Result<Value, WandbError> {
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

fn decode(detail: &str) -> WandbError {
    WandbError::Decode { detail: detail.to_string() }
}

/// A field W&B sends as JSON text inside the JSON (`JSONString`), decoded; some servers send the
/// object itself, which is taken as it is. `None` for a missing or null field.
fn embedded_json(field: Option<&Value>, name: &str) -> Result<Option<Value>, WandbError> {
    match field {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.trim().is_empty() => Ok(None),
        Some(Value::String(text)) => crate::pyjson::from_str::<Value>(text)
            .map(|v| Some(v).filter(|v| !v.is_null()))
            .map_err(|e| WandbError::Decode { detail: format!("{name}: {e}") }),
        Some(other) => Ok(Some(other.clone())),
    }
}

/// The run's page: the hosted API at `api.wandb.ai` has its UI at `wandb.ai`; a self-hosted server
/// serves both from one address.
pub fn run_url(base: &str, entity: &str, project: &str, id: &str) -> Option<String> {
    let mut url = reqwest::Url::parse(base).ok()?;
    if url.host_str() == Some("api.wandb.ai") {
        url.set_host(Some("wandb.ai")).ok()?;
    }
    url.set_query(None);
    url.set_fragment(None);
    // A base with `user:pass@` must not leak into a URL shown to people.
    url.set_username("").ok()?;
    url.set_password(None).ok()?;
    url.path_segments_mut().ok()?.pop_if_empty().extend([entity, project, "runs", id]);
    Some(url.to_string())
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::{Arc, Mutex};

    use super::super::snapshot::HISTORY_KEYS;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    const KEY: &str = "sekrit-key-0123456789abcdef0123456789abcdef";
    /// Every test finishes well inside this, or fails instead of hanging.
    const DEADLINE: Duration = Duration::from_secs(10);

    async fn within<T>(fut: impl Future<Output = T>) -> T {
        match tokio::time::timeout(DEADLINE, fut).await {
            Ok(value) => value,
            Err(_) => panic!("test did not finish within {DEADLINE:?}"),
        }
    }

    fn base64(input: &[u8]) -> String {
        const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in input.chunks(3) {
            let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    #[test]
    fn base64_matches_known_values() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"api:abc"), "YXBpOmFiYw==");
    }

    enum Reply {
        Json(u16, String),
        /// Read the request, then keep the connection open without a word.
        Silent,
    }

    /// A GraphQL server on 127.0.0.1 that checks basic auth against `KEY` (401 otherwise) and
    /// answers with `handler(request body)`.
    struct Fake {
        base: String,
        bodies: Arc<Mutex<Vec<Value>>>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    impl Fake {
        async fn start(handler: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Fake {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let base = format!("http://{}", listener.local_addr().expect("addr"));
            let bodies = Arc::new(Mutex::new(Vec::new()));
            let handler = Arc::new(handler);
            let seen = bodies.clone();
            let task = tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (handler, seen) = (handler.clone(), seen.clone());
                    tokio::spawn(async move { serve(stream, &*handler, &seen).await });
                }
            });
            Fake { base, bodies, task }
        }

        fn bodies(&self) -> Vec<Value> {
            self.bodies.lock().expect("lock").clone()
        }

        fn client(&self, key: &str, entity: Option<&str>) -> WandbClient {
            WandbClient::new(&self.base, entity.map(str::to_string), key, Duration::from_secs(5))
                .expect("client")
        }
    }

    async fn serve(
        mut stream: TcpStream,
        handler: &(dyn Fn(&Value) -> Reply + Send + Sync),
        seen: &Mutex<Vec<Value>>,
    ) {
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        let head_end = loop {
            if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
            }
        };
        let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
        let header = |name: &str| {
            head.lines().find_map(|line| {
                let (n, v) = line.split_once(':')?;
                n.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
        };
        let length: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        while raw.len() < head_end + length {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
            }
        }
        let body: Value = serde_json::from_slice(&raw[head_end..head_end + length]).unwrap_or(Value::Null);
        seen.lock().expect("lock").push(body.clone());
        let expected = format!("Basic {}", base64(format!("api:{KEY}").as_bytes()));
        let reply = if !head.starts_with("POST /graphql ") {
            Reply::Json(404, "{}".into())
        } else if header("authorization").as_deref() != Some(expected.as_str()) {
            Reply::Json(401, r#"{"errors":[{"message":"user is not logged in"}]}"#.into())
        } else {
            handler(&body)
        };
        match reply {
            Reply::Json(code, text) => {
                let head = format!(
                    "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
                    text.len()
                );
                let response = format!("{head}Connection: close\r\n\r\n{text}");
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
            Reply::Silent => std::future::pending::<()>().await,
        }
    }

    fn ok(data: Value) -> Reply {
        Reply::Json(200, json!({ "data": data }).to_string())
    }

    /// A run node as W&B sends it: summaryMetrics is JSON text inside the JSON.
    fn node(id: &str, display_name: &str, summary: &str) -> Value {
        json!({
            "name": id,
            "displayName": display_name,
            "state": "running",
            "summaryMetrics": summary,
            "historyKeys": {
                "lastStep": 120,
                "keys": { "train/loss": { "typeCounts": [{ "type": "number", "count": 121 }] },
                          "_step": { "typeCounts": [{ "type": "number", "count": 121 }] } }
            },
        })
    }

    fn runs(nodes: Vec<Value>) -> Reply {
        let edges: Vec<Value> = nodes.into_iter().map(|n| json!({ "node": n })).collect();
        ok(json!({ "project": { "runs": { "edges": edges } } }))
    }

    fn assert_no_key(error: &WandbError) {
        let (shown, debug) = (error.to_string(), format!("{error:?}"));
        assert!(!shown.contains(KEY) && !debug.contains(KEY), "key leaked: {shown} / {debug}");
    }

    #[tokio::test]
    async fn find_run_decodes_the_summary_from_a_json_string() {
        let summary = r#"{"_step": 120, "train/reward_mean": 0.42, "train/percent_correct": 0.61,
            "eval/percent_correct": 0.58, "train/loss": NaN, "_runtime": 301.5}"#;
        let fake = Fake::start(move |_| runs(vec![node("ab12cd34", "gsm8k-ab12cd34", summary)])).await;
        let client = fake.client(KEY, Some("team"));
        let run =
            within(client.find_run("atropos-tinker", "gsm8k-ab12cd34")).await.expect("find").expect("run");
        assert_eq!(run.id, "ab12cd34");
        assert_eq!(run.display_name, "gsm8k-ab12cd34");
        assert_eq!(run.state.as_deref(), Some("running"));
        assert_eq!(run.summary.get("_step"), Some(&json!(120)));
        assert_eq!(run.summary.get("train/reward_mean"), Some(&json!(0.42)));
        // NaN from Python's json.dumps is read as null, not a decode failure.
        assert_eq!(run.summary.get("train/loss"), Some(&Value::Null));
        assert_eq!(run.history_keys, vec!["_step".to_string(), "train/loss".to_string()]);
        assert_eq!(run.last_step, Some(120));
        assert_eq!(
            run.url.as_deref(),
            Some(format!("{}/team/atropos-tinker/runs/ab12cd34", fake.base).as_str())
        );

        let bodies = fake.bodies();
        assert_eq!(bodies.len(), 1);
        let vars = &bodies[0]["variables"];
        assert_eq!(vars["project"], "atropos-tinker");
        assert_eq!(vars["entity"], "team");
        let filters = vars["filters"].as_str().expect("filters is a JSON string");
        assert_eq!(
            serde_json::from_str::<Value>(filters).expect("filters JSON"),
            json!({"display_name": "gsm8k-ab12cd34"})
        );
        let query = bodies[0]["query"].as_str().expect("query");
        assert!(query.contains("summaryMetrics") && query.contains("entityName: $entity"), "{query}");
    }

    #[tokio::test]
    async fn find_run_takes_an_exact_display_name_and_the_first_of_several() {
        let fake = Fake::start(|_| {
            runs(vec![
                node("other", "gsm8k-ab12cd34-old", "{}"),
                node("newest", "gsm8k-ab12cd34", r#"{"_step": 3}"#),
                node("older", "gsm8k-ab12cd34", r#"{"_step": 1}"#),
            ])
        })
        .await;
        let run = within(fake.client(KEY, Some("team")).find_run("p", "gsm8k-ab12cd34")).await.expect("find");
        assert_eq!(run.map(|r| r.id).as_deref(), Some("newest"));
    }

    #[tokio::test]
    async fn find_run_is_none_without_edges_or_project() {
        let fake = Fake::start(|body| {
            if body["variables"]["project"] == "missing" {
                ok(json!({ "project": null }))
            } else {
                runs(vec![])
            }
        })
        .await;
        let client = fake.client(KEY, Some("team"));
        assert_eq!(within(client.find_run("p", "nope")).await.expect("find"), None);
        assert_eq!(within(client.find_run("missing", "nope")).await.expect("find"), None);
    }

    #[tokio::test]
    async fn summary_given_as_an_object_or_null_is_accepted() {
        let fake = Fake::start(|body| {
            let mut n = node("r1", "x", "");
            n["summaryMetrics"] =
                if body["variables"]["project"] == "obj" { json!({"_step": 7}) } else { Value::Null };
            runs(vec![n])
        })
        .await;
        let client = fake.client(KEY, Some("team"));
        let run = within(client.find_run("obj", "x")).await.expect("find").expect("run");
        assert_eq!(run.summary.get("_step"), Some(&json!(7)));
        let run = within(client.find_run("null", "x")).await.expect("find").expect("run");
        assert!(run.summary.is_empty());
    }

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

    #[tokio::test]
    async fn malformed_json_is_a_decode_error() {
        let fake = Fake::start(|body| match body["variables"]["project"].as_str() {
            Some("body") => Reply::Json(200, r#"{"data": {"project": "#.into()),
            Some("summary") => runs(vec![node("r1", "x", r#"{"_step": 1,"#)]),
            Some("nodata") => Reply::Json(200, "{}".into()),
            _ => ok(json!({ "project": { "runs": {} } })),
        })
        .await;
        let client = fake.client(KEY, Some("team"));
        for project in ["body", "summary", "nodata", "shape"] {
            let error = within(client.find_run(project, "x")).await.expect_err(project);
            assert!(matches!(error, WandbError::Decode { .. }), "{project}: {error:?}");
            assert!(error.to_string().starts_with("cannot decode W&B's answer: "), "{error}");
            assert_no_key(&error);
        }
    }

    #[tokio::test]
    async fn history_reads_the_sampled_rows() {
        let fake = Fake::start(|body| {
            let rows = match body["variables"]["name"].as_str() {
                // The shape W&B gives: one list of row objects per spec.
                Some("objects") => {
                    json!([[{"_step": 0, "train/loss": 1.5}, {"_step": 10, "train/loss": 1.25}]])
                }
                // Rows as JSON text, as some servers send them; junk rows are skipped.
                Some("strings") => {
                    json!([[r#"{"_step": 0, "train/loss": 1.5}"#, 7, r#"{"_step": 10, "train/loss": NaN}"#]])
                }
                Some("empty") => json!([[]]),
                _ => return ok(json!({ "project": { "run": null } })),
            };
            ok(json!({ "project": { "run": { "sampledHistory": rows } } }))
        })
        .await;
        let client = fake.client(KEY, Some("team"));
        let rows = within(client.history("p", "objects", &["train/loss"], 500)).await.expect("history");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].get("_step"), Some(&json!(10)));
        assert_eq!(rows[1].get("train/loss"), Some(&json!(1.25)));

        let rows =
            within(client.history("p", "strings", &["_step", "train/loss"], 500)).await.expect("history");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].get("train/loss"), Some(&json!(1.5)));
        assert_eq!(rows[1].get("train/loss"), Some(&Value::Null));

        assert!(within(client.history("p", "empty", &["train/loss"], 10)).await.expect("history").is_empty());
        let error = within(client.history("p", "gone", &["train/loss"], 10)).await.expect_err("no run");
        assert!(matches!(&error, WandbError::NoRun { run, .. } if run == "gone"), "{error:?}");

        // specs is a list of JSON strings, `_step` always asked for and never twice.
        let bodies = fake.bodies();
        for (body, keys) in
            bodies.iter().zip([json!(["_step", "train/loss"]), json!(["_step", "train/loss"])])
        {
            let specs = body["variables"]["specs"].as_array().expect("specs list");
            assert_eq!(specs.len(), 1);
            let spec: Value =
                serde_json::from_str(specs[0].as_str().expect("spec string")).expect("spec JSON");
            assert_eq!(spec, json!({ "keys": keys, "samples": 500 }));
        }
        assert!(bodies[0]["query"].as_str().is_some_and(|q| q.contains("sampledHistory(specs: $specs)")));
    }

    #[tokio::test]
    async fn metric_history_asks_key_by_key_for_the_keys_the_run_has() {
        let fake = Fake::start(|body| {
            let key = body["variables"]["specs"][0]
                .as_str()
                .and_then(|spec| serde_json::from_str::<Value>(spec).ok())
                .and_then(|spec| spec["keys"][1].as_str().map(str::to_string))
                .unwrap_or_default();
            let rows = json!([[{"_step": 1, key.clone(): 0.5}, {"_step": 3, key: 0.25}]]);
            ok(json!({ "project": { "run": { "sampledHistory": rows } } }))
        })
        .await;
        let client = fake.client(KEY, Some("team"));
        let mut run = RunRef::finished_with(json!({}));
        run.history_keys = vec!["_step".into(), "eval/percent_correct".into(), "train/loss".into()];
        let readings = within(client.metric_readings("p", &run, &[], 100)).await.expect("history");
        let got: Vec<(&str, i64, f64)> =
            readings.iter().map(|r| (r.name.as_str(), r.step, r.value)).collect();
        assert_eq!(
            got,
            vec![
                ("eval/percent_correct", 1, 0.5),
                ("eval/percent_correct", 3, 0.25),
                ("train/loss", 1, 0.5),
                ("train/loss", 3, 0.25)
            ]
        );
        assert_eq!(fake.bodies().len(), 2, "only the two keys the run logged");

        // W&B did not say which keys the run has: every metric key is asked for.
        run.history_keys.clear();
        within(client.metric_readings("p", &run, &[], 100)).await.expect("history");
        assert_eq!(fake.bodies().len(), 2 + HISTORY_KEYS.len());

        // Keys beyond the results' are read by name too, W&B's own left out.
        run.history_keys = vec!["_runtime".into(), "env/all/reward/total".into(), "train/loss".into()];
        let readings = within(client.metric_readings("p", &run, &[], 100)).await.expect("history");
        assert!(readings.iter().any(|r| r.name == "env/all/reward/total" && r.step == 3));
        assert_eq!(fake.bodies().len(), 2 + HISTORY_KEYS.len() + 2);

        // A named key (a sweep's metric) is asked for even when W&B does not say the run logs
        // keys at all.
        run.history_keys.clear();
        let readings = within(client.metric_readings("p", &run, &["my/score"], 100)).await.expect("history");
        assert!(readings.iter().any(|r| r.name == "my/score" && r.step == 1), "{readings:?}");
        assert_eq!(fake.bodies().len(), 2 + HISTORY_KEYS.len() + 2 + HISTORY_KEYS.len() + 1);
    }

    #[tokio::test]
    async fn without_an_entity_the_keys_default_entity_is_asked_once() {
        let fake = Fake::start(|body| {
            if body["query"].as_str().is_some_and(|q| q.contains("viewer")) {
                ok(json!({ "viewer": { "entity": "me" } }))
            } else {
                runs(vec![node("r1", "x", "{}")])
            }
        })
        .await;
        let client = fake.client(KEY, None);
        for _ in 0..2 {
            let run = within(client.find_run("p", "x")).await.expect("find").expect("run");
            assert!(run.url.is_some_and(|u| u.ends_with("/me/p/runs/r1")));
        }
        let bodies = fake.bodies();
        assert_eq!(bodies.len(), 3, "one viewer query, then two lookups");
        assert_eq!(bodies[2]["variables"]["entity"], "me");
    }

    #[tokio::test]
    async fn a_key_without_a_default_entity_says_so() {
        let fake = Fake::start(|_| ok(json!({ "viewer": null }))).await;
        let error = within(fake.client(KEY, None).find_run("p", "x")).await.expect_err("no entity");
        assert!(matches!(error, WandbError::NoEntity), "{error:?}");
    }

    #[test]
    fn from_env_needs_a_key_and_reads_base_and_entity() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        let timeout = Duration::from_secs(1);
        assert!(WandbClient::from_lookup(vars(&[]), timeout).expect("ok").is_none());
        assert!(WandbClient::from_lookup(vars(&[("WANDB_API_KEY", " ")]), timeout).expect("ok").is_none());

        let client =
            WandbClient::from_lookup(vars(&[("WANDB_API_KEY", "k1\n"), ("WANDB_ENTITY", "")]), timeout)
                .expect("ok")
                .expect("client");
        assert_eq!(
            (client.base(), client.entity.as_deref(), client.key.as_str()),
            (DEFAULT_BASE, None, "k1")
        );

        let client = WandbClient::from_lookup(
            vars(&[
                ("WANDB_API_KEY", "k1"),
                ("WANDB_BASE_URL", "http://wandb.local:8080/"),
                ("WANDB_ENTITY", "team"),
            ]),
            timeout,
        )
        .expect("ok")
        .expect("client");
        assert_eq!((client.base(), client.entity.as_deref()), ("http://wandb.local:8080", Some("team")));

        let error = WandbClient::from_lookup(
            vars(&[("WANDB_API_KEY", "k1"), ("WANDB_BASE_URL", "wandb.local")]),
            timeout,
        )
        .expect_err("bad base");
        assert!(matches!(error, WandbError::Config { .. }), "{error:?}");
    }

    #[test]
    fn the_key_never_shows_in_debug_output() {
        let client =
            WandbClient::new(DEFAULT_BASE, Some("team".into()), KEY, Duration::from_secs(1)).expect("client");
        let shown = format!("{client:?} {client:#?}");
        assert!(!shown.contains(KEY) && shown.contains("***"), "{shown}");
        let error =
            WandbClient::new(&format!("{KEY}://x"), None, KEY, Duration::from_secs(1)).expect_err("bad base");
        assert_no_key(&error);
        assert!(matches!(
            WandbClient::new(DEFAULT_BASE, None, " \n", Duration::from_secs(1)),
            Err(WandbError::Config { .. })
        ));
    }

    #[test]
    fn run_urls_point_at_the_web_ui() {
        assert_eq!(
            run_url(DEFAULT_BASE, "team", "p", "r1").as_deref(),
            Some("https://wandb.ai/team/p/runs/r1")
        );
        assert_eq!(
            run_url("http://u:pw@wandb.local:8080", "team", "my project", "r1").as_deref(),
            Some("http://wandb.local:8080/team/my%20project/runs/r1")
        );
    }
}
