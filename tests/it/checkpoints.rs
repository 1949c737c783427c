//! Checkpoints and resume: a stand-in for a tinker-cookbook recipe writes the cookbook's
//! `checkpoints.jsonl` and `metrics.jsonl`, fails at step 7, and the next attempt continues
//! from its last checkpoint (step 6), not from 0.

use std::path::PathBuf;
use std::time::Duration;

use lachesis::model::RunState;
use uuid::Uuid;

use crate::support::{TestHome, wait_for};

const T: Duration = Duration::from_secs(60);

fn standin() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/cookbook_standin.sh")
}

/// The workflow around the stand-in; `failure` is how its first attempt fails at step 7.
fn cookbook(home: &TestHome, failure: &str, extra: &str) {
    home.workflow(
        "cookbook",
        &format!(
            r#"name: cookbook
stages:
  - name: trainer
    argv: [sh, "{}", "{{run_dir}}/log", {failure}]
    resume_args: ["load_checkpoint_path={{resume.path}}", "start={{resume.step}}"]
completion: {{stages: [trainer], require_total: true}}
progress:
  jsonl: {{file: "{{run_dir}}/log/metrics.jsonl", step: /step, total: 10}}
checkpoints:
  jsonl: {{file: "{{run_dir}}/log/checkpoints.jsonl", step: /batch, path: /state_path, weights: /sampler_path}}
{extra}"#,
            standin().display()
        ),
    );
}

const RETRY: &str = "retry: {max_attempts: 2, backoff: 100ms, retry_on_exit_codes: [75]}\n";

/// What each attempt of the stand-in was handed.
fn attempts(run: &lachesis::model::Run) -> Vec<String> {
    let file = run.run_dir.join("log/attempts.txt");
    std::fs::read_to_string(&file).map(|t| t.lines().map(str::to_string).collect()).unwrap_or_default()
}

/// The run ended completed at 10/10 on its second attempt, which started at step 6.
async fn resumed_at_six(home: &mut TestHome, id: Uuid) {
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}\n{}", run.reason, home.daemon_log());
    assert_eq!(run.attempt, 2);
    let lines = attempts(&run);
    let handed = lines.join("\n");
    assert_eq!(lines[0], "start=0 path= args=", "the first attempt starts from scratch, without resume_args");
    assert_eq!(
        lines[1],
        "start=6 path=tinker://standin/weights/000006 \
         args=load_checkpoint_path=tinker://standin/weights/000006 start=6",
        "{handed}"
    );
    let messages = home.messages(id).await;
    assert!(
        messages.iter().any(|m| m == "attempt 2 resumes from step 6 (tinker://standin/weights/000006)"),
        "{messages:#?}"
    );
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &id.to_string(), "--json"])).unwrap();
    assert_eq!(
        (status["progress"]["step"].as_i64(), status["progress"]["total"].as_i64()),
        (Some(10), Some(10))
    );
    assert_eq!(status["checkpoint"]["step"], 10, "{status:#}");
    // One series across the attempts, tagged by attempt: the first up to at most 7, the second
    // on from its restart at 6.
    let service = home.service().await;
    let first: Vec<i64> = service.progress(id, 1).await.unwrap().iter().map(|p| p.step).collect();
    let second: Vec<i64> = service.progress(id, 2).await.unwrap().iter().map(|p| p.step).collect();
    assert!(first.last().is_some_and(|s| (1..=7).contains(s)), "{first:?}");
    assert!(second.first().is_some_and(|s| *s > 6) && second.last() == Some(&10), "{second:?}");
    // Every checkpoint once, each under the attempt that wrote it.
    let saved = service.checkpoints_of(id).await.unwrap();
    let rows: Vec<(i64, i64)> = saved.iter().map(|c| (c.attempt, c.step)).collect();
    assert_eq!(rows, [(1, 2), (1, 4), (1, 6), (2, 8), (2, 10)]);
    let listed: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "checkpoints", &id.to_string(), "--json"])).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(5));
    let results = service.results(&id.to_string()).await.unwrap();
    assert_eq!(results.trained_weights.as_deref(), Some("tinker://standin/sampler_weights/000010"));
}

#[tokio::test]
async fn a_transient_exit_resumes_from_the_last_checkpoint() {
    let mut home = TestHome::new();
    cookbook(&home, "exit", RETRY);
    home.start_daemon();
    let id = home.submit(&["--workflow", "cookbook"]);
    resumed_at_six(&mut home, id).await;
    home.kill_daemon();
}

