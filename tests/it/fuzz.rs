//! The fuzz tier: property tests over everything that reads input (the workflow parser and
//! templating, durations, cron/tz, config values, every HTTP route's body, path and query).
//! The property is always "no panic, and errors are one line". Case counts are bounded so the
//! tier takes seconds; `PROPTEST_CASES` raises them for a longer hunt. `CORPUS` keeps the cases
//! that once panicked or slipped through, as plain regression tests.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use lachesis::cron::{Cron, tick};
use lachesis::environments::{FieldInfo, FieldKind, check_value};
use lachesis::workflow::{BUILTIN_VARS, Dur, MAX_DURATION, Workflow, template};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::TestHome;

fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(cases);
    Config { cases, failure_persistence: None, ..Config::default() }
}

/// A runner with `cases` cases (`PROPTEST_CASES` overrides). Its seed is fixed, so CI sees the
/// same cases every run; `LACHESIS_FUZZ_RANDOM=1` draws new ones (to hunt, not to gate).
fn fuzz_runner(cases: u32) -> TestRunner {
    let config = config(cases);
    if std::env::var_os("LACHESIS_FUZZ_RANDOM").is_some() {
        TestRunner::new(config)
    } else {
        let rng = proptest::test_runner::TestRng::deterministic_rng(config.rng_algorithm);
        TestRunner::new_with_rng(config, rng)
    }
}

fn one_line(err: &str) {
    assert!(!err.contains(['\n', '\r']), "a multi-line error: {err:?}");
}

/// Values that broke or fooled lachesis once, mixed with ordinary ones.
const HOSTILE: &[&str] = &[
    "1e300",
    "1e19",
    "\"99999999999999999999999h\"",
    "18446744073709551616",
    "-1",
    ".nan",
    ".inf",
    "0",
    "5s",
    "\"1.5s\"",
    "\"30 days\"",
    "\"/etc/passwd\"",
    "\"../../lachesis.db\"",
    "\".status/a.exit.json\"",
    "\"{home}/config.yaml\"",
    "\"a.log\"",
    "\"..\"",
    "\"a/b\"",
    "\"\"",
    "\"a\\nb\"",
    "4294967295",
    "[1, 2]",
    "{a: 1}",
    "null",
    "\"{port.api}\"",
    "\"{tinker_atropos}\"",
    "\"{nope}\"",
    "\"{\"",
];

/// A workflow with `value` put at one of its fields.
fn workflow_with(field: usize, value: &str) -> String {
    let stage =
        |extra: &str| format!("name: t\nports: {{api: auto}}\nstages:\n  - {{name: a, argv: [x]{extra}}}\n");
    match field % 15 {
        0 => stage(&format!(", start_delay: {value}")),
        1 => stage(&format!(", start_timeout: {value}, probe: {{tcp: \"127.0.0.1:1\"}}")),
        2 => stage(&format!(", log: {value}")),
        3 => stage(&format!(", cwd: {value}")),
        4 => format!("name: t\nstages:\n  - {{name: {value}, argv: [x]}}\n"),
        5 => format!("name: t\nstop_grace: {value}\nstages:\n  - {{name: a, argv: [x]}}\n"),
        6 => format!(
            "name: t\nretry: {{max_attempts: {value}, backoff: 1s}}\nstages:\n  - {{name: a, argv: [x]}}\n"
        ),
        7 => format!(
            "name: t\nretry: {{max_attempts: 2, backoff: {value}}}\nstages:\n  - {{name: a, argv: [x]}}\n"
        ),
        8 => format!(
            "name: t\nports: {{api: 1}}\nvars: {{v: {value}}}\nstages:\n  - {{name: a, argv: [x, \"{{v}}\"]}}\n"
        ),
        9 => stage(&format!(", argv: [x, {value}]").replacen(", argv: [x]", "", 1)),
        10 => stage(&format!(", env: {{K: {value}}}")),
        11 => format!(
            "name: t\nstages:\n  - {{name: a, argv: [x]}}\nprogress: {{jsonl: {{file: {value}, step: /step}}}}\n"
        ),
        12 => stage(&format!(", log_max_size: {value}")),
        13 => stage(&format!(", log_max_files: {value}")),
        _ => format!("name: {value}\nstages:\n  - {{name: a, argv: [x]}}\n"),
    }
}

