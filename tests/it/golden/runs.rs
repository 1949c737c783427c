//! Runs and what they leave, as each command shows them: a completed run (its progress, metrics
//! and checkpoint), a failed one and a held one; the report, the webhook deliveries of their
//! ends and the daemon; and the dashboard's pages of them.

use crate::golden::{Redactions, home, json, pin, pin_json, pin_text, run_ends, until};
use crate::support::{Receiver, TestHome};

/// A trainer that logs a loss per step, saves one checkpoint and says it reached step 2 of 2
/// (once: a rate of steps would depend on the machine's speed), then exits with the code it is
/// given; given another code than 0 it exits right after the checkpoint (a failed run's last
/// step, read from its log as it ends, would otherwise be there or not by timing).
const TRAINER: &str = r#"#!/bin/sh
metrics="$1/metrics.jsonl"
echo '{"step": 1, "loss": 0.5}' >> "$metrics"
echo "saved step 1 to ckpt-1"
[ "$2" = 0 ] || exit "$2"
echo "Step 2/2"
echo '{"step": 2, "loss": 0.25}' >> "$metrics"
exit "$2"
"#;

const WORKFLOW: &str = r#"name: golden
description: One stage that counts two steps, logs a loss and saves a checkpoint
vars: {code: "0"}
stages:
  - name: trainer
    argv: [sh, "{workflow_dir}/trainer.sh", "{run_dir}", "{code}"]
progress:
  log: {stage: trainer, pattern: 'Step (?P<step>\d+)/(?P<total>\d+)'}
metrics:
  jsonl: {file: "{run_dir}/metrics.jsonl", step: /step}
checkpoints:
  log: {stage: trainer, pattern: 'saved step (?P<step>\d+) to (?P<path>\S+)'}
stop_grace: 2s
"#;

pub const TOKEN: &str = "golden-dashboard-token";

/// A home with the workflow, a daemon serving the API on TCP (the dashboard) and posting run
/// ends to a receiver; a completed, a failed and a held run.
struct Scene {
    home: TestHome,
    redactions: Redactions,
    api: crate::http::Api,
    completed: String,
    failed: String,
    _receiver: Receiver,
}

async fn scene() -> Scene {
    let mut home = home();
    home.workflow("golden", WORKFLOW);
    std::fs::write(home.workflows().join("trainer.sh"), TRAINER).unwrap();
    let receiver = Receiver::start(vec![]).await;
    home.environ.push(("LACHESIS_WEBHOOKS".into(), receiver.url.clone()));
    let mut redactions = Redactions::new(home.path());
    let api = crate::http::start_with(&mut home, "127.0.0.1", Some(TOKEN), &[]).await;
    let submit = |args: &[&str]| {
        let mut all = vec!["run", "start", "-w", "golden"];
        all.extend_from_slice(args);
        home.cli_ok(&all).trim().to_string()
    };
    let completed = submit(&[]);
    run_ends(&home, &completed, "completed").await;
    let failed = submit(&["--var", "code=3"]);
    run_ends(&home, &failed, "failed").await;
    let held = submit(&["--hold", "--priority", "5"]);
    for (id, role) in [(&completed, "completed"), (&failed, "failed"), (&held, "held")] {
        redactions.id(id, role);
    }
    until("the completed run's two losses and its checkpoint", || {
        let metrics = json(&home, &["run", "metrics", &completed]);
        let checkpoints = json(&home, &["run", "checkpoints", &completed]);
        metrics.to_string().matches("0.25").count() >= 1
            && checkpoints.as_array().is_some_and(|c| c.len() == 1)
    })
    .await;
    until("both ends delivered", || {
        let page = json(&home, &["webhooks"]);
        let deliveries = page["deliveries"].as_array().cloned().unwrap_or_default();
        deliveries.len() == 2 && deliveries.iter().all(|d| d["state"] == "delivered")
    })
    .await;
    for delivery in json(&home, &["webhooks"])["deliveries"].as_array().unwrap() {
        let role = format!("delivery-{}", delivery["event"].as_str().unwrap());
        redactions.id(delivery["id"].as_str().unwrap(), &role);
    }
    if let Some(pid) = home.daemon_pid() {
        redactions.value(pid, "[daemon-pid]");
    }
    for id in [&completed, &failed] {
        for stage in json(&home, &["run", "status", id])["stages"].as_array().unwrap() {
            for process in ["process", "shim"] {
                if let Some(pid) = stage[process]["pid"].as_i64() {
                    redactions.value(pid, &format!("[{process}-pid]"));
                }
            }
        }
    }
    Scene { home, redactions, api, completed, failed, _receiver: receiver }
}

#[tokio::test]
async fn runs_reports_deliveries_and_the_daemon_as_each_command_shows_them() {
    let Scene { home, redactions, api, completed, failed, _receiver } = scene().await;
    let r = &redactions;
    pin_text(&home, r, "run_list", &["run", "list"]);
    pin_json(&home, r, "run_list_json", &["run", "list"]);
    pin_text(&home, r, "run_status_completed", &["run", "status", &completed]);
    pin_json(&home, r, "run_status_completed_json", &["run", "status", &completed]);
    pin_text(&home, r, "run_status_failed", &["run", "status", &failed]);
    pin_text(&home, r, "run_metrics", &["run", "metrics", &completed]);
    pin_json(&home, r, "run_metrics_json", &["run", "metrics", &completed]);
    pin_text(&home, r, "run_checkpoints", &["run", "checkpoints", &completed]);
    pin_json(&home, r, "run_checkpoints_json", &["run", "checkpoints", &completed]);
    pin_text(&home, r, "report", &["report"]);
    pin_json(&home, r, "report_json", &["report"]);
    pin_text(&home, r, "webhooks", &["webhooks"]);
    pin_json(&home, r, "webhooks_json", &["webhooks"]);
    pin_text(&home, r, "daemon_status", &["daemon", "status"]);
    pin_json(&home, r, "daemon_status_json", &["daemon", "status"]);

    for (name, path) in [
        ("ui_runs", "/ui/runs".to_string()),
        ("ui_run", format!("/ui/runs/{completed}")),
        ("ui_report", "/ui/report".to_string()),
        ("ui_environments", "/ui/environments".to_string()),
    ] {
        let page = crate::golden::dashboard::page(&api, &path).await;
        pin(name, &r.words(&page));
    }
}
