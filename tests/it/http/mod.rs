//! The HTTP API against a real daemon: every route's happy path and errors, the OpenAPI
//! document against the live router, auth off the open address, body limits.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use lachesis::model::RunState;

use crate::support::{TestHome, wait_for};

mod access;
mod wandb;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub(crate) struct Api {
    base: String,
    http: reqwest::Client,
    token: Option<String>,
}

impl Api {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// A POST whose answer may never come (the daemon dies serving it): sent, and dropped.
    pub(crate) async fn post_unanswered(&self, path: &str) {
        let mut request = self.http.post(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let _ = request.send().await;
    }

    pub(crate) async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }
}

/// A daemon serving the API on `host`, and a client for it with the daemon's token: the one
/// given (as LACHESIS_API_TOKEN), else the one the daemon created in the home.
async fn start(home: &mut TestHome, host: &str, token: Option<&str>) -> Api {
    start_with(home, host, token, &[]).await
}

pub(crate) async fn start_with(home: &mut TestHome, host: &str, token: Option<&str>, extra: &[&str]) -> Api {
    let addr = format!("{host}:{}", free_port());
    // A home that set its own environment directories keeps them.
    if !home.environ.iter().any(|(key, _)| key == "LACHESIS_ENV_DIRS") {
        home.environ.push(("LACHESIS_ENV_DIRS".into(), crate::atropos::envs_dir().display().to_string()));
    }
    if let Some(token) = token {
        home.environ.push(("LACHESIS_API_TOKEN".into(), token.into()));
    }
    let mut args = vec!["--listen", addr.as_str()];
    args.extend_from_slice(extra);
    home.start_daemon_with(&args);
    let mut api = Api {
        base: format!("http://{addr}"),
        http: lachesis::http_client::builder().build().unwrap(),
        token: None,
    };
    let http = api.http.clone();
    let url = format!("{}/openapi.json", api.base);
    wait_for("the API to answer", Duration::from_secs(20), || {
        let (http, url) = (http.clone(), url.clone());
        async move { http.get(url).send().await.ok().map(drop) }
    })
    .await;
    api.token = Some(match token {
        Some(token) => token.to_string(),
        None => std::fs::read_to_string(home.path().join("api-token")).unwrap().trim().to_string(),
    });
    api
}

fn code(body: &Value) -> &str {
    body["error"].as_str().unwrap_or("")
}

