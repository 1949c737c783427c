//! Progress, the stall watchdog and true outcomes: the step read from a log or from run-api's
//! `/status`, recorded per change, and runs that stop moving or stop short failing.

use std::time::Duration;

use lachesis::model::{Exit, RunState};

use crate::atropos::{atropos, atropos_home, training_workflow, vars};
use crate::support::{TestHome, assert_no_stage_alive, processes_mentioning, wait_for};

const T: Duration = Duration::from_secs(30);

/// A trainer that prints `Step i/N` for `steps` steps, then sleeps (`hang`) or exits 0.
fn stepping(name: &str, steps: u32, of: u32, then: &str, extra: &str) -> String {
    format!(
        r#"name: {name}
stages:
  - name: api
    argv: [sleep, "600"]
    start_delay: 100ms
  - name: trainer
    argv: [sh, -c, "i=1; while [ $i -le {steps} ]; do echo Step $i/{of}; i=$((i+1)); sleep 0.2; done; {then}"]
completion: {{stages: [trainer]}}
progress:
  log: {{stage: trainer, pattern: 'Step (?P<step>\d+)/(?P<total>\d+)'}}
stop_grace: 2s
{extra}"#
    )
}

fn no_process_left(home: &TestHome) {
    let left = processes_mentioning(home.path());
    assert!(left.is_empty(), "processes left: {left:?}");
}

#[tokio::test]
async fn the_demo_reports_its_log_progress_to_five_of_five() {
    let mut home = TestHome::new();
    home.start_daemon();
    let id = home.submit(&["--workflow", "demo"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &id.to_string(), "--json"])).unwrap();
    let progress = &status["progress"];
    assert_eq!((progress["step"].as_i64(), progress["total"].as_i64()), (Some(5), Some(5)), "{status:#}");
    assert_eq!(progress["fraction"].as_f64(), Some(1.0));
    let text = home.cli_ok(&["run", "status", &id.to_string()]);
    assert!(text.contains("progress  step 5 / 5 (100.0%)"), "{text}");
    let list = home.cli_ok(&["run", "list"]);
    assert!(list.contains("STEP") && list.contains("5/5"), "{list}");
    // One row per change of step, climbing.
    let series = home.service().await.run_progress_in(id, 1).await.unwrap();
    let steps: Vec<i64> = series.iter().map(|p| p.step).collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]) && steps.last() == Some(&5), "{series:?}");
}

#[tokio::test]
async fn a_trainer_exiting_0_short_of_the_total_fails_the_run() {
    let mut home = TestHome::new();
    home.workflow(
        "early",
        &stepping("early", 3, 10, "echo Training complete!", "").replace(
            "completion: {stages: [trainer]}",
            "completion: {stages: [trainer], require_total: true}",
        ),
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "early"]);
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Failed);
    assert_eq!(run.reason.as_deref(), Some("stage 'trainer' exited 0 at step 3 of 10"));
    assert_eq!(stages[1].record.exit, Some(Exit::Code(0)));
    assert_no_stage_alive(&stages);
}

#[tokio::test]
async fn a_trainer_reaching_its_total_completes_with_require_total() {
    let mut home = TestHome::new();
    home.workflow(
        "full",
        &stepping("full", 4, 4, "true", "").replace(
            "completion: {stages: [trainer]}",
            "completion: {stages: [trainer], require_total: true}",
        ),
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "full"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
}

#[tokio::test]
async fn a_run_whose_step_stops_moving_fails_stalled_and_the_webhook_says_so() {
    let hook = crate::support::Receiver::start(vec![]).await;
    let mut home = TestHome::new();
    home.environ = vec![("LACHESIS_WEBHOOKS".into(), hook.url.clone())];
    home.workflow("stuck", &stepping("stuck", 2, 10, "sleep 600", ""));
    home.start_daemon();
    let id = home.submit(&["--workflow", "stuck", "--stall-timeout", "2s"]);
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Failed);
    assert_eq!(run.reason.as_deref(), Some("stalled: no progress for 2s (at step 2 of 10)"));
    let last = home.service().await.run_progress_in(id, 1).await.unwrap().pop().unwrap();
    let late = run.ended_at.unwrap() - (last.at + 2000);
    assert!((0..1000).contains(&late), "failed {late} ms after the stall deadline");
    assert_no_stage_alive(&stages);
    let body = wait_for("the run_failed webhook", T, || {
        let got = hook.of_kind("run_failed");
        async move { got.into_iter().next() }
    })
    .await;
    assert_eq!(body["summary"]["reason"], "stalled: no progress for 2s (at step 2 of 10)");
    let events = home.messages(id).await;
    assert!(events.iter().any(|e| e == "fail: stalled: no progress for 2s (at step 2 of 10)"), "{events:#?}");
    home.kill_daemon();
    no_process_left(&home);
}