fn check_workflow_text(text: &str, fill: &str) {
    match Workflow::parse(Path::new("workflows/t.yaml"), text) {
        Err(err) => one_line(&err.to_string()),
        Ok(wf) => {
            // Every stage plans without panicking, and a planned log stays in the run directory.
            let mut vars: BTreeMap<String, String> =
                wf.known_vars().into_iter().map(|name| (name, fill.to_string())).collect();
            vars.insert("port.api".into(), "1".into());
            let run_dir = Path::new("/runs/r1");
            for stage in &wf.stages {
                match stage.plan(&vars, run_dir) {
                    Ok(plan) => {
                        let rest = plan.log_path.strip_prefix(run_dir).expect("log outside the run dir");
                        assert!(!rest.starts_with(".status"), "{rest:?}");
                        assert!(!plan.log_path.components().any(|c| c == std::path::Component::ParentDir));
                    }
                    Err(err) => one_line(&err.to_string()),
                }
            }
            // A JSONL progress file resolves inside the run directory, or is refused.
            vars.insert("run_dir".into(), "/runs/r1".into());
            if let Some(progress) = &wf.progress {
                match progress.resolve(&vars, &json!({}), |_| None) {
                    Ok(resolved) => {
                        if let Some(path) = resolved.source.followed_file() {
                            let rest = path.strip_prefix(run_dir).expect("a file outside the run dir");
                            assert!(rest.components().all(|c| matches!(c, std::path::Component::Normal(_))));
                        }
                    }
                    Err(err) => one_line(&err.to_string()),
                }
            }
        }
    }
}

