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
metrics:
  jsonl: {{file: "{{run_dir}}/log/metrics.jsonl", step: /step}}
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
    // Each attempt's line, in its run directory: on another node, the second is alone in its own.
    let lines = attempts(&run);
    let handed = lines.join("\n");
    if lines.len() == 2 {
        assert_eq!(
            lines[0], "start=0 path= args=",
            "the first attempt starts from scratch, without resume_args"
        );
    }
    assert_eq!(
        lines.last().map(String::as_str).unwrap_or_default(),
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
    assert_eq!(
        status["resumed_from"],
        serde_json::json!({"step": 6, "path": "tinker://standin/weights/000006"}),
        "{status:#}"
    );
    let text = home.cli_ok(&["run", "status", &id.to_string()]);
    assert!(text.contains("attempt   2, resumed from step 6 (tinker://standin/weights/000006)"), "{text}");
    // One series across the attempts, each point tagged with its attempt: the first up to its
    // last row (step 6; it failed in iteration 7), the second from the checkpoint's batch, the
    // step the cookbook starts at, to 10. The rows the trainer kept when it rewrote
    // metrics.jsonl on resuming (steps 0-5) are the first attempt's, not read again.
    let service = home.service().await;
    let series = |points: Vec<lachesis::model::ProgressPoint>, attempt: i64| {
        assert!(points.iter().all(|p| p.attempt == attempt), "{points:?}");
        let steps: Vec<i64> = points.iter().map(|p| p.step).collect();
        assert!(steps.windows(2).all(|w| w[0] < w[1]), "no (attempt, step) twice: {steps:?}");
        steps
    };
    let first = series(service.run_progress_in(id, 1).await.unwrap(), 1);
    let second = series(service.run_progress_in(id, 2).await.unwrap(), 2);
    assert!(first.last().is_some_and(|s| (0..=6).contains(s)), "{first:?}");
    assert_eq!((second.first(), second.last()), (Some(&6), Some(&10)), "{second:?}");
    // The metrics by name: the first attempt's rows before the step the second resumed at, the
    // second's from it, the rows the cookbook kept on rewriting the file not read again as the
    // second's. (A lost node's last rows may never have reached the store.)
    let batch = wait_for("the batches' metric", T, || {
        let service = service.clone();
        async move {
            let series = service.run_metric_series(id, "progress/batch").await.unwrap();
            series.last().is_some_and(|p| p.step == 9).then_some(series)
        }
    })
    .await;
    let tagged: Vec<(u32, i64)> = batch.iter().map(|p| (p.attempt, p.step)).collect();
    assert!(tagged.iter().all(|(attempt, step)| (*attempt == 2) == (*step >= 6)), "{tagged:?}");
    assert!(tagged.ends_with(&[(2, 6), (2, 7), (2, 8), (2, 9)]), "{tagged:?}");
    if lines.len() == 2 {
        assert_eq!(tagged.iter().map(|(_, step)| *step).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
    }
    // Every checkpoint once, each under the attempt that wrote it.
    let saved = service.run_checkpoints_of(id).await.unwrap();
    let rows: Vec<(i64, i64)> = saved.iter().map(|c| (c.attempt, c.step)).collect();
    assert_eq!(rows, [(1, 2), (1, 4), (1, 6), (2, 8), (2, 10)]);
    let listed: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "checkpoints", &id.to_string(), "--json"])).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(5));
    let results = service.run_results(&id.to_string()).await.unwrap();
    assert_eq!(results.trained_weights.as_deref(), Some("tinker://standin/sampler_weights/final"));
}