#[tokio::test]
async fn a_daemon_killed_between_attempts_resumes_all_the_same() {
    let mut home = TestHome::new();
    cookbook(&home, "exit", "retry: {max_attempts: 2, backoff: 3s, retry_on_exit_codes: [75]}\n");
    home.start_daemon();
    let id = home.submit(&["--workflow", "cookbook"]);
    let service = home.service().await;
    wait_for("the second attempt to be queued", T, || {
        let service = service.clone();
        async move {
            let run = service.run(id).await.unwrap().unwrap();
            (run.attempt == 2 && run.state == RunState::Pending).then_some(())
        }
    })
    .await;
    home.kill_daemon();
    home.start_daemon();
    resumed_at_six(&mut home, id).await;
    home.kill_daemon();
}

#[tokio::test]
async fn a_stall_resumes_from_the_last_checkpoint() {
    let mut home = TestHome::new();
    cookbook(
        &home,
        "stall",
        "stall_timeout: 1s\nstop_grace: 1s\nretry: {max_attempts: 2, backoff: 100ms, retry_on_stall: true}\n",
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "cookbook"]);
    resumed_at_six(&mut home, id).await;
    home.kill_daemon();
}

#[tokio::test]
async fn without_resume_the_retry_starts_from_zero() {
    let mut home = TestHome::new();
    cookbook(
        &home,
        "exit",
        "retry: {max_attempts: 2, backoff: 100ms, retry_on_exit_codes: [75], resume: false}\n",
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "cookbook"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    assert_eq!(attempts(&run)[1], "start=0 path= args=");
    let messages = home.messages(id).await;
    assert!(messages.iter().any(|m| m.contains("attempt 2 starts from step 0")), "{messages:#?}");
    home.kill_daemon();
}

#[tokio::test]
async fn a_malformed_checkpoints_file_is_skipped_with_one_event() {
    let mut home = TestHome::new();
    let script = home.path().join("bad.sh");
    std::fs::write(
        &script,
        r#"mkdir -p "$1/log"; f="$1/log/checkpoints.jsonl"
echo '{"batch": 2, "state_path": "tinker://x/weights/2"' >> "$f"
echo 'not json' >> "$f"
echo '{"state_path": "tinker://x/weights/3"}' >> "$f"
echo '{"batch": 4, "sampler_path": "tinker://x/sampler_weights/4"}' >> "$f"
"#,
    )
    .unwrap();
    home.workflow(
        "bad",
        &format!(
            r#"name: bad
stages:
  - {{name: trainer, argv: [sh, "{}", "{{run_dir}}"]}}
checkpoints:
  jsonl: {{file: "{{run_dir}}/log/checkpoints.jsonl", step: /batch, path: /state_path, weights: /sampler_path}}
"#,
            script.display()
        ),
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "bad"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    let saved = home.service().await.checkpoints_of(id).await.unwrap();
    assert_eq!(saved.iter().map(|c| c.step).collect::<Vec<_>>(), [4], "only the good line is a row");
    let messages = home.messages(id).await;
    let skipped: Vec<&String> =
        messages.iter().filter(|m| m.contains("checkpoints: skipped a line")).collect();
    assert_eq!(skipped.len(), 1, "{messages:#?}");
    home.kill_daemon();
}

#[tokio::test]
async fn a_stopped_run_resumes_on_request() {
    let mut home = TestHome::new();
    cookbook(&home, "stall", "stop_grace: 1s\n");
    home.start_daemon();
    let id = home.submit(&["--workflow", "cookbook"]);
    let service = home.service().await;
    wait_for("the checkpoint at step 6", T, || {
        let service = service.clone();
        async move { service.checkpoints_of(id).await.unwrap().iter().any(|c| c.step == 6).then_some(()) }
    })
    .await;
    let refused = home.cli(&["run", "resume", &id.to_string()]);
    let err = crate::support::stderr(&refused);
    assert!(!refused.status.success() && err.contains("only a failed or stopped run resumes"), "{err}");
    home.cli_ok(&["run", "stop", &id.to_string()]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Stopped);
    let missing = home.cli(&["run", "resume", &id.to_string(), "--from", "5"]);
    let err = crate::support::stderr(&missing);
    assert!(err.contains("no resumable checkpoint at step 5 (there are: 2, 4, 6)"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let resumed = home.cli_ok(&["run", "resume", &id.to_string()]);
    assert!(resumed.contains("pending (attempt 2)"), "{resumed}");
    resumed_at_six(&mut home, id).await;
    home.kill_daemon();
}