#[test]
fn fuzz_workflows_never_panic_and_errors_are_one_line() {
    let hostile = prop::sample::select(HOSTILE);
    let value =
        prop_oneof![hostile.prop_map(str::to_string), "\\PC{0,12}".prop_map(|s| json!(s).to_string())];
    let mut runner = fuzz_runner(256);
    runner
        .run(&(0..15usize, value, "\\PC{0,8}"), |(field, value, fill)| {
            check_workflow_text(&workflow_with(field, &value), &fill);
            Ok(())
        })
        .unwrap();
    // Whole documents: arbitrary text, and YAML-looking punctuation soup.
    let mut runner = fuzz_runner(256);
    runner
        .run(&prop_oneof!["\\PC{0,200}", "[-:{}\\[\\]\n #a-z0-9'\"]{0,200}"], |text| {
            check_workflow_text(&text, "x");
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_templates_expand_or_fail_on_one_line() {
    let vars: BTreeMap<String, String> =
        BUILTIN_VARS.iter().map(|name| (name.to_string(), format!("<{name}>"))).collect();
    let mut runner = fuzz_runner(512);
    runner
        .run(&prop_oneof!["\\PC{0,40}", "[{}a-z_. \n]{0,40}"], |text| {
            match template::expand(&text, &vars) {
                Ok(_) => prop_assert!(template::variables(&text).is_ok()),
                Err(err) => one_line(&err.to_string()),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_durations_are_bounded_and_never_panic() {
    let mut runner = fuzz_runner(512);
    let text = prop_oneof![
        "\\PC{0,24}",
        "[0-9]{1,30}(\\.[0-9]{0,5})?(ns|us|ms|s|m|h|d|w|M|y| days| hours|e300)?",
        "[0-9.e+-]{1,12}",
    ];
    runner
        .run(&text, |text| {
            match text.parse::<Dur>() {
                Ok(dur) => prop_assert!(dur.0 <= MAX_DURATION),
                Err(err) => one_line(&err),
            }
            Ok(())
        })
        .unwrap();
    let mut runner = fuzz_runner(512);
    runner
        .run(&any::<f64>(), |secs| {
            match Dur::from_seconds(secs) {
                Ok(dur) => prop_assert!(dur.0 <= MAX_DURATION),
                Err(err) => one_line(&err),
            }
            // The same number as YAML goes through the workflow parser's reading.
            let text = format!("name: t\nstop_grace: {secs:e}\nstages:\n  - {{name: a, argv: [x]}}\n");
            if let Err(err) = Workflow::parse(Path::new("t.yaml"), &text) {
                one_line(&err.to_string());
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_pool_and_needs_values_never_panic_and_errors_are_one_line() {
    use lachesis::model::pool::{Needs, PoolSpec, Pools, assign, gpus_listed, parse_need};
    let mut runner = fuzz_runner(512);
    let text = prop_oneof![
        "\\PC{0,24}",
        "[a-zA-Z_-]{0,6}=[0-9a-zA-Z,. -]{0,24}",
        "gpu=(auto|[0-9]{1,12}(,[0-9]{0,3}){0,6})",
        "[a-z]{1,4}=-?[0-9]{1,25}",
    ];
    let pools = Pools::from_specs(&["gpu=0,1,2,3".parse::<PoolSpec>().unwrap()], None).unwrap();
    runner
        .run(&text, |text| {
            match text.parse::<PoolSpec>() {
                Ok(spec) => {
                    // What parses also makes a pool (auto with what nvidia-smi might list).
                    let listed = gpus_listed(&text);
                    if let Err(err) = Pools::from_specs(&[spec], Some(&listed)) {
                        one_line(&err.to_string());
                    }
                }
                Err(err) => one_line(&err.to_string()),
            }
            match parse_need(&text) {
                Ok((name, count)) => {
                    let needs = Needs::from_pairs([(name, count)]).unwrap();
                    match pools.check(&needs) {
                        // A need the pools meet is met by an empty node, within the pool.
                        Ok(()) => {
                            let got = assign(&pools, &Default::default(), &needs);
                            prop_assert!(got.is_some(), "{text}");
                        }
                        Err(err) => one_line(&err.to_string()),
                    }
                }
                Err(err) => one_line(&err.to_string()),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_cron_and_time_zones() {
    let expr = prop_oneof![
        "\\PC{0,30}",
        "([0-9*,/LW#?-]{1,6} ){4}[0-9*,/LW#?A-Z-]{1,6}",
        "@[a-z]{0,9}",
        "(MON|JAN|L|W|[0-9]{1,3}|\\*)( (MON|JAN|L|W|[0-9]{1,3}|\\*)){4}",
    ];
    let tz = prop_oneof![
        Just(None),
        prop::sample::select(
            &["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu"][..]
        )
        .prop_map(|tz| Some(tz.to_string())),
        "\\PC{0,20}".prop_map(Some),
    ];
    let mut runner = fuzz_runner(256);
    runner
        .run(&(expr, tz, 0i64..4_102_444_800, 0i64..10_000_000), |(expr, tz, start, gap)| {
            match Cron::parse(&expr, tz.as_deref()) {
                Ok(cron) => {
                    let last = chrono::DateTime::from_timestamp(start, 0).unwrap();
                    let now = chrono::DateTime::from_timestamp(start + gap, 0).unwrap();
                    if let Some(next) = cron.next_after(last) {
                        prop_assert!(next > last);
                    }
                    let _ = tick(&cron, last, now, gap % 2 == 0);
                    let _ = tick(&cron, now, last, false); // the clock went back
                }
                Err(err) => one_line(&err.to_string()),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_config_values_are_typed_or_refused_on_one_line() {
    let kind = prop::sample::select(
        &[
            FieldKind::Int,
            FieldKind::Float,
            FieldKind::Bool,
            FieldKind::Str,
            FieldKind::List,
            FieldKind::Dict,
            FieldKind::Other,
        ][..],
    );
    let type_name = prop_oneof![
        prop::sample::select(
            &[
                "",
                "int",
                "Optional[int]",
                "Literal['a', 'b']",
                "Literal[1, 2]",
                "Optional[Literal['x', None]]",
                "Literal['a\\'b', \"c\"]",
                "Literal[",
                "List[str]",
                "list[int]",
                "Tuple[float, ...]",
                "Set[bool]",
                "List[",
                "Dict[str, int]",
            ][..]
        )
        .prop_map(str::to_string),
        "\\PC{0,20}",
    ];
    let raw = prop_oneof!["\\PC{0,30}", "[\\[\\]{}\",0-9a-z. -]{0,30}", Just("[1,2]".to_string())];
    let mut runner = fuzz_runner(512);
    runner
        .run(&(kind, type_name, any::<bool>(), raw), |(kind, type_name, optional, raw)| {
            let field = FieldInfo {
                name: "f".into(),
                type_name,
                kind,
                optional,
                required: false,
                default: Value::Null,
                value: Value::Null,
                description: None,
            };
            if let Err(err) = check_value(&field, &raw) {
                one_line(&err.to_string());
            }
            Ok(())
        })
        .unwrap();
}

// ---- HTTP -------------------------------------------------------------------------------------

/// A router over a scratch home's service, driven in-process (no daemon, no socket).
struct InProcess {
    runtime: tokio::runtime::Runtime,
    app: axum::Router,
    _home: TestHome,
}

impl InProcess {
    fn new() -> InProcess {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut home = TestHome::new();
        let service = runtime.block_on(home.service());
        let app = lachesis::api::app(service, Default::default(), None);
        InProcess { runtime, app, _home: home }
    }

    /// The answer's status and body; panics (fails the test) if the handler panicked.
    fn call(&self, method: &str, uri: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
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
fn check_answer(method: &str, uri: &str, status: StatusCode, body: &[u8]) {
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
fn any_json() -> impl Strategy<Value = Value> {
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
fn mutated(example: Option<&str>, values: Vec<Value>, extra: Option<(String, Value)>) -> Value {
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

fn percent_encode(text: &str) -> String {
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

// ---- the corpus -------------------------------------------------------------------------------

/// Workflow files that panicked the CLI or were accepted though wrong, with the field their
/// error must name.
const WORKFLOW_CORPUS: &[(&str, &str)] = &[
    ("name: t\nstop_grace: 1e300\nstages:\n  - {name: a, argv: [x]}\n", "stop_grace"),
    (
        "name: t\nstages:\n  - {name: a, argv: [x], start_delay: \"99999999999999999999999h\"}\n",
        "stages[0].start_delay",
    ),
    ("name: t\nstages:\n  - {name: a, argv: [x], start_delay: 1e19}\n", "stages[0].start_delay"),
    (
        "name: t\nstages:\n  - {name: a, argv: [x], start_timeout: 1e300, probe: {tcp: \"h:1\"}}\n",
        "stages[0].start_timeout",
    ),
    (
        "name: t\nretry: {max_attempts: 2, backoff: 1e300}\nstages:\n  - {name: a, argv: [x]}\n",
        "retry.backoff",
    ),
    (
        "name: t\nretry: {max_attempts: 4294967295, backoff: 1s}\nstages:\n  - {name: a, argv: [x]}\n",
        "retry.max_attempts",
    ),
    ("name: t\nretry: {max_attempts: 3, backoff: 0}\nstages:\n  - {name: a, argv: [x]}\n", "retry.backoff"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log: /home/u/.lachesis/lachesis.db}\n", "stages[0].log"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log: ../../config.yaml}\n", "stages[0].log"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log: .status/a.exit.json}\n", "stages[0].log"),
    ("name: t\nstages:\n  - {name: \"..\", argv: [x]}\n", "stages[0].name"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log_max_size: 1.5GiB}\n", "stages[0].log_max_size"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log_max_size: 0}\n", "stages[0].log_max_size"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log_max_size: 99999999999TiB}\n", "stages[0].log_max_size"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log_max_files: 0}\n", "stages[0].log_max_files"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log_max_files: -1}\n", "stages[0].log_max_files"),
    ("name: t\nstages:\n  - {name: a/b, argv: [x]}\n", "stages[0].name"),
    (
        "name: t\nports: {api: auto}\nvars: {u: \"http://h:{port.api}\"}\nstages:\n  - {name: a, argv: [x]}\n",
        "vars.u",
    ),
];

#[test]
fn corpus_workflows_are_refused_naming_the_field() {
    for (text, field) in WORKFLOW_CORPUS {
        let err = Workflow::parse(Path::new("workflows/t.yaml"), text).expect_err(text).to_string();
        assert!(err.contains(&format!(": {field}")), "{text:?}: {err}");
        one_line(&err);
    }
    // Deep nesting is refused at once (it took seconds to minutes).
    let began = std::time::Instant::now();
    for depth in [20_000, 100_000] {
        let text = format!("name: t\nstages: {}{}\n", "[".repeat(depth), "]".repeat(depth));
        let err = Workflow::parse(Path::new("t.yaml"), &text).unwrap_err().to_string();
        assert!(err.contains("nested more than"), "{err}");
    }
    assert!(began.elapsed() < Duration::from_secs(2), "{:?}", began.elapsed());
    // What was refused but documented, or the reverse.
    let ok = "name: t\nstages:\n  - {name: a, argv: [\"true\"], cwd: \"{tinker_atropos}\", start_delay: 0}\n";
    Workflow::parse(Path::new("t.yaml"), ok).unwrap();
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

#[test]
fn fuzz_jsonl_progress_lines_never_panic() {
    use lachesis::workflow::ProgressSpec;
    let spec: ProgressSpec = serde_yaml::from_str(
        "{jsonl: {file: '{run_dir}/m.jsonl', step: /step, total: /n, fraction: /progress~1done_frac}}",
    )
    .unwrap();
    let vars = BTreeMap::from([("run_dir".to_string(), "/runs/r1".to_string())]);
    let resolved = spec.resolve(&vars, &json!({}), |_| None).unwrap();
    // Records with the read keys at any value, whole or cut short (a line still being written),
    // and any text at all.
    let record = (any_json(), any_json(), any_json(), any::<bool>(), 0..200usize).prop_map(
        |(step, n, done, nested, cut)| {
            let text = if nested {
                json!({"step": step, "n": n, "progress": {"done_frac": done}}).to_string()
            } else {
                json!({"step": step, "n": n, "progress/done_frac": done}).to_string()
            };
            text.chars().take(cut.max(1) * 4).collect::<String>()
        },
    );
    let mut runner = fuzz_runner(1024);
    runner
        .run(&prop_oneof![record, "\\PC{0,80}"], |line| {
            let read = resolved.read_jsonl(&line);
            if let Err(err) = &read {
                one_line(&err.to_string());
            }
            prop_assert_eq!(resolved.read_line(&line), read.as_ref().ok().copied().flatten());
            // A resumed attempt's reading of the line is the same one or none, never another.
            let from = resolved.read_followed_from(&line, Some(6));
            prop_assert_eq!(from.is_ok(), read.is_ok());
            if let (Ok(Some(kept)), Ok(all)) = (&from, &read) {
                prop_assert_eq!(Some(*kept), *all);
            }
            Ok(())
        })
        .unwrap();
}

/// What a fuzzed dependency names its target with: one key, or two (refused).
const DEPENDENCY_KEYS: &[&[&str]] = &[&["run"], &["sweep"], &["run", "sweep"], &["step"]];

/// Pipeline files (with run and sweep steps) and `after` lists (of runs and sweeps): parsed or
/// refused on one line, never a panic; over HTTP a refusal is JSON, never a 500, whatever the
/// dependency's run or sweep, condition and name.
#[test]
fn fuzz_pipelines_and_dependencies_never_panic() {
    use lachesis::workflow::pipeline::Pipeline;
    let step = (
        prop::option::of(prop_oneof!["[a-c]", "\\PC{0,6}"]),
        prop::option::of(prop_oneof![
            Just("[]".to_string()),
            "\\[[a-c, ]{0,6}\\]",
            Just("[{step: a, when: any}]".to_string()),
            Just("[{sweep: a, name: t}]".to_string()),
            Just("[{sweep: 0, run: 0}]".to_string()),
            "\\PC{0,10}"
        ]),
        prop::option::of(prop_oneof![Just("\"{after.a.run_id}\"".to_string()), "\\PC{0,10}"]),
    )
        .prop_map(|(name, after, var)| {
            let mut step = "- workflow: demo\n".to_string();
            if let Some(name) = name {
                step.push_str(&format!("  name: {}\n", json!(name)));
            }
            if let Some(after) = after {
                step.push_str(&format!("  after: {after}\n"));
            }
            if let Some(var) = var {
                step.push_str(&format!("  vars: {{steps: {var}}}\n"));
            }
            step
        });
    // A sweep step: a name in the workflows' sweeps/, a mapping, or anything, sometimes with a
    // field a sweep step does not take.
    let sweep_step = (
        prop::option::of(prop_oneof!["[a-c]", "\\PC{0,6}"]),
        prop_oneof![
            Just("demo-sweep".to_string()),
            Just("{method: grid}".to_string()),
            Just("../x".to_string()),
            "\\PC{0,10}"
        ],
        prop::option::of(prop_oneof![Just("workflow: demo".to_string()), Just("after: [a]".to_string())]),
    )
        .prop_map(|(name, sweep, extra)| {
            let mut step = format!("- sweep: {sweep}\n");
            if let Some(name) = name {
                step.push_str(&format!("  name: {}\n", json!(name)));
            }
            if let Some(extra) = extra {
                step.push_str(&format!("  {extra}\n"));
            }
            step
        });
    let step = prop_oneof![3 => step, 1 => sweep_step];
    let text = prop_oneof![
        prop::collection::vec(step, 0..5).prop_map(|steps| steps.concat()),
        "[-:{}\\[\\]\n #a-z0-9'\"]{0,120}",
    ];
    let mut runner = fuzz_runner(384);
    runner
        .run(&text, |text| {
            match Pipeline::parse(Path::new("p.yaml"), &text) {
                Ok(pipeline) => {
                    prop_assert_eq!(pipeline.order.len(), pipeline.steps.len());
                    for step in pipeline.steps.iter().filter(|s| s.is_sweep()) {
                        prop_assert!(step.after.is_empty(), "a sweep step waits for no step");
                    }
                    for (at, step) in pipeline.order.iter().enumerate() {
                        for (target, _) in &pipeline.steps[*step].after {
                            prop_assert!(
                                pipeline.order[..at].contains(target),
                                "queued before what it waits for"
                            );
                        }
                    }
                }
                Err(err) => one_line(&err.to_string()),
            }
            Ok(())
        })
        .unwrap();

    let api = InProcess::new();
    let after = (
        prop_oneof!["\\PC{0,10}", Just("00000000".to_string()), Just(String::new())],
        prop::sample::select(DEPENDENCY_KEYS),
        prop_oneof![Just(json!("ok")), Just(json!("any")), Just(json!("failed")), any_json()],
        prop::option::of(prop_oneof!["\\PC{0,10}".prop_map(Value::from), any_json()]),
    )
        .prop_map(|(id, keys, when, name)| {
            let mut item = json!({"when": when});
            for key in keys {
                item[key] = json!(id);
            }
            if let Some(name) = name {
                item["name"] = name;
            }
            item
        });
    let mut runner = fuzz_runner(256);
    runner
        .run(&(prop::collection::vec(after, 0..3), prop::bool::ANY), |(after, list)| {
            let one = json!({"workflow": "demo", "after": after, "vars": {"steps": "{after.x.run_id}"}});
            let body = if list { json!([one]) } else { one };
            let (status, answer) = api.call("POST", "/runs", body.to_string().into_bytes());
            check_answer("POST", "/runs", status, &answer);
            Ok(())
        })
        .unwrap();
}

/// Commands on several runs (`run stop|hold|release|resume` with ids or filters): whatever ids,
/// workflow, sweep and state a caller gives, each id gets one outcome, every refusal is one line,
/// and nothing panics or fails the whole command.
#[test]
fn fuzz_commands_on_several_runs_report_each_run() {
    use lachesis::model::RunState;
    use lachesis::service::{RunAction, RunSelection};
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut home = TestHome::new();
    let service = runtime.block_on(home.service());
    let known: Vec<String> = (0..3).map(|_| home.submit(&["-w", "demo"]).to_string()).collect();
    let id = prop_oneof![
        "\\PC{0,12}",
        Just(String::new()),
        Just("..".to_string()),
        Just("\0".to_string()),
        prop::sample::select(known.clone()),
        prop::sample::select(known.clone()).prop_map(|id| id[..4].to_string()),
    ];
    let action = prop_oneof![
        Just(RunAction::Stop),
        Just(RunAction::Hold),
        Just(RunAction::Release),
        any::<Option<i64>>().prop_map(|from| RunAction::Resume { from }),
    ];
    let filter = (
        any::<bool>(),
        prop::option::of(prop::sample::select(&RunState::ALL[..])),
        prop::option::of(prop_oneof![Just("demo".to_string()), "\\PC{0,8}"]),
        prop::option::of(prop_oneof![Just("0000".to_string()), "\\PC{0,8}"]),
    );
    let mut runner = fuzz_runner(256);
    runner
        .run(
            &(action, prop::collection::vec(id, 0..5), filter),
            |(action, ids, (all, state, workflow, sweep))| {
                let selection = RunSelection { ids: ids.clone(), all, state, workflow, sweep };
                match runtime.block_on(service.act_on_runs(action, &selection)) {
                    Ok(outcomes) => {
                        if !ids.is_empty() {
                            assert!(outcomes.len() <= ids.len(), "{ids:?}: {outcomes:?}");
                        }
                        for outcome in &outcomes {
                            assert!(outcome.run.is_some() != outcome.error.is_some(), "{outcome:?}");
                            one_line(outcome.error.as_deref().unwrap_or_default());
                            one_line(&outcome.target);
                        }
                    }
                    // Only a filter's own refusal (a state the action never applies to, an unknown
                    // or ambiguous sweep) fails the whole command.
                    Err(err) => {
                        assert!(ids.is_empty(), "{ids:?}: {err}");
                        one_line(&err.to_string());
                    }
                }
                Ok(())
            },
        )
        .unwrap();
}