#[tokio::test]
async fn a_transient_exit_resumes_from_the_last_checkpoint() {
    let mut home = TestHome::new();
    cookbook(&home, "exit", RETRY);
    let addr = format!(
        "127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    );
    home.environ.push(("LACHESIS_API_TOKEN".into(), "checkpoints-token".into()));
    home.start_daemon_with(&["--listen", &addr]);
    let id = home.submit(&["--workflow", "cookbook"]);
    resumed_at_six(&mut home, id).await;
    let base = format!("http://{addr}");
    let get = |path: String| {
        let url = format!("{base}{path}");
        async move {
            let client = lachesis::http_client::builder().build().unwrap();
            let answer = client.get(url).bearer_auth("checkpoints-token").send().await;
            answer.unwrap().text().await.unwrap()
        }
    };
    // The HTTP run resource says what the attempt resumed from, beside the last checkpoint.
    let resource: serde_json::Value = serde_json::from_str(&get(format!("/runs/{id}")).await).unwrap();
    assert_eq!(resource["resumed_from"]["step"], 6, "{resource:#}");
    assert_eq!(resource["checkpoint"]["step"], 10, "{resource:#}");
    // The run page: what the attempt resumed from, a line per attempt on the steps chart and a
    // marker at each checkpoint, its step and path in its tooltip.
    let page = get(format!("/ui/runs/{id}")).await;
    assert!(page.contains("attempt 2 resumed from step 6 (tinker://standin/weights/000006)"), "{page}");
    assert!(page.contains("<title>attempt 1</title>") && page.contains("<title>attempt 2</title>"), "{page}");
    for (attempt, step) in [(1, 2), (1, 4), (1, 6), (2, 8)] {
        let title = format!(
            "<title>checkpoint at step {step} (attempt {attempt}): tinker://standin/weights/{step:06}</title>"
        );
        assert!(page.contains(&format!("data-step=\"{step}\"")) && page.contains(&title), "{title}\n{page}");
    }
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
    let saved = home.service().await.run_checkpoints_of(id).await.unwrap();
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
        async move { service.run_checkpoints_of(id).await.unwrap().iter().any(|c| c.step == 6).then_some(()) }
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

#[tokio::test]
async fn a_run_requeued_after_its_node_was_lost_resumes_from_the_last_checkpoint() {
    use crate::nodes::{LONG, SHORT, cluster, start_node};
    let Some(mut homes) = cluster(2).await else { return };
    // Node b alone first, so it runs the first attempt, which stalls in iteration 7.
    cookbook(&homes[1], "stall", "retry: {max_attempts: 2, backoff: 100ms}\nstop_grace: 1s\n");
    start_node(&mut homes[1], "b", SHORT, &[]);
    let id = homes[1].submit(&["--workflow", "cookbook"]);
    let service = homes[0].service().await;
    wait_for("the checkpoint at step 6", T, || {
        let service = service.clone();
        async move { service.run_checkpoints_of(id).await.unwrap().iter().any(|c| c.step == 6).then_some(()) }
    })
    .await;
    start_node(&mut homes[0], "a", LONG, &[]);
    homes[1].kill_daemon();
    // After b's lease, a reaps it and queues the run again: from step 6, not from 0.
    let deadline = std::time::Instant::now() + T;
    loop {
        let run = homes[0].run(id).await;
        if run.state.is_terminal() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let messages = homes[0].messages(id).await;
            panic!("{run:?}\n{messages:#?}\n{}", homes[0].daemon_log());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    resumed_at_six(&mut homes[0], id).await;
    let first = homes[1].path().join("runs").join(id.to_string()).join("log/attempts.txt");
    assert_eq!(std::fs::read_to_string(&first).unwrap(), "start=0 path= args=\n", "b ran the first attempt");
    let messages = homes[0].messages(id).await;
    assert!(messages.iter().any(|m| m.starts_with("requeue: node lost: node 'b'")), "{messages:#?}");
}

/// The real tinker-cookbook's checkpoint code (tests/python/cookbook.sh installs it beside the
/// test venv; tests/run.sh sets LACHESIS_TEST_COOKBOOK and requires it), or None, saying why.
pub(crate) fn real_cookbook() -> Option<(String, String)> {
    let python = std::env::var("LACHESIS_TEST_PYTHON").ok();
    let path = std::env::var("LACHESIS_TEST_COOKBOOK").ok();
    if python.is_none() || path.is_none() {
        assert!(
            std::env::var_os("LACHESIS_REQUIRE_COOKBOOK").is_none(),
            "tinker-cookbook is required: LACHESIS_TEST_PYTHON and LACHESIS_TEST_COOKBOOK \
             (bash tests/python/cookbook.sh) must be set"
        );
        eprintln!("skipped: no tinker-cookbook (LACHESIS_TEST_COOKBOOK from bash tests/python/cookbook.sh)");
        return None;
    }
    python.zip(path)
}

#[tokio::test]
async fn the_real_cookbook_checkpoint_code_writes_what_lachesis_resumes_from() {
    let Some((python, cookbook)) = real_cookbook() else { return };
    let mut home = TestHome::new();
    let trainer = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/cookbook_trainer.py");
    home.workflow(
        "real-cookbook",
        &format!(
            r#"name: real-cookbook
stages:
  - name: trainer
    argv: ["{python}", "{}", "{{run_dir}}/cookbook"]
    env: {{PYTHONPATH: "{cookbook}", PYTHONUNBUFFERED: "1"}}
completion: {{stages: [trainer], require_total: true}}
progress:
  jsonl: {{file: "{{run_dir}}/cookbook/metrics.jsonl", step: /step, total: 10}}
checkpoints:
  jsonl: {{file: "{{run_dir}}/cookbook/checkpoints.jsonl", step: /batch, path: /state_path, weights: /sampler_path}}
{RETRY}"#,
            trainer.display()
        ),
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "real-cookbook"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}\n{}", run.reason, home.daemon_log());
    assert_eq!(run.attempt, 2);
    let messages = home.messages(id).await;
    assert!(
        messages.iter().any(|m| m == "attempt 2 resumes from step 6 (tinker://cookbook/weights/000006)"),
        "{messages:#?}"
    );
    // The cookbook found the same checkpoint on its own as lachesis handed it.
    let log = home.cli_ok(&["run", "logs", &id.to_string(), "--stage", "trainer"]);
    assert!(
        log.contains(
            "cookbook resumes at batch 6 (tinker://cookbook/weights/000006); LACHESIS_RESUME_STEP=6"
        ),
        "{log}"
    );
    let service = home.service().await;
    let rows: Vec<(i64, i64)> =
        service.run_checkpoints_of(id).await.unwrap().iter().map(|c| (c.attempt, c.step)).collect();
    assert_eq!(rows, [(1, 2), (1, 4), (1, 6), (2, 8), (2, 10)]);
    let second: Vec<i64> = service.run_progress_in(id, 2).await.unwrap().iter().map(|p| p.step).collect();
    assert_eq!((second.first(), second.last()), (Some(&6), Some(&10)), "{second:?}");
    assert!(second.windows(2).all(|w| w[0] < w[1]), "{second:?}");
    let results = service.run_results(&id.to_string()).await.unwrap();
    assert_eq!(results.trained_weights.as_deref(), Some("tinker://cookbook/sampler_weights/final"));
    home.kill_daemon();
}

/// A one-stage workflow whose stage writes its last lines and exits at once (`exit`), with
/// `source` naming where its checkpoints or progress appear. With `start_delay` the stage
/// exits before its run is `running`.
fn quick_exit(home: &TestHome, name: &str, lines: &str, exit: u8, start_delay: bool, source: &str) {
    let delay = if start_delay { "\n    start_delay: 5s" } else { "" };
    home.workflow(
        name,
        &format!(
            r#"name: {name}
stages:
  - name: trainer
    argv: [sh, -c, "mkdir -p {{run_dir}}/log; printf '{lines}' >> {{run_dir}}/log/out.jsonl; printf '{lines}'; exit {exit}"]{delay}
completion: {{stages: [trainer]}}
{source}"#
        ),
    );
}

const LOG_SOURCE: &str = "checkpoints:\n  log: {stage: trainer, pattern: 'saved (?P<step>\\d+) (?P<path>\\S+) (?P<weights>\\S+)'}\n";
const LOG_LINE: &str = r"saved 5 tinker://q/weights/5 tinker://q/sampler_weights/5\n";
const JSONL_SOURCE: &str = "checkpoints:\n  jsonl: {file: \"{run_dir}/log/out.jsonl\", step: /batch, path: /state_path, weights: /sampler_path}\n";
const JSONL_LINE: &str = r#"{{\"batch\": 5, \"state_path\": \"tinker://q/weights/5\", \"sampler_path\": \"tinker://q/sampler_weights/5\"}}\n"#;

/// Runs of that workflow (several at once, since the race is one of timing) each end
/// `state` with the checkpoint at step 5 recorded, listed and given as trained weights.
async fn each_keeps_its_checkpoint(home: &mut TestHome, name: &str, state: RunState) {
    let ids: Vec<Uuid> = (0..4).map(|_| home.submit(&["--workflow", name])).collect();
    let service = home.service().await;
    for id in ids {
        let (run, _) = home.wait_settled(id, T).await;
        assert_eq!(run.state, state, "{:?}\n{}", run.reason, home.daemon_log());
        let saved = service.run_checkpoints_of(id).await.unwrap();
        let rows: Vec<_> = saved.iter().map(|c| (c.attempt, c.step, c.path.as_deref())).collect();
        assert_eq!(rows, [(1, 5, Some("tinker://q/weights/5"))], "{:#?}", home.messages(id).await);
        let listed: serde_json::Value =
            serde_json::from_str(&home.cli_ok(&["run", "checkpoints", &id.to_string(), "--json"])).unwrap();
        assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed:#}");
        let results = service.run_results(&id.to_string()).await.unwrap();
        assert_eq!(results.trained_weights.as_deref(), Some("tinker://q/sampler_weights/5"));
    }
}

#[tokio::test]
async fn a_checkpoint_line_printed_just_before_exit_0_is_recorded() {
    let mut home = TestHome::new();
    quick_exit(&home, "quick", LOG_LINE, 0, false, LOG_SOURCE);
    quick_exit(&home, "quick-start", LOG_LINE, 0, true, LOG_SOURCE);
    home.start_daemon();
    each_keeps_its_checkpoint(&mut home, "quick", RunState::Completed).await;
    each_keeps_its_checkpoint(&mut home, "quick-start", RunState::Completed).await;
    home.kill_daemon();
}

#[tokio::test]
async fn a_checkpoints_jsonl_line_written_just_before_exit_0_is_recorded() {
    let mut home = TestHome::new();
    quick_exit(&home, "quick", JSONL_LINE, 0, false, JSONL_SOURCE);
    quick_exit(&home, "quick-start", JSONL_LINE, 0, true, JSONL_SOURCE);
    home.start_daemon();
    each_keeps_its_checkpoint(&mut home, "quick", RunState::Completed).await;
    each_keeps_its_checkpoint(&mut home, "quick-start", RunState::Completed).await;
    home.kill_daemon();
}

#[tokio::test]
async fn a_run_failing_at_once_keeps_the_checkpoint_written_before_its_exit() {
    let mut home = TestHome::new();
    quick_exit(&home, "log", LOG_LINE, 1, false, LOG_SOURCE);
    quick_exit(&home, "jsonl", JSONL_LINE, 1, false, JSONL_SOURCE);
    quick_exit(&home, "log-start", LOG_LINE, 1, true, LOG_SOURCE);
    quick_exit(&home, "jsonl-start", JSONL_LINE, 1, true, JSONL_SOURCE);
    home.start_daemon();
    for name in ["log", "jsonl", "log-start", "jsonl-start"] {
        each_keeps_its_checkpoint(&mut home, name, RunState::Failed).await;
    }
    home.kill_daemon();
}

#[tokio::test]
async fn a_stage_that_exited_while_the_daemon_was_down_has_its_checkpoint_recorded() {
    let mut home = TestHome::new();
    // The stage waits for the daemon to be gone, then writes its checkpoint and exits 1.
    let gate = home.path().join("gate");
    home.workflow(
        "late",
        &format!(
            r#"name: late
stages:
  - name: trainer
    argv: [sh, -c, "while [ ! -e {gate} ]; do sleep 0.05; done; printf '{LOG_LINE}'; exit 1"]
completion: {{stages: [trainer]}}
{LOG_SOURCE}"#,
            gate = gate.display()
        ),
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "late"]);
    home.wait_state(id, RunState::Running, T).await;
    home.kill_daemon();
    std::fs::write(&gate, "").unwrap();
    // Its exit file tells the next daemon that it ended, and how.
    home.start_daemon();
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Failed, "{:?}", run.reason);
    let saved = home.service().await.run_checkpoints_of(id).await.unwrap();
    assert_eq!(saved.iter().map(|c| c.step).collect::<Vec<_>>(), [5], "{:#?}", home.messages(id).await);
    home.kill_daemon();
}