#[tokio::test]
async fn a_run_that_never_reports_a_step_stalls_from_reaching_running() {
    let mut home = TestHome::new();
    home.workflow("silent", &stepping("silent", 0, 10, "sleep 600", "stall_timeout: 2s\n"));
    home.start_daemon();
    let id = home.submit(&["--workflow", "silent"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.reason.as_deref(), Some("stalled: no progress for 2s (no step reported yet)"));
}

#[tokio::test]
async fn retry_on_stall_runs_a_second_attempt() {
    let mut home = TestHome::new();
    let retry = "stall_timeout: 2s\nretry: {max_attempts: 2, backoff: 100ms, retry_on_stall: true}\n";
    home.workflow("again", &stepping("again", 1, 10, "sleep 600", retry));
    home.start_daemon();
    let id = home.submit(&["--workflow", "again"]);
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!((run.state, run.attempt), (RunState::Failed, 2), "{:?}", run.reason);
    assert_eq!(run.reason.as_deref(), Some("stalled: no progress for 2s (at step 1 of 10)"));
    let events = home.messages(id).await;
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("retry: stalled: no progress for 2s (at step 1 of 10) (transient")),
        "{events:#?}"
    );
    assert_no_stage_alive(&stages);
}

#[tokio::test]
async fn the_stall_clock_survives_a_daemon_crash() {
    let mut home = TestHome::new();
    home.workflow("crash", &stepping("crash", 1, 10, "sleep 600", "stall_timeout: 4s\n"));
    home.start_daemon();
    let id = home.submit(&["--workflow", "crash"]);
    let service = home.service().await;
    let first = wait_for("the first step to be recorded", T, || {
        let service = service.clone();
        async move { service.run_progress_in(id, 1).await.unwrap().pop() }
    })
    .await;
    home.kill_daemon();
    // Down for a while: a clock restarted by the new daemon would fail the run 4 s after it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    home.start_daemon();
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.reason.as_deref(), Some("stalled: no progress for 4s (at step 1 of 10)"));
    let late = run.ended_at.unwrap() - (first.at + 4000);
    assert!((0..1000).contains(&late), "failed {late} ms after the original deadline");
    let series = service.run_progress_in(id, 1).await.unwrap();
    assert_eq!(series.len(), 1, "the re-attached run carried on from its step: {series:?}");
    assert_no_stage_alive(&stages);
}

/// run-api, the stand-in trainer and the real environment in `serve` mode, with `progress`
/// read from run-api's `/status`.
fn atropos_progress(name: &str, extra: &str) -> String {
    let workflow = training_workflow(name).replace(
        "completion: {stages: [trainer, env]}",
        "completion: {stages: [trainer, env], require_total: true}",
    );
    format!(
        "{workflow}\nprogress:\n  http: \"http://127.0.0.1:{{port.api}}/status\"\n  step: /current_step\n  total: \"{{config.env.total_steps}}\"\n  every: 200ms\n{extra}"
    )
}

