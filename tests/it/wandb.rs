//! W&B identity: every stage gets a `WANDB_RUN_ID` stable for (run, stage) and
//! `WANDB_RESUME=allow`, so a retried run keeps logging into the same W&B runs.

use std::time::Duration;

use lachesis::model::RunState;
use uuid::Uuid;

use crate::support::TestHome;

const T: Duration = Duration::from_secs(30);

/// Two stages that print their W&B identity; the trainer exits 75, which the retry policy
/// calls transient, so the run gets a second attempt. `own` is the trainer's extra env.
fn printing(name: &str, own: &str) -> String {
    format!(
        r#"name: {name}
stages:
  - name: api
    argv: [sh, -c, 'echo "id=$WANDB_RUN_ID resume=$WANDB_RESUME"; sleep 600']
    start_delay: 100ms
  - name: trainer
    argv: [sh, -c, 'echo "id=$WANDB_RUN_ID resume=$WANDB_RESUME"; exit 75']
    env: {{{own}}}
completion: {{stages: [trainer]}}
retry: {{max_attempts: 2, backoff: 100ms, retry_on_exit_codes: [75]}}
stop_grace: 2s
"#
    )
}

/// The identity lines a stage printed, one per attempt.
fn printed(run_dir: &std::path::Path, stage: &str) -> Vec<String> {
    let log = std::fs::read_to_string(run_dir.join(format!("{stage}.log"))).unwrap_or_default();
    log.lines().filter(|l| l.starts_with("id=")).map(str::to_string).collect()
}

fn short(id: Uuid) -> String {
    id.simple().to_string()[..8].to_string()
}

#[tokio::test]
async fn every_attempt_of_a_stage_logs_into_one_wandb_run_and_the_status_links_it() {
    let mut home = TestHome::new();
    home.environ = vec![("WANDB_ENTITY".into(), "team".into()), ("WANDB_BASE_URL".into(), String::new())];
    home.workflow("wb", &printing("wb", ""));
    home.workflow("own", &printing("own", "WANDB_RUN_ID: 'mine-{run_id}'"));
    home.start_daemon();
    let id = home.submit(&["--workflow", "wb"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!((run.state, run.attempt), (RunState::Failed, 2), "{:?}", run.reason);
    let trainer = format!("id={}-trainer resume=allow", short(id));
    assert_eq!(printed(&run.run_dir, "trainer"), vec![trainer.clone(), trainer], "both attempts, one id");
    let api = printed(&run.run_dir, "api");
    assert_eq!(api.first().map(String::as_str), Some(format!("id={}-api resume=allow", short(id)).as_str()));

    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &id.to_string(), "--json"])).unwrap();
    let trainer_run = &status["wandb_runs"][1];
    assert_eq!(trainer_run["stage"], "trainer", "{status:#}");
    assert_eq!(trainer_run["id"], format!("{}-trainer", short(id)));
    assert_eq!(
        trainer_run["url"],
        format!("https://wandb.ai/team/atropos-tinker/runs/{}-trainer", short(id)),
        "{status:#}"
    );
    // The HTTP run resource carries the same list (served in-process here, where WANDB_ENTITY is
    // not set: ids, no page).
    let app = lachesis::api::app(home.service().await, Default::default(), None);
    let request = axum::http::Request::get(format!("/runs/{id}")).body(axum::body::Body::empty()).unwrap();
    let response = tower::ServiceExt::oneshot(app, request).await.unwrap();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let resource: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let ids = |v: &serde_json::Value| {
        v["wandb_runs"].as_array().map(|a| a.iter().map(|r| r["id"].clone()).collect::<Vec<_>>())
    };
    assert_eq!(ids(&resource), ids(&status), "{resource:#}");
    let text = home.cli_ok(&["run", "status", &id.to_string()]);
    assert!(text.contains(&format!("wandb     trainer {}-trainer  https://wandb.ai/", short(id))), "{text}");

    // Another run gets other ids; a workflow's own WANDB_RUN_ID wins.
    let other = home.submit(&["--workflow", "own"]);
    let (other_run, _) = home.wait_settled(other, T).await;
    let mine = format!("id=mine-{other} resume=allow");
    assert_eq!(printed(&other_run.run_dir, "trainer"), vec![mine.clone(), mine]);
    let other_api = printed(&other_run.run_dir, "api");
    assert_eq!(other_api.first().cloned(), Some(format!("id={}-api resume=allow", short(other))));
    assert_ne!(short(id), short(other));
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &other.to_string(), "--json"])).unwrap();
    assert_eq!(status["wandb_runs"][1]["id"], format!("mine-{other}"), "{status:#}");
    home.kill_daemon();
}