#[tokio::test]
async fn every_route_answers_and_errors_are_json_with_stable_codes() {
    let mut home = TestHome::new();
    let api = start(&mut home, "127.0.0.1", None).await;

    let (s, b) = api.get("/health").await;
    assert_eq!((s, b["status"].as_str()), (StatusCode::OK, Some("ok")));
    let (s, b) = api.get("/workflows").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        b.as_array().unwrap().len(),
        8,
        "the bundled demo, demo-cleanup, demo-eval, demo-pbt, demo-tune, tinker-atropos, tinker-cookbook and tinker-verifiers"
    );
    let (s, b) = api.get("/environments").await;
    assert_eq!((s, b["environments"][0]["name"].as_str()), (StatusCode::OK, Some("arith")));
    assert_eq!(api.get("/environments/arith").await.0, StatusCode::OK);
    let (s, b) = api.get("/environments/nope").await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, b) = api.get("/selection").await;
    assert_eq!((s, code(&b)), (StatusCode::CONFLICT, "no_selection"));
    let (s, b) = api.post("/selection", json!({ "name": "nope" })).await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, b) = api.post("/selection", json!({ "nam": "arith" })).await;
    assert_eq!((s, code(&b)), (StatusCode::BAD_REQUEST, "invalid_body"));
    let (s, b) = api.call(Method::PUT, "/config/group_size", Some(json!({ "value": 8 }))).await;
    assert_eq!((s, code(&b)), (StatusCode::CONFLICT, "no_selection"));
    let (s, b) = api.get("/nodes").await;
    assert_eq!((s, code(&b)), (StatusCode::CONFLICT, "needs_postgres"));

    // Runs.
    let (s, run) = api.post("/runs", json!({ "workflow": "demo", "vars": { "steps": "1" } })).await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    for var in ["python", "tinker_atropos", "undeclared"] {
        let (s, b) = api.post("/runs", json!({ "workflow": "demo", "vars": { var: "/tmp/evil" } })).await;
        assert_eq!((s, code(&b)), (StatusCode::BAD_REQUEST, "invalid"), "{b}");
        assert!(b["message"].as_str().unwrap().contains(&format!("variable '{var}'")), "{b}");
    }
    let (s, b) = api.post("/runs", json!({ "workflow": "nope" })).await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, b) = api.post("/runs", json!({ "workflow": "tinker-atropos", "env": "arith" })).await;
    assert_eq!((s, code(&b)), (StatusCode::UNPROCESSABLE_ENTITY, "missing_credentials"), "{b}");
    let (s, b) = api.get("/runs?state=bogus").await;
    assert_eq!((s, code(&b)), (StatusCode::BAD_REQUEST, "invalid"));
    let (s, b) = api.get("/runs?state=pending&limit=5").await;
    assert_eq!(s, StatusCode::OK);
    assert!(b.as_array().is_some());
    let (s, b) = api.get("/runs/zzz").await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"));
    let status = wait_for("the run to complete", Duration::from_secs(30), || {
        let url = format!("/runs/{id}");
        let api = &api;
        async move {
            let (_, b) = api.get(&url).await;
            (b["state"] == "completed"
                && b["stages"].as_array().unwrap().iter().all(|s| s["state"] == "exited"))
            .then_some(b)
        }
    })
    .await;
    assert_eq!(status["stages"].as_array().unwrap().len(), 3);
    let (s, b) = api.get(&format!("/runs/{id}/results")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["trained_weights"], "tinker://demo/final");
    assert!(b["durations"]["trainer"].as_f64().unwrap() > 0.0);
    let (s, b) = api.get(&format!("/runs/{id}/events")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        b.as_array().unwrap().iter().any(|e| e["message"].as_str().is_some_and(|m| m.starts_with("claim")))
    );
    let (s, b) = api.get(&format!("/runs/{id}/logs?stage=trainer")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(b["trainer"]["text"].as_str().unwrap().contains("Step 1/1"));
    assert_eq!(b["trainer"]["end"], b["trainer"]["size"], "a tail reaches the end");
    let (s, b) = api.get(&format!("/runs/{id}/logs?stage=nope")).await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, b) = api.post(&format!("/runs/{id}/stop"), json!({})).await;
    assert_eq!((s, code(&b)), (StatusCode::CONFLICT, "already_ended"));
    let (s, b) = api.post(&format!("/runs/{id}/resume"), json!({})).await;
    assert_eq!((s, code(&b)), (StatusCode::CONFLICT, "not_resumable"), "a completed run does not resume");
    let (s, b) = api.get(&format!("/runs/{id}/checkpoints")).await;
    assert_eq!((s, b.as_array().map(Vec::len)), (StatusCode::OK, Some(0)));

    // Inference tests and schedules.
    assert_eq!(api.get("/tests").await.0, StatusCode::OK);
    let (s, b) = api.post("/tests", json!({ "env": "arith" })).await;
    assert_eq!((s, code(&b)), (StatusCode::UNPROCESSABLE_ENTITY, "missing_credentials"), "{b}");
    let provider = "http://bob:pr0vider-pass@127.0.0.1:9/v1";
    let test = json!({ "env": "arith", "provider": provider, "models": ["m"], "steps": 1 });
    let (s, test) = api.post("/tests", test).await;
    assert_eq!(s, StatusCode::CREATED, "{test}");
    let test_id = test["id"].as_str().unwrap();
    let (s, b) = api.get(&format!("/tests/{test_id}")).await;
    assert_eq!((s, b["tasks"][0]["model"].as_str()), (StatusCode::OK, Some("m")));
    // A provider URL's credentials are not read back either.
    for answer in [&b, &api.get("/tests").await.1] {
        assert!(!answer.to_string().contains("pr0vider-pass"), "{answer}");
    }
    let (s, b) = api.post(&format!("/tests/{test_id}/stop"), json!({})).await;
    assert!(s == StatusCode::OK || code(&b) == "already_ended", "{s} {b}");
    // Nothing sends a key to an unexpected place.
    let refused = [
        (json!({ "provider": "file:///etc/passwd" }), "provider 'file:///etc/passwd' must be an http(s) URL"),
        (
            json!({ "provider": "http://127.0.0.1:9/v1", "server_type": "bogus" }),
            "server_type 'bogus' is not one of",
        ),
        (
            json!({ "provider": "http://127.0.0.1:9/v1", "api_key_env": "HOME" }),
            "api_key_env 'HOME' is not a provider key (allowed: OPENROUTER_API_KEY, TINKER_API_KEY, WANDB_API_KEY;",
        ),
    ];
    for (fields, message) in refused {
        let mut body = json!({ "env": "arith", "models": ["m"] });
        body.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        for path in ["/tests", "/schedules"] {
            let mut body = body.clone();
            if path == "/schedules" {
                body.as_object_mut()
                    .unwrap()
                    .extend([("name".into(), json!("k")), ("cron".into(), json!("@daily"))]);
            }
            let (s, b) = api.post(path, body).await;
            assert_eq!((s, code(&b)), (StatusCode::BAD_REQUEST, "invalid"), "{path} {b}");
            let text = b["message"].as_str().unwrap();
            assert!(text.starts_with(message) && !text.contains('\n'), "{path} {text}");
        }
    }
    let (s, b) = api.post("/tests", json!({ "env": "arith", "modelz": ["m"] })).await;
    assert_eq!((s, code(&b)), (StatusCode::BAD_REQUEST, "invalid_body"));
    let (s, b) = api.get("/tests/zzz").await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, b) = api.post("/tests/zzz/stop", json!({})).await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, b) = api.post("/schedules", json!({ "name": "n", "cron": "0 25 * * *", "env": "arith" })).await;
    assert_eq!((s, code(&b)), (StatusCode::BAD_REQUEST, "invalid"));
    let hook = "https://alice:hunter2-pass@hooks.example/x?token=t0ps3cret";
    let body = json!({ "name": "n", "cron": "@daily", "env": "arith", "provider": "http://127.0.0.1:9/v1", "models": ["m"], "webhooks": [hook] });
    let (s, b) = api.post("/schedules", body).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (_, list) = api.get("/schedules").await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    let (s, shown) = api.get("/schedules/n").await;
    assert_eq!(s, StatusCode::OK);
    // Webhook credentials are never read back, whichever read it is.
    assert_eq!(list[0]["webhooks"][0], "https://***@hooks.example/x?***", "{list}");
    for answer in [&b, &list, &shown, &api.post("/schedules/n/pause", json!({})).await.1] {
        let text = answer.to_string();
        assert!(
            !text.contains("hunter2") && !text.contains("t0ps3cret") && !text.contains("alice"),
            "{text}"
        );
    }
    let cli =
        home.cli_ok(&["schedule", "list", "--json"]) + &home.cli_ok(&["schedule", "show", "n", "--json"]);
    assert!(!cli.contains("hunter2") && !cli.contains("t0ps3cret"), "{cli}");
    // …while the store keeps the real one, for delivery.
    assert_eq!(home.service().await.stored_schedules().await.unwrap()[0].webhooks, vec![hook.to_string()]);
    assert_eq!(api.post("/schedules/n/pause", json!({})).await.1["paused"], true);
    assert_eq!(api.post("/schedules/n/resume", json!({})).await.1["paused"], false);
    assert_eq!(api.call(Method::DELETE, "/schedules/n", None).await.0, StatusCode::OK);
    let (s, b) = api.get("/schedules/n").await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"));

    // Metrics and the unknown.
    let (s, b) = api.get("/metrics").await;
    assert_eq!(s, StatusCode::OK);
    let text = b.as_str().unwrap();
    assert!(text.contains("lachesis_runs{state=\"completed\"} 1"), "{text}");
    assert!(text.contains("lachesis_stage_exits_total{outcome=\"success\"} 3"), "{text}");
    assert!(text.contains("lachesis_exit_detection_seconds_count 3"), "{text}");
    let (s, b) = api.get("/nope").await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"));
    // A list queues every run in one transaction, or none (after the metrics: these run too).
    let (s, b) =
        api.post("/runs", json!([{ "workflow": "demo", "priority": -1 }, { "workflow": "demo" }])).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b.as_array().map(Vec::len), Some(2));
    assert_eq!(b[0]["priority"], -1);
    let (s, b) = api.post("/runs", json!([{ "workflow": "demo" }, { "workflow": "nope" }])).await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"));
    assert!(b["message"].as_str().unwrap_or("").contains("run 2 of the batch"), "{b}");
    let (s, b) = api.post("/runs", json!([{ "workflw": "demo" }])).await;
    assert_eq!((s, code(&b)), (StatusCode::BAD_REQUEST, "invalid_body"));
    let big = "x".repeat(lachesis::api::BODY_LIMIT + 1);
    let (s, b) = api.post("/selection", json!({ "name": big })).await;
    assert_eq!((s, code(&b)), (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"));
}

#[tokio::test]
async fn the_openapi_document_covers_every_live_route() {
    let mut home = TestHome::new();
    let api = start(&mut home, "127.0.0.1", None).await;
    let (_, doc) = api.get("/openapi.json").await;
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    let mut operations = 0;
    for (path, methods) in paths {
        for method in methods.as_object().unwrap().keys() {
            operations += 1;
            // Fill path parameters with something that routes (it may well not exist).
            let concrete = path.replace("{id}", "0000").replace("{name}", "x").replace("{field}", "f");
            let method: Method = method.to_uppercase().parse().unwrap();
            let body = (method != Method::GET && method != Method::DELETE).then(|| json!({}));
            let (status, answer) = api.call(method.clone(), &concrete, body).await;
            let unrouted = status == StatusCode::METHOD_NOT_ALLOWED
                || (status == StatusCode::NOT_FOUND
                    && answer["message"] == "no such route (see /openapi.json)");
            assert!(!unrouted, "{method} {path} is in the document but not served: {status} {answer}");
        }
    }
    assert_eq!(operations, lachesis::api::ROUTES.len());
}

#[tokio::test]
async fn selection_and_config_over_http() {
    let Some((python, _)) = crate::atropos::atropos() else { return };
    let mut home = crate::atropos::atropos_home(&python);
    let api = start(&mut home, "127.0.0.1", None).await;
    let (s, b) = api.post("/selection", json!({ "name": "arith" })).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["env_name"], "arith");
    let (s, b) = api.get("/selection").await;
    assert_eq!((s, b["environment"].as_str()), (StatusCode::OK, Some("arith")));
    let (s, b) = api.call(Method::PUT, "/config/group_size", Some(json!({ "value": 8 }))).await;
    assert_eq!((s, b["value"].as_i64()), (StatusCode::OK, Some(8)), "{b}");
    let (s, b) = api.call(Method::PUT, "/config/total_steps", Some(json!({ "value": 8 }))).await;
    assert_eq!((s, code(&b)), (StatusCode::FORBIDDEN, "locked_field"), "{b}");
    let (s, b) = api.call(Method::PUT, "/config/group_size", Some(json!({ "value": "many" }))).await;
    assert_eq!((s, code(&b)), (StatusCode::BAD_REQUEST, "invalid"), "{b}");
    let (s, b) = api.call(Method::PUT, "/config/group_sise", Some(json!({ "value": 8 }))).await;
    assert_eq!((s, code(&b)), (StatusCode::BAD_REQUEST, "invalid"), "{b}");
}

