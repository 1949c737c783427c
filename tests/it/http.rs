//! The HTTP API against a real daemon: every route's happy path and errors, the OpenAPI
//! document against the live router, auth off the open address, body limits.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestHome, wait_for};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Api {
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

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }
}

/// A daemon serving the API on `host`, and a client for it.
async fn start(home: &mut TestHome, host: &str, token: Option<&str>) -> Api {
    let addr = format!("{host}:{}", free_port());
    home.env.push(("LACHESIS_ENV_DIRS".into(), crate::atropos::envs_dir().display().to_string()));
    if let Some(token) = token {
        home.env.push(("LACHESIS_API_TOKEN".into(), token.into()));
    }
    home.start_daemon_with(&["--listen", &addr]);
    let api = Api {
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
        token: token.map(str::to_string),
    };
    let http = api.http.clone();
    let url = format!("{}/openapi.json", api.base);
    wait_for("the API to answer", Duration::from_secs(20), || {
        let (http, url) = (http.clone(), url.clone());
        async move { http.get(url).send().await.ok().map(drop) }
    })
    .await;
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
    assert_eq!(b.as_array().unwrap().len(), 2);
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
    assert!(b["trainer"].as_str().unwrap().contains("Step 1/1"));
    let (s, b) = api.get(&format!("/runs/{id}/logs?stage=nope")).await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, b) = api.post(&format!("/runs/{id}/stop"), json!({})).await;
    assert_eq!((s, code(&b)), (StatusCode::CONFLICT, "already_ended"));

    // Inference tests and schedules.
    assert_eq!(api.get("/tests").await.0, StatusCode::OK);
    let (s, b) = api.post("/tests", json!({ "env": "arith" })).await;
    assert_eq!((s, code(&b)), (StatusCode::UNPROCESSABLE_ENTITY, "missing_credentials"), "{b}");
    let test = json!({ "env": "arith", "provider": "http://127.0.0.1:9/v1", "models": ["m"], "steps": 1 });
    let (s, test) = api.post("/tests", test).await;
    assert_eq!(s, StatusCode::CREATED, "{test}");
    let test_id = test["id"].as_str().unwrap();
    let (s, b) = api.get(&format!("/tests/{test_id}")).await;
    assert_eq!((s, b["tasks"][0]["model"].as_str()), (StatusCode::OK, Some("m")));
    let (s, b) = api.post(&format!("/tests/{test_id}/stop"), json!({})).await;
    assert!(s == StatusCode::OK || code(&b) == "already_ended", "{s} {b}");
    let (s, b) = api.post("/tests", json!({ "env": "arith", "modelz": ["m"] })).await;
    assert_eq!((s, code(&b)), (StatusCode::BAD_REQUEST, "invalid_body"));
    let (s, b) = api.get("/tests/zzz").await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, b) = api.post("/tests/zzz/stop", json!({})).await;
    assert_eq!((s, code(&b)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, b) = api.post("/schedules", json!({ "name": "n", "cron": "0 25 * * *", "env": "arith" })).await;
    assert_eq!((s, code(&b)), (StatusCode::BAD_REQUEST, "invalid"));
    let body = json!({ "name": "n", "cron": "@daily", "env": "arith", "provider": "http://127.0.0.1:9/v1", "models": ["m"] });
    let (s, b) = api.post("/schedules", body).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(api.get("/schedules").await.1.as_array().unwrap().len(), 1);
    assert_eq!(api.get("/schedules/n").await.0, StatusCode::OK);
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
async fn off_the_open_address_a_bearer_token_is_required() {
    let mut home = TestHome::new();
    let refused = home.cli(&["daemon", "--listen", "127.0.0.2:1"]);
    assert!(!refused.status.success());
    assert!(crate::support::stderr(&refused).contains("needs a bearer token: set LACHESIS_API_TOKEN"));

    let mut api = start(&mut home, "127.0.0.2", Some("s3cret-token")).await;
    assert_eq!(api.get("/runs").await.0, StatusCode::OK);
    api.token = Some("s3cret-tokem".into());
    let (s, b) = api.get("/runs").await;
    assert_eq!((s, code(&b)), (StatusCode::UNAUTHORIZED, "unauthorized"));
    api.token = None;
    assert_eq!(api.get("/health").await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn results_carry_wandb_metrics_and_fall_back_to_the_snapshot() {
    let mut home = TestHome::new();
    let id = home.submit(&["--workflow", "demo"]);
    let short = &id.simple().to_string()[..8];
    // What W&B's GraphQL answers: the summary is a JSON string inside the JSON.
    let summary =
        r#"{"_step": 42, "train/reward_mean": 0.61, "train/percent_correct": 0.5, "train/loss": 0.12}"#;
    let reply = json!({ "data": { "project": { "runs": { "edges": [{ "node": {
        "name": "abc123", "displayName": format!("run-{short}"), "state": "running",
        "summaryMetrics": summary, "historyKeys": "{}" } }] } } } });
    let wandb = crate::support::Receiver::start_with(vec![], reply.to_string()).await;
    let base = wandb.url.trim_end_matches("/hook").to_string();
    home.env.extend([
        ("WANDB_API_KEY".to_string(), "wandb-test-key-0123456789".to_string()),
        ("WANDB_BASE_URL".to_string(), base),
        ("WANDB_ENTITY".to_string(), "lab".to_string()),
    ]);
    let api = start(&mut home, "127.0.0.1", None).await;
    let (s, b) = api.get(&format!("/runs/{id}/results")).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let metrics = &b["metrics"];
    assert_eq!((metrics["age"].as_str(), metrics["wandb_error"].as_str()), (Some("fresh"), None), "{b:#}");
    assert_eq!(metrics["snapshot"]["step"], 42);
    assert_eq!(metrics["snapshot"]["reward_mean"], 0.61);
    assert_eq!(metrics["wandb_project"], "atropos-tinker");

    // W&B goes away: the answer comes from the stored snapshot, saying how old it is.
    drop(wandb);
    let (_, b) = api.get(&format!("/runs/{id}/results")).await;
    let metrics = &b["metrics"];
    assert_eq!(metrics["snapshot"]["step"], 42, "{b:#}");
    assert!(metrics["age"].as_str().unwrap().ends_with(" old"), "{b:#}");
    assert!(metrics["wandb_error"].is_string(), "{b:#}");
    assert!(!b.to_string().contains("wandb-test-key"), "the key never shows");
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
    let Some(url) = crate::store::fresh_postgres().await else { return };
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