#[tokio::test]
async fn run_api_status_steps_climb_to_the_total_and_the_run_completes() {
    let Some((python, tokenizer)) = atropos() else { return };
    let mut home = atropos_home(&python);
    home.cli_ok(&["env", "select", "arith"]);
    home.workflow("atropos-progress", &atropos_progress("atropos-progress", ""));
    let mut args = vec!["--workflow".to_string(), "atropos-progress".to_string()];
    args.extend(vars(&python, &tokenizer));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    home.start_daemon();
    let id = home.submit(&args);
    let (run, stages) = home.wait_settled(id, Duration::from_secs(180)).await;
    let series = home.service().await.run_progress_in(id, 1).await.unwrap();
    assert_eq!(run.state, RunState::Completed, "{:?} {series:?}\n{}", run.reason, home.daemon_log());
    let steps: Vec<i64> = series.iter().map(|p| p.step).collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{series:?}");
    // run-api counts the batches handed out; several may go in one pull.
    let last = series.last().expect("steps were recorded");
    assert!(last.total == Some(2) && last.step >= 2, "{series:?}");
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &id.to_string(), "--json"])).unwrap();
    assert_eq!(status["progress"]["step"].as_i64(), Some(last.step), "{status:#}");
    assert_no_stage_alive(&stages);
}

#[tokio::test]
async fn hung_inference_stalls_the_real_loop_and_leaves_nothing_running() {
    let Some((python, tokenizer)) = atropos() else { return };
    let mut home = atropos_home(&python);
    home.environ.push(("STAND_IN_TRAINER_HANG_MODEL".into(), "*".into()));
    home.cli_ok(&["env", "select", "arith"]);
    home.workflow("atropos-hung", &atropos_progress("atropos-hung", "stall_timeout: 20s\n"));
    let mut args = vec!["--workflow".to_string(), "atropos-hung".to_string()];
    args.extend(vars(&python, &tokenizer));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    home.start_daemon();
    let id = home.submit(&args);
    let (run, stages) = home.wait_settled(id, Duration::from_secs(180)).await;
    assert_eq!(run.state, RunState::Failed);
    assert_eq!(run.reason.as_deref(), Some("stalled: no progress for 20s (at step 0 of 2)"));
    let running = home.service().await.run_running_since(id).await.unwrap().unwrap();
    let late = run.ended_at.unwrap() - (running + 20_000);
    assert!((0..3000).contains(&late), "failed {late} ms after the stall deadline");
    assert_no_stage_alive(&stages);
    home.kill_daemon();
    no_process_left(&home);
}

#[tokio::test]
async fn hung_inference_with_retry_on_stall_runs_a_second_attempt() {
    let Some((python, tokenizer)) = atropos() else { return };
    let mut home = atropos_home(&python);
    home.environ.push(("STAND_IN_TRAINER_HANG_MODEL".into(), "*".into()));
    home.cli_ok(&["env", "select", "arith"]);
    let retry = "stall_timeout: 8s\nretry: {max_attempts: 2, backoff: 100ms, retry_on_stall: true}\n";
    home.workflow("atropos-retry", &atropos_progress("atropos-retry", retry));
    let mut args = vec!["--workflow".to_string(), "atropos-retry".to_string()];
    args.extend(vars(&python, &tokenizer));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    home.start_daemon();
    let id = home.submit(&args);
    let (run, stages) = home.wait_settled(id, Duration::from_secs(240)).await;
    assert_eq!((run.state, run.attempt), (RunState::Failed, 2), "{:?}", run.reason);
    assert_eq!(run.reason.as_deref(), Some("stalled: no progress for 8s (at step 0 of 2)"));
    let events = home.messages(id).await;
    assert!(events.iter().any(|e| e.starts_with("retry: stalled: no progress for 8s")), "{events:#?}");
    assert_no_stage_alive(&stages);
    home.kill_daemon();
    no_process_left(&home);
}

/// A trainer that logs its metrics to `{run_dir}/logs/metrics.jsonl` (as tinker-cookbook does):
/// the file appears late, a line is written in two pieces, and two lines are not JSON.
const JSONL_TRAINER: &str = r#"set -e
sleep 0.5
mkdir -p "$1/logs"
f="$1/logs/metrics.jsonl"
echo 'not json at all' >> "$f"
echo '{"step": 0, "n": 5}' >> "$f"
for i in 1 2 3 4; do
  printf '{"step": %d, "n"' "$i" >> "$f"; sleep 0.2; printf ': 5, "loss": 0.1}\n' >> "$f"
