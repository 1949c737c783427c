//! The fuzz tier over HTTP: every route's body, path and query, and the dashboard's pages by
//! id, driven in-process; and the corpus of HTTP refusals that once slipped through.

use super::*;

/// A router over a scratch home's service, driven in-process (no daemon, no socket).
pub(super) struct InProcess {
    runtime: tokio::runtime::Runtime,
    app: axum::Router,
    _home: TestHome,
}

impl InProcess {
    pub(super) fn new() -> InProcess {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut home = TestHome::new();
        let service = runtime.block_on(home.service());
        let app = lachesis::api::app(service, Default::default(), None);
        InProcess { runtime, app, _home: home }
    }

    /// The answer's status and body; panics (fails the test) if the handler panicked.
    pub(super) fn call(&self, method: &str, uri: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        self.runtime.block_on(async {
            let response = self.app.clone().oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
            (status, bytes.to_vec())
        })
    }
}

/// Refusals are JSON `{error: CODE, message: ONE LINE}`.
pub(super) fn check_answer(method: &str, uri: &str, status: StatusCode, body: &[u8]) {
    assert!(
        status != StatusCode::INTERNAL_SERVER_ERROR,
        "{method} {uri}: 500 {}",
        String::from_utf8_lossy(body)
    );
    if status.is_client_error() {
        let answer: Value = serde_json::from_slice(body).unwrap_or_else(|_| {
            panic!("{method} {uri}: {status} is not JSON: {:?}", String::from_utf8_lossy(body))
        });
        assert!(answer["error"].is_string(), "{method} {uri}: {answer}");
        one_line(answer["message"].as_str().unwrap_or_default());
    }
}

/// Any JSON, a few levels deep.
pub(super) fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|n| json!(n)),
        "\\PC{0,12}".prop_map(Value::String),
        prop::sample::select(HOSTILE).prop_map(|s| Value::String(s.trim_matches('"').to_string())),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A route's example body with its values replaced, and sometimes an unknown field added.
pub(super) fn mutated(example: Option<&str>, values: Vec<Value>, extra: Option<(String, Value)>) -> Value {
    let mut body: serde_json::Map<String, Value> =
        example.and_then(|e| serde_json::from_str(e).ok()).unwrap_or_default();
    for (slot, value) in body.values_mut().zip(values) {
        *slot = value;
    }
    if let Some((key, value)) = extra {
        body.insert(key, value);
    }
    Value::Object(body)
}

pub(super) fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[test]
fn fuzz_every_http_route_body_path_and_query() {
    let api = InProcess::new();
    let routes = lachesis::api::ROUTES;
    let body = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64).prop_map(|b| (b, None)),
        any_json().prop_map(|v| (v.to_string().into_bytes(), None)),
        (prop::collection::vec(any_json(), 0..6), prop::option::of(("[a-z_]{1,12}", any_json())),)
            .prop_map(|(values, extra)| (Vec::new(), Some((values, extra)))),
    ];
    let segment =
        prop_oneof!["\\PC{0,12}", Just(String::new()), Just("..".to_string()), Just("00000000".to_string())];
    let query = prop::option::of((
        prop::sample::select(&["limit", "state", "stage", "tail", "offset", "since", "x"][..]),
        "\\PC{0,8}",
    ));
    let seen = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let mut runner = fuzz_runner(384);
    runner
        .run(&(0..routes.len(), segment, query, body), |(idx, segment, query, (bytes, shaped))| {
            let route = &routes[idx];
            if route.path == "/metrics" {
                return Ok(()); // text, and no input
            }
            let mut path = String::new();
            for part in route.path.split_inclusive('/') {
                if part.starts_with('{') {
                    path.push_str(&percent_encode(&segment));
                    path.push_str(if part.ends_with('/') { "/" } else { "" });
                } else {
                    path.push_str(part);
                }
            }
            if let Some((key, value)) = &query {
                path = format!("{path}?{key}={}", percent_encode(value));
            }
            let bytes = match shaped {
                Some((values, extra)) => mutated(route.body, values, extra).to_string().into_bytes(),
                None => bytes,
            };
            let (status, answer) = api.call(&route.method.to_uppercase(), &path, bytes);
            check_answer(route.method, &path, status, &answer);
            seen.borrow_mut().insert(status.as_u16());
            Ok(())
        })
        .unwrap();
    // The inputs reach the handlers: some are served, some refused as bad requests.
    let seen = seen.into_inner();
    assert!(seen.contains(&200) && seen.contains(&400) && seen.contains(&404), "{seen:?}");
}