#[tokio::test]
async fn nodes_over_http_on_postgres() {
    let Some(url) = crate::support::fresh_postgres().await else { return };
    let mut home = TestHome::new();
    home.database_url = Some(url);
    let api = start(&mut home, "127.0.0.1", None).await;
    let (s, b) = wait_for("the daemon's node to register", Duration::from_secs(10), || async {
        let (s, b) = api.get("/nodes").await;
        (b.as_array().is_some_and(|a| !a.is_empty())).then_some((s, b))
    })
    .await;
    assert_eq!(s, StatusCode::OK);
    let node = &b[0];
    assert_eq!(
        (node["id"].as_str(), node["health"].as_str()),
        (Some(lachesis::daemon::hostname().as_str()), Some("up"))
    );
    assert_eq!(node["runs"], 0);
    assert!(node["heartbeat_age_ms"].as_i64().unwrap() < 60_000);
}

#[tokio::test]
async fn hold_release_and_edit_over_http() {
    let mut home = TestHome::new();
    home.workflow("quick", "name: quick\nstages:\n  - {name: main, argv: [sh, -c, \"exit 0\"]}\n");
    let api = start(&mut home, "127.0.0.1", None).await;
    let (status, run) = api.post("/runs", json!({"workflow": "quick", "hold": true})).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert!(run["held_at"].is_i64(), "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    let (status, edited) =
        api.call(Method::PATCH, &format!("/runs/{id}"), Some(json!({"priority": 9}))).await;
    assert_eq!((status, edited["priority"].as_i64()), (StatusCode::OK, Some(9)), "{edited}");
    let (status, bad) =
        api.call(Method::PATCH, &format!("/runs/{id}"), Some(json!({"vars": {"x": "1"}}))).await;
    assert_eq!((status, code(&bad)), (StatusCode::BAD_REQUEST, "invalid"), "{bad}");
    // Another run behind it completes; the held one stays pending.
    let (_, other) = api.post("/runs", json!({"workflow": "quick"})).await;
    let other = other["id"].as_str().unwrap().parse().unwrap();
    home.wait_state(other, RunState::Completed, Duration::from_secs(20)).await;
    assert_eq!(home.run(id.parse().unwrap()).await.state, RunState::Pending);

    let (status, released) = api.post(&format!("/runs/{id}/release"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{released}");
    assert!(released.get("held_at").is_none(), "{released}");
    home.wait_state(id.parse().unwrap(), RunState::Completed, Duration::from_secs(20)).await;
    for path in [format!("/runs/{id}/hold"), format!("/runs/{id}/release")] {
        let (status, refused) = api.post(&path, json!({})).await;
        assert_eq!((status, code(&refused)), (StatusCode::CONFLICT, "not_pending"), "{refused}");
        assert!(
            refused["message"].as_str().unwrap().contains("is completed: only a pending run"),
            "{refused}"
        );
    }
    let (status, refused) =
        api.call(Method::PATCH, &format!("/runs/{id}"), Some(json!({"priority": 1}))).await;
    assert_eq!((status, code(&refused)), (StatusCode::CONFLICT, "not_pending"), "{refused}");
}

#[tokio::test]
async fn post_runs_takes_after_and_the_run_resource_shows_each_dependency() {
    let mut home = TestHome::new();
    let api = start(&mut home, "127.0.0.1", None).await;
    let (s, first) = api.post("/runs", json!({"workflow": "demo", "hold": true})).await;
    assert_eq!(s, StatusCode::CREATED, "{first}");
    let first_id = first["id"].as_str().unwrap().to_string();
    let after = json!([{"run": &first_id[..8], "when": "any", "name": "train"}]);
    let (s, waiting) = api.post("/runs", json!({"workflow": "demo", "after": after})).await;
    assert_eq!((s, waiting["deps_open"].as_i64()), (StatusCode::CREATED, Some(1)), "{waiting}");
    let (s, status) = api.get(&format!("/runs/{}", waiting["id"].as_str().unwrap())).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(status["after"][0]["run"].as_str(), Some(first_id.as_str()), "{status}");
    assert_eq!(
        (status["after"][0]["when"].as_str(), status["after"][0]["state"].as_str()),
        (Some("any"), Some("pending"))
    );
    assert_eq!(status["after"][0]["settled"].as_str(), Some("waiting"));
    assert!(status["waiting_for"].as_str().unwrap_or("").starts_with("dependencies: train="), "{status}");

    let (s, b) = api.post("/runs", json!({"workflow": "demo", "after": [{"run": "ffffffff"}]})).await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"), "{b}");
    let (s, b) = api
        .post("/runs", json!({"workflow": "demo", "after": [{"run": &first_id, "when": "sometimes"}]}))
        .await;
    assert_eq!((s, code(&b)), (StatusCode::BAD_REQUEST, "invalid_body"), "{b}");
    let (s, _) = api.post(&format!("/runs/{first_id}/stop"), json!({})).await;
    assert!(s.is_success());
    let (s, b) = api.post("/runs", json!({"workflow": "demo", "after": [{"run": &first_id}]})).await;
    assert_eq!((s, code(&b)), (StatusCode::CONFLICT, "dependency_unmet"), "{b}");
    assert!(b["message"].as_str().unwrap().contains("was stopped"), "{b}");
}