done
echo '{"step": 5, "n": oops' >> "$f"
echo '{"step": 5, "n": 5}' >> "$f"
"#;

#[tokio::test]
async fn a_jsonl_metrics_file_reports_progress_to_its_total() {
    let mut home = TestHome::new();
    let script = home.path().join("trainer.sh");
    std::fs::write(&script, JSONL_TRAINER).unwrap();
    home.workflow(
        "jsonl",
        &format!(
            r#"name: jsonl
stages:
  - name: trainer
    argv: [sh, "{}", "{{run_dir}}"]
completion: {{stages: [trainer], require_total: true}}
progress:
  jsonl: {{file: "{{run_dir}}/logs/metrics.jsonl", step: /step, total: /n}}
"#,
            script.display()
        ),
    );
    home.workflow(
        "outside",
        "name: outside\nstages:\n  - {name: t, argv: [true]}\nprogress: {jsonl: {file: '{run_dir}/../m.jsonl', step: /step}}\n",
    );
    let refused = home.cli(&["run", "start", "--workflow", "outside"]);
    assert!(!refused.status.success());
    let err = crate::support::stderr(&refused);
    assert!(err.contains("progress.jsonl.file") && err.contains("inside the run directory"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    home.start_daemon();
    let id = home.submit(&["--workflow", "jsonl"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &id.to_string(), "--json"])).unwrap();
    let progress = &status["progress"];
    assert_eq!((progress["step"].as_i64(), progress["total"].as_i64()), (Some(5), Some(5)), "{status:#}");
    // Whole lines only: every recorded step is one the trainer wrote, climbing.
    let series = home.service().await.run_progress_in(id, 1).await.unwrap();
    let steps: Vec<i64> = series.iter().map(|p| p.step).collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]) && steps.last() == Some(&5), "{series:?}");
    assert!(series.iter().all(|p| p.total == Some(5)), "{series:?}");
    // Two lines that are not JSON: skipped, with one warning.
    let warnings = home.daemon_log().matches("that is not JSON").count();
    assert_eq!(warnings, 1, "{}", home.daemon_log());
    home.kill_daemon();
}

#[tokio::test]
async fn a_last_step_printed_just_before_exit_0_meets_require_total() {
    let mut home = TestHome::new();
    for (name, delay) in [("quick", ""), ("quick-start", "\n    start_delay: 5s")] {
        home.workflow(
            name,
            &format!(
                r#"name: {name}
stages:
  - name: trainer
    argv: [sh, -c, "printf 'step 10/10\n'"]{delay}
completion: {{stages: [trainer], require_total: true}}
progress:
  log: {{stage: trainer, pattern: 'step (?P<step>\d+)/(?P<total>\d+)'}}
"#
            ),
        );
    }
    home.start_daemon();
    for name in ["quick", "quick-start"] {
        let ids: Vec<_> = (0..4).map(|_| home.submit(&["--workflow", name])).collect();
        for id in ids {
            let (run, _) = home.wait_settled(id, T).await;
            assert_eq!(run.state, RunState::Completed, "{name}: {:?}", run.reason);
            let series = home.service().await.run_progress_in(id, 1).await.unwrap();
            assert_eq!(series.last().map(|p| (p.step, p.total)), Some((10, Some(10))), "{series:?}");
        }
    }
    home.kill_daemon();
}

#[tokio::test]
async fn a_failed_runs_last_step_printed_just_before_its_exit_is_recorded_before_its_end() {
    let mut home = TestHome::new();
    home.workflow("failing", &stepping("failing", 3, 10, "echo Step 4/10; exit 3", ""));
    home.start_daemon();
    let ids: Vec<_> = (0..4).map(|_| home.submit(&["--workflow", "failing"])).collect();
    for id in ids {
        let (run, _) = home.wait_settled(id, T).await;
        assert_eq!(run.state, RunState::Failed, "{:?}", run.reason);
        let series = home.service().await.run_progress_in(id, 1).await.unwrap();
        assert_eq!(series.last().map(|p| (p.step, p.total)), Some((4, Some(10))), "{series:?}");
    }
    home.kill_daemon();
}
