//! A GraphQL server on 127.0.0.1 standing in for W&B in the client's tests, and what they share.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{WandbClient, WandbError};

pub(super) const KEY: &str = "sekrit-key-0123456789abcdef0123456789abcdef";
/// Every test finishes well inside this, or fails instead of hanging.
const DEADLINE: Duration = Duration::from_secs(10);

pub(super) async fn within<T>(fut: impl Future<Output = T>) -> T {
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

pub(super) enum Reply {
    Json(u16, String),
    /// Read the request, then keep the connection open without a word.
    Silent,
}

/// A GraphQL server on 127.0.0.1 that checks basic auth against `KEY` (401 otherwise) and
/// answers with `handler(request body)`.
pub(super) struct Fake {
    pub(super) base: String,
    bodies: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fake {
    pub(super) async fn start(handler: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Fake {
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

    pub(super) fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().expect("lock").clone()
    }

    pub(super) fn client(&self, key: &str, entity: Option<&str>) -> WandbClient {
        WandbClient::new(&self.base, entity.map(str::to_string), key, Duration::from_secs(5)).expect("client")
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

pub(super) fn ok(data: Value) -> Reply {
    Reply::Json(200, json!({ "data": data }).to_string())
}

/// A run node as W&B sends it: summaryMetrics is JSON text inside the JSON.
pub(super) fn node(id: &str, display_name: &str, summary: &str) -> Value {
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

pub(super) fn runs(nodes: Vec<Value>) -> Reply {
    let edges: Vec<Value> = nodes.into_iter().map(|n| json!({ "node": n })).collect();
    ok(json!({ "project": { "runs": { "edges": edges } } }))
}

pub(super) fn assert_no_key(error: &WandbError) {
    let (shown, debug) = (error.to_string(), format!("{error:?}"));
    assert!(!shown.contains(KEY) && !debug.contains(KEY), "key leaked: {shown} / {debug}");
}
