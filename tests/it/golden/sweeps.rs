//! Sweeps as `sweep list`, `sweep status` and the dashboard show them: one done with its
//! winner, one stopped by its user, one live (its members held); the list's REASON says why
//! each ended, and nothing for the live one.

use crate::golden::{Redactions, home, json, pin, pin_json, pin_text, until};
use crate::support::TestHome;

/// A member: logs its `lr` as its loss at steps 1 and 2 (so the lowest lr wins).
const MEMBER: &str = r#"#!/bin/sh
echo "{\"step\": 1, \"loss\": $2}" >> "$1/metrics.jsonl"
echo "{\"step\": 2, \"loss\": $2}" >> "$1/metrics.jsonl"
"#;

const WORKFLOW: &str = r#"name: tune
description: A member that reports its learning rate as its loss
vars: {lr: "0.1"}
stages:
  - name: trainer
    argv: [sh, "{workflow_dir}/member.sh", "{run_dir}", "{lr}"]
metrics:
  jsonl: {file: "{run_dir}/metrics.jsonl", step: /step}
stop_grace: 2s
"#;

const GRID: &str = "method: grid\nworkflow: tune\nmetric: {name: loss, goal: minimize}\nparameters:\n  lr: {values: [0.1, 0.2]}\n";

/// Starts the sweep in `file` (held or not), naming it and its members for the redactions.
fn start(home: &TestHome, redactions: &mut Redactions, file: &str, role: &str, hold: bool) -> String {
    let path = home.path().join(format!("{role}.yaml"));
    std::fs::write(&path, file).unwrap();
    let path = path.display().to_string();
    let mut args = vec!["sweep", "start", path.as_str()];
    if hold {
        args.push("--hold");
    }
    let started = json(home, &args);
    let id = started["id"].as_str().unwrap().to_string();
    redactions.id(&id, &format!("sweep-{role}"));
    for (k, member) in started["members"].as_array().unwrap().iter().enumerate() {
        redactions.id(member.as_str().unwrap(), &format!("{role}-{k}"));
    }
    id
}

#[tokio::test]
async fn sweeps_as_the_list_the_leaderboard_and_the_dashboard_show_them() {
    let mut home = home();
    home.workflow("tune", WORKFLOW);
    std::fs::write(home.workflows().join("member.sh"), MEMBER).unwrap();
    let mut redactions = Redactions::new(home.path());
    // Stopped before any daemon could claim a member.
    let stopped = start(&home, &mut redactions, GRID, "stopped", true);
    home.cli_ok(&["sweep", "stop", &stopped]);
    // Sweeps with no member in flight are ended every tenth pass: every 2 s here, not 30.
    let passes = ["--sweep-interval", "200ms"];
    let api =
        crate::http::start_with(&mut home, "127.0.0.1", Some(crate::golden::runs::TOKEN), &passes).await;
    let done = start(&home, &mut redactions, GRID, "done", false);
    until("both sweeps to be done", || {
        [&done, &stopped].iter().all(|id| json(&home, &["sweep", "status", id])["state"] == "done")
    })
    .await;
    let live = start(&home, &mut redactions, GRID, "live", true);
    let r = &redactions;
    pin_text(&home, r, "sweep_list", &["sweep", "list"]);
    pin_json(&home, r, "sweep_list_json", &["sweep", "list"]);
    pin_text(&home, r, "sweep_status_done", &["sweep", "status", &done]);
    pin_json(&home, r, "sweep_status_done_json", &["sweep", "status", &done]);
    pin_text(&home, r, "sweep_status_stopped", &["sweep", "status", &stopped]);
    pin_text(&home, r, "sweep_status_live", &["sweep", "status", &live]);
    for (name, path) in [("ui_sweeps", "/ui/sweeps".to_string()), ("ui_sweep", format!("/ui/sweeps/{done}"))]
    {
        let page = crate::golden::dashboard::page(&api, &path).await;
        pin(name, &r.words(&page));
    }
}

/// A pbt member: its readings and checkpoints come from the test (no daemon runs it).
const CLIMB: &str = r#"name: climb
description: A pbt member whose readings and checkpoints the test records
vars: {lr: "1"}
stages:
  - name: trainer
    argv: [sh, -c, "echo {lr}"]
    resume_args: [--from, "{resume.path}"]
metrics:
  jsonl: {file: "{run_dir}/metrics.jsonl", step: /step}
checkpoints:
  jsonl: {file: "{run_dir}/checkpoints.jsonl", step: /step, path: /path}
"#;

const PBT: &str = "method: pbt\nworkflow: climb\nmetric: {name: reward, goal: maximize}\nrun_cap: 4\nseed: 2\n\
                   perturbation_interval: 10\nparameters:\n  lr: {distribution: log_uniform_values, min: 0.001, max: 0.1}\n";

/// Four members running, each with readings to step 10 (member k's reward is k + 1 times the
/// step) and a checkpoint there; one decider pass exploits member 0 from member 3, its stop
/// lands, the next pass queues it again from member 3's checkpoint: `sweep status` then.
#[tokio::test]
async fn a_pbt_sweeps_exploits_as_sweep_status_shows_them() {
    use lachesis::model::{FoundCheckpoint, MetricReading, RunTrigger, now_millis};
    use lachesis::service::SweepDecider;

    let mut home = home();
    home.workflow("climb", CLIMB);
    let mut redactions = Redactions::new(home.path());
    let id = start(&home, &mut redactions, PBT, "pbt", false);
    let service = home.service().await;
    let mut members = service.sweep_status(&id).await.unwrap().leaderboard;
    members.sort_by_key(|m| m.k);
    for member in &members {
        let run = home.run(member.run).await;
        let claimed = service.move_run(&run, RunTrigger::Claim, None).await.unwrap();
        service.move_run(&claimed, RunTrigger::AllStagesUp, None).await.unwrap();
        let readings: Vec<MetricReading> = [5, 10]
            .iter()
            .map(|step| MetricReading::new("reward", *step, ((member.k + 1) * *step as u64) as f64).unwrap())
            .collect();
        service.put_metric_values_as_given(member.run, 1, &readings, now_millis()).await.unwrap();
        let found = FoundCheckpoint {
            step: 10,
            path: Some(format!("state-{}-10", member.k)),
            weights: None,
            key: format!("line-{}", member.k),
        };
        service.record_checkpoint_as_given(member.run, 1, &found, now_millis()).await.unwrap();
    }
    let mut decider = SweepDecider::default();
    decider.pass(&service, &service).await.unwrap();
    let loser = home.run(members[0].run).await;
    assert_eq!(loser.state, lachesis::model::RunState::Stopping, "{:?}", loser.reason);
    pin_text(&home, &redactions, "sweep_status_pbt_stopping", &["sweep", "status", &id]);
    service.move_run(&loser, RunTrigger::AllStagesGone, None).await.unwrap();
    decider.pass(&service, &service).await.unwrap();
    assert_eq!(home.run(members[0].run).await.attempt, 2);
    pin_text(&home, &redactions, "sweep_status_pbt", &["sweep", "status", &id]);
    pin_json(&home, &redactions, "sweep_status_pbt_json", &["sweep", "status", &id]);
}