/// The dashboard's pages named by a path segment or a query (a sweep, a run, the report's
/// window): never a 500 or a panic, and what they echo of the input is escaped.
#[test]
fn fuzz_dashboard_pages_by_id_never_fail_and_escape_what_they_echo() {
    let api = InProcess::new();
    let sweep = json!({ "method": "grid", "workflow": "demo-tune", "metric": {"name": "reward"},
        "parameters": {"lr": {"values": [0.1, 0.01]}} });
    let (status, created) = api.call("POST", "/sweeps", sweep.to_string().into_bytes());
    assert_eq!(status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&created));
    let id = serde_json::from_slice::<Value>(&created).unwrap()["id"].as_str().unwrap().to_string();
    let segment = prop_oneof![
        "\\PC{0,16}",
        Just("<script>x</script>".to_string()),
        Just(id[..8].to_string()),
        Just(id.clone()),
        Just(format!("{}<b>", &id[..4])),
        Just("%".to_string()),
    ];
    let page = prop::sample::select(&["/ui/sweeps/", "/ui/runs/", "/ui/report?since=", "/ui/tests?id="][..]);
    let mut runner = fuzz_runner(256);
    runner
        .run(&(page, segment), |(page, segment)| {
            let uri = format!("{page}{}", percent_encode(&segment));
            let (status, body) = api.call("GET", &uri, Vec::new());
            let html = String::from_utf8_lossy(&body);
            prop_assert!(status != StatusCode::INTERNAL_SERVER_ERROR, "{uri}: {html}");
            // `/ui/sweeps/` names no page: the API's JSON 404, as for any route it lacks.
            let names_a_page = !segment.is_empty() || page.contains('?');
            prop_assert!(!names_a_page || html.starts_with("<!doctype html>"), "{uri}: {status} {html}");
            if segment.contains('<') {
                prop_assert!(!html.contains(&segment), "{uri}: echoed unescaped");
            }
            Ok(())
        })
        .unwrap();
    let (status, body) = api.call("GET", &format!("/ui/sweeps/{}", &id[..8]), Vec::new());
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
}

#[test]
fn corpus_http_refusals_are_json_naming_the_field() {
    let api = InProcess::new();
    let cases: &[(&str, &str, &str, StatusCode, &str)] = &[
        ("GET", "/runs?limit=abc", "", StatusCode::BAD_REQUEST, "invalid_query"),
        ("GET", "/tests?limit=1e999", "", StatusCode::BAD_REQUEST, "invalid_query"),
        ("GET", "/report?since=1e999", "", StatusCode::BAD_REQUEST, "invalid_query"),
        ("GET", "/report?since=99999999999999999999999h", "", StatusCode::BAD_REQUEST, "invalid_query"),
        ("GET", "/report?since=%00%0A", "", StatusCode::BAD_REQUEST, "invalid_query"),
        (
            "POST",
            "/schedules",
            r#"{"name": "n", "cron": "0 3 * * *", "bogus": 1}"#,
            StatusCode::BAD_REQUEST,
            "invalid_body",
        ),
        ("POST", "/schedules", r#"{"name": "", "cron": "0 3 * * *"}"#, StatusCode::BAD_REQUEST, "invalid"),
        ("POST", "/schedules", r#"{"name": "a/b", "cron": "0 3 * * *"}"#, StatusCode::BAD_REQUEST, "invalid"),
        ("POST", "/tests", r#"{"timeout": 1e300}"#, StatusCode::BAD_REQUEST, "invalid_body"),
        (
            "POST",
            "/tests",
            r#"{"timeout": "99999999999999999999999h"}"#,
            StatusCode::BAD_REQUEST,
            "invalid_body",
        ),
    ];
    for (method, uri, body, want_status, want_code) in cases {
        let (status, answer) = api.call(method, uri, body.as_bytes().to_vec());
        let answer: Value = serde_json::from_slice(&answer)
            .unwrap_or_else(|_| panic!("{method} {uri}: not JSON: {}", String::from_utf8_lossy(&answer)));
        assert_eq!(
            (status, answer["error"].as_str().unwrap_or_default()),
            (*want_status, *want_code),
            "{method} {uri} {body}: {answer}"
        );
        one_line(answer["message"].as_str().unwrap_or_default());
    }
    let (_, answer) = api.call("POST", "/schedules", br#"{"name": "a/b", "cron": "0 3 * * *"}"#.to_vec());
    assert!(String::from_utf8_lossy(&answer).contains("name: 'a/b'"), "{}", String::from_utf8_lossy(&answer));
}

#[test]
fn corpus_path_segments_that_are_not_text_get_json_refusals() {
    let api = InProcess::new();
    for uri in ["/runs/%FF", "/schedules/%C3%28/pause", "/environments/%80"] {
        let method = if uri.ends_with("pause") { "POST" } else { "GET" };
        let (status, answer) = api.call(method, uri, Vec::new());
        check_answer(method, uri, status, &answer);
    }
}
