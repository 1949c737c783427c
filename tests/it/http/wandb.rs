//! W&B's metrics over HTTP: a run's results carry them and fall back to the stored snapshot,
//! and a running run's history is stored so it outlives W&B.

use super::*;

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
    home.environ.extend([
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
async fn a_running_runs_wandb_history_is_stored_and_outlives_wandb() {
    let mut home = TestHome::new();
    // Long enough (about 40 s of steps) to be read several times while it runs.
    let id = home.submit(&["--workflow", "demo", "--var", "steps=100"]);
    let short = &id.simple().to_string()[..8];
    // One answer serves both queries: the run lookup reads project.runs, the history project.run.
    let rows: Vec<Value> = (0..30)
        .map(|step| {
            let mut row = json!({ "_step": step, "train/reward_mean": step as f64 / 30.0, "train/loss": 1.0 - step as f64 / 60.0 });
            if step % 5 == 0 {
                row["eval/percent_correct"] = json!(step as f64 / 100.0);
            }
            row
        })
        .collect();
    let reply = json!({ "data": { "project": {
        "runs": { "edges": [{ "node": {
            "name": "abc123", "displayName": format!("run-{short}"), "state": "running",
            "summaryMetrics": r#"{"_step": 29}"#, "historyKeys": "{}" } }] },
        "run": { "sampledHistory": [rows] },
    } } });
    let wandb = crate::support::Receiver::start_with(vec![], reply.to_string()).await;
    let base = wandb.url.trim_end_matches("/hook").to_string();
    home.environ.extend([
        ("WANDB_API_KEY".to_string(), "wandb-test-key-0123456789".to_string()),
        ("WANDB_BASE_URL".to_string(), base),
        ("WANDB_ENTITY".to_string(), "lab".to_string()),
        ("LACHESIS_WANDB_INTERVAL".to_string(), "1s".to_string()),
    ]);
    let refused = home.cli(&["daemon", "--wandb-interval", "0s"]);
    let err = crate::support::stderr(&refused);
    assert!(!refused.status.success() && err.contains("--wandb-interval 0s is too short"), "{err}");
    let api = start(&mut home, "127.0.0.1", None).await;
    let service = home.service().await;
    wait_for("the W&B history to be stored while the run runs", Duration::from_secs(30), || {
        let service = service.clone();
        async move { (service.run_metric_rows(id).await.unwrap().len() == 30).then_some(()) }
    })
    .await;
    assert_eq!(home.run(id).await.state, lachesis::model::RunState::Running);

    // Stored by name: each metric with its count and last reading, and each one's series.
    let listed: Value = serde_json::from_str(&home.cli_ok(&["run", "metrics", short, "--json"])).unwrap();
    let metrics = listed["metrics"].as_array().unwrap_or_else(|| panic!("{listed:#}"));
    let counts: Vec<(&str, i64)> =
        metrics.iter().map(|m| (m["name"].as_str().unwrap(), m["count"].as_i64().unwrap())).collect();
    assert_eq!(counts, [("eval/percent_correct", 6), ("train/loss", 30), ("train/reward_mean", 30)]);
    let series: Value = serde_json::from_str(&home.cli_ok(&[
        "run",
        "metrics",
        short,
        "--name",
        "train/reward_mean",
        "--json",
    ]))
    .unwrap();
    assert_eq!(series["points"][10], json!({"attempt": 1, "step": 10, "value": 10.0 / 30.0}), "{series:#}");
    let table = home.cli_ok(&["run", "metrics", short]);
    assert!(
        table.contains("NAME") && table.contains("train/reward_mean") && table.contains("COUNT"),
        "{table}"
    );
    let (s, b) = api.get(&format!("/runs/{id}/metrics?name=eval/percent_correct")).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let points = b["points"].as_array().unwrap_or_else(|| panic!("{b:#}"));
    assert_eq!((points.len(), &points[2]), (6, &json!({"attempt": 1, "step": 10, "value": 0.1})), "{b:#}");
    let (s, b) = api.get(&format!("/runs/{id}/metrics")).await;
    assert_eq!((s, b["metrics"].as_array().map(Vec::len)), (StatusCode::OK, Some(3)), "{b:#}");

    let check = |b: &Value| {
        let history = b["history"].as_array().unwrap_or_else(|| panic!("no history: {b:#}"));
        assert_eq!(history.len(), 10, "about ten sampled rows: {b:#}");
        assert_eq!(history.first().unwrap()["step"], 0);
        assert_eq!(history.last().unwrap()["step"], 29, "the last row is always there");
        assert_eq!(b["metric_history"].as_array().map(Vec::len), Some(30));
    };
    let (s, b) = api.get(&format!("/runs/{id}/results")).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    check(&b);

    // W&B goes away: the stored history still answers, and the run goes on.
    drop(wandb);
    let (s, b) = api.get(&format!("/runs/{id}/results")).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    check(&b);
    assert!(b["metrics"]["wandb_error"].is_string(), "{b:#}");
    assert_eq!(home.run(id).await.state, lachesis::model::RunState::Running);
    assert!(!b.to_string().contains("wandb-test-key"), "the key never shows");
    assert!(!home.daemon_log().contains("wandb-test-key"), "nor in the daemon's log");
    home.cli_ok(&["run", "stop", short]);
    home.wait_settled(id, Duration::from_secs(20)).await;
}
