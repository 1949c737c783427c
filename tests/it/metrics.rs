//! Metrics by name: a stage's JSONL rows and log lines become named series that `run metrics`
//! shows, NaN and infinities dropped; a resumed attempt's readings replace the steps it read
//! again.

use std::time::Duration;

use lachesis::model::{MetricPoint, RunState};
use serde_json::Value;
use uuid::Uuid;

use crate::support::{TestHome, wait_for};

const T: Duration = Duration::from_secs(30);

/// Waits until `name`'s series of run `id` has `len` points (the worker records beside the
/// loop, so shortly after the exit that settled the run).
async fn series_of(home: &mut TestHome, id: Uuid, name: &'static str, len: usize) -> Vec<MetricPoint> {
    let service = home.service().await;
    wait_for(&format!("{len} readings of {name}"), T, || {
        let service = service.clone();
        async move {
            let series = service.run_metric_series(id, name).await.unwrap();
            (series.len() == len).then_some(series)
        }
    })
    .await
}

fn p(attempt: u32, step: i64, value: f64) -> MetricPoint {
    MetricPoint { attempt, step, value }
}

#[tokio::test]
async fn a_stage_jsonl_file_is_read_by_name_with_nan_and_infinities_dropped() {
    let mut home = TestHome::new();
    let script = home.path().join("trainer.sh");
    std::fs::write(
        &script,
        r#"mkdir -p "$1/logs"; f="$1/logs/m.jsonl"
echo '{"step": 0, "env/all/reward/total": 0.1, "loss": NaN}' >> "$f"
echo '{"step": 1, "env/all/reward/total": 0.2, "loss": 1.5}' >> "$f"
echo 'not json' >> "$f"
echo '{"step": 2, "env/all/reward/total": 0.3, "loss": Infinity, "optim": {"kl": 0.01}}' >> "$f"
"#,
    )
    .unwrap();
    home.workflow(
        "jsonl",
        &format!(
            "name: jsonl\nstages:\n  - name: trainer\n    argv: [sh, \"{}\", \"{{run_dir}}\"]\n\
             metrics:\n  jsonl: {{file: \"{{run_dir}}/logs/m.jsonl\", step: /step}}\n\
             report: [env/all/reward/total]\n",
            script.display()
        ),
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "jsonl"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    let reward = series_of(&mut home, id, "env/all/reward/total", 3).await;
    assert_eq!(reward, vec![p(1, 0, 0.1), p(1, 1, 0.2), p(1, 2, 0.3)]);
    assert_eq!(series_of(&mut home, id, "optim/kl", 1).await, vec![p(1, 2, 0.01)]);

    let short = id.to_string();
    let listed: Value = serde_json::from_str(&home.cli_ok(&["run", "metrics", &short, "--json"])).unwrap();
    let metrics = listed["metrics"].as_array().unwrap_or_else(|| panic!("{listed:#}"));
    let names: Vec<&str> = metrics.iter().filter_map(|m| m["name"].as_str()).collect();
    assert_eq!(names, ["env/all/reward/total", "loss", "optim/kl"], "{listed:#}");
    assert_eq!((metrics[0]["count"].as_i64(), metrics[0]["last"]["value"].as_f64()), (Some(3), Some(0.3)));
    // loss was NaN at step 0 and infinite at step 2: one reading is left.
    assert_eq!((metrics[1]["count"].as_i64(), metrics[1]["last"]["step"].as_i64()), (Some(1), Some(1)));
    let loss: Value =
        serde_json::from_str(&home.cli_ok(&["run", "metrics", &short, "--name", "loss", "--json"])).unwrap();
    assert_eq!(loss["points"], serde_json::json!([{"attempt": 1, "step": 1, "value": 1.5}]), "{loss:#}");
    let table = home.cli_ok(&["run", "metrics", &short]);
    assert!(
        table.contains("NAME") && table.contains("env/all/reward/total") && table.contains("0.3"),
        "{table}"
    );
    let table = home.cli_ok(&["run", "metrics", &short, "--name", "env/all/reward/total"]);
    assert!(table.contains("STEP") && table.contains("0.2"), "{table}");
    let none = home.cli_ok(&["run", "metrics", &short, "--name", "nothing"]);
    assert!(none.contains("no readings of 'nothing'"), "{none}");
    // The workflow's headline metric, by its name, where a run is shown.
    let headline = "env/all/reward/total 0.300 (step 2)";
    assert!(home.cli_ok(&["run", "status", &short]).contains(headline));
    let report: Value = serde_json::from_str(&home.cli_ok(&["report", "--json"])).unwrap();
    let row = report["runs"].as_array().and_then(|runs| runs.iter().find(|r| r["id"] == short));
    let metrics = row.map(|r| r["metrics"].clone());
    assert_eq!(metrics, Some(serde_json::json!([{"name": "env/all/reward/total", "step": 2, "value": 0.3}])));
    assert!(home.cli_ok(&["report"]).contains(headline));
    // The line that is not JSON: skipped, with one warning.
    assert_eq!(home.daemon_log().matches("metrics: skipped a line").count(), 1, "{}", home.daemon_log());
    home.kill_daemon();
}

#[tokio::test]
async fn a_log_pattern_gives_each_named_group_but_the_step() {
    let mut home = TestHome::new();
    home.workflow(
        "logged",
        r#"name: logged
stages:
  - name: trainer
    argv: [sh, -c, "echo 'step 1 loss=0.5 reward=nan'; echo 'other line'; echo 'step 2 loss=0.25 reward=3'"]
metrics:
  log: {stage: trainer, pattern: 'step (?P<step>\d+) loss=(?P<loss>\S+) reward=(?P<reward>\S+)'}
"#,
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "logged"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    assert_eq!(series_of(&mut home, id, "loss", 2).await, vec![p(1, 1, 0.5), p(1, 2, 0.25)]);
    assert_eq!(series_of(&mut home, id, "reward", 1).await, vec![p(1, 2, 3.0)], "NaN is dropped");
    let service = home.service().await;
    assert_eq!(service.run_metric_names(id).await.unwrap(), ["loss", "reward"]);
    home.kill_daemon();
}

#[tokio::test]
async fn a_stage_that_fails_during_start_up_has_its_metrics_read() {
    let mut home = TestHome::new();
    // The stage fails within its start delay: the run fails without reaching `running`.
    home.workflow(
        "quick",
        r#"name: quick
stages:
  - name: trainer
    argv: [sh, -c, "echo 'step 1 loss=0.5'; echo 'step 2 loss=0.25'; exit 1"]
    start_delay: 5s
metrics:
  log: {stage: trainer, pattern: 'step (?P<step>\d+) loss=(?P<loss>\S+)'}
"#,
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "quick"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Failed, "{:?}", run.reason);
    assert_eq!(series_of(&mut home, id, "loss", 2).await, vec![p(1, 1, 0.5), p(1, 2, 0.25)]);
    home.kill_daemon();
}

#[tokio::test]
async fn a_retried_attempt_replaces_the_steps_it_reads_again() {
    let mut home = TestHome::new();
    // The first attempt logs steps 0-5 and fails transiently; the second goes back to step 3
    // (as a resume from a checkpoint would), appending to the same file, and ends at step 4.
    let script = home.path().join("trainer.sh");
    std::fs::write(
        &script,
        r#"f="$1/m.jsonl"
if [ ! -f "$1/first" ]; then
  touch "$1/first"
  for i in 0 1 2 3 4 5; do echo "{\"step\": $i, \"loss\": $i}" >> "$f"; done
  exit 75
fi
for i in 3 4; do echo "{\"step\": $i, \"loss\": 1$i}" >> "$f"; done
"#,
    )
    .unwrap();
    home.workflow(
        "again",
        &format!(
            "name: again\nstages:\n  - name: trainer\n    argv: [sh, \"{}\", \"{{run_dir}}\"]\n\
             metrics:\n  jsonl: {{file: m.jsonl, step: /step}}\n\
             retry: {{max_attempts: 2, backoff: 100ms, retry_on_exit_codes: [75]}}\n",
            script.display()
        ),
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "again"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!((run.state, run.attempt), (RunState::Completed, 2), "{:?}", run.reason);
    // Steps 0-2 are the first attempt's; 3 and 4 the second's; 5, which the second rewound
    // over, is no longer the run's history. The first attempt's lines were not read again as
    // the second's.
    let loss = series_of(&mut home, id, "loss", 5).await;
    assert_eq!(loss, vec![p(1, 0, 0.0), p(1, 1, 1.0), p(1, 2, 2.0), p(2, 3, 13.0), p(2, 4, 14.0)]);
    let listed: Value =
        serde_json::from_str(&home.cli_ok(&["run", "metrics", &id.to_string(), "--json"])).unwrap();
    let loss = &listed["metrics"][0];
    assert_eq!(
        (loss["count"].as_i64(), &loss["last"]),
        (Some(8), &serde_json::json!({"attempt": 2, "step": 4, "value": 14.0})),
        "{listed:#}"
    );
    home.kill_daemon();
}

#[tokio::test]
async fn a_daemon_killed_mid_run_reads_on_and_records_each_reading_once() {
    let mut home = TestHome::new();
    // Twelve rows a tenth of a second apart; the daemon dies after the third is recorded.
    let script = home.path().join("trainer.sh");
    let body = r#"i=0; while [ $i -lt 12 ]; do echo "{\"step\": $i, \"loss\": $i}" >> "$1/m.jsonl"; i=$((i+1)); sleep 0.1; done
"#;
    std::fs::write(&script, body).unwrap();
    home.workflow(
        "slow",
        &format!(
            "name: slow\nstages:\n  - name: trainer\n    argv: [sh, \"{}\", \"{{run_dir}}\"]\n\
             metrics:\n  jsonl: {{file: m.jsonl, step: /step}}\n",
            script.display()
        ),
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "slow"]);
    let service = home.service().await;
    wait_for("three readings", T, || {
        let service = service.clone();
        async move { (service.run_metric_series(id, "loss").await.unwrap().len() >= 3).then_some(()) }
    })
    .await;
    home.kill_daemon();
    // The next daemon re-attaches, reads the file again from the attempt's start and records
    // only what was new: one reading per step, all of the first attempt.
    home.start_daemon();
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    let loss = series_of(&mut home, id, "loss", 12).await;
    assert_eq!(loss, (0..12).map(|s| p(1, s, s as f64)).collect::<Vec<_>>());
    let listed: Value =
        serde_json::from_str(&home.cli_ok(&["run", "metrics", &id.to_string(), "--json"])).unwrap();
    assert_eq!(listed["metrics"][0]["count"], 12, "{listed:#}");
    home.kill_daemon();
}
