//! A run that needed two attempts shows both: the cookbook stand-in fails its first attempt at
//! step 7 with a transient exit, the retry policy resumes it from its checkpoint at step 6, and
//! `run status` (text and `--json`), `report` (text and `--json`), `GET /report`, the report page
//! and the run page each give the time since the first attempt started beside the last
//! attempt's, say "attempt 2, resumed from step 6", and the run page draws both attempts'
//! stages and a colour key per attempt on the steps chart.

use std::path::PathBuf;
use std::time::Duration;

use lachesis::model::RunState;
use serde_json::Value;

use crate::support::TestHome;

const T: Duration = Duration::from_secs(60);
const TOKEN: &str = "attempts-test-token-0123";

fn cookbook(home: &TestHome) {
    let standin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/cookbook_standin.sh");
    home.workflow(
        "cookbook",
        &format!(
            r#"name: cookbook
stages:
  - name: trainer
    argv: [sh, "{}", "{{run_dir}}/log", exit]
    resume_args: ["load_checkpoint_path={{resume.path}}", "start={{resume.step}}"]
completion: {{stages: [trainer], require_total: true}}
progress:
  jsonl: {{file: "{{run_dir}}/log/metrics.jsonl", step: /step, total: 10}}
checkpoints:
  jsonl: {{file: "{{run_dir}}/log/checkpoints.jsonl", step: /batch, path: /state_path, weights: /sampler_path}}
retry: {{max_attempts: 2, backoff: 300ms, retry_on_exit_codes: [75]}}
"#,
            standin.display()
        ),
    );
}

#[tokio::test]
async fn a_retried_run_shows_every_attempt_on_every_surface() {
    let mut home = TestHome::new();
    cookbook(&home);
    let addr = format!(
        "127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    );
    home.environ.push(("LACHESIS_API_TOKEN".into(), TOKEN.into()));
    home.start_daemon_with(&["--listen", &addr]);
    let id = home.submit(&["--workflow", "cookbook"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!((run.state, run.attempt), (RunState::Completed, 2), "{:?}\n{}", run.reason, home.daemon_log());
    let (started, ended) = (run.started_at.unwrap(), run.ended_at.unwrap());

    // run status --json: the first attempt's start, the time since it, and its stages.
    let status: Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &id.to_string(), "--json"])).unwrap();
    let first = status["first_started_at"].as_i64().expect("first_started_at");
    assert!(first < started, "the first attempt started before the second: {status:#}");
    assert_eq!(status["since_first_start_ms"].as_i64(), Some(ended - first), "{status:#}");
    assert_eq!(status["started_at"].as_i64(), Some(started), "the last attempt's start stays");
    let earlier = status["earlier_attempts"].as_array().expect("earlier_attempts");
    assert_eq!(earlier.len(), 1, "{status:#}");
    assert_eq!(earlier[0]["attempt"], 1);
    let trainer = &earlier[0]["stages"][0];
    assert_eq!(
        (trainer["name"].as_str(), trainer["exit"]["code"].as_i64()),
        (Some("trainer"), Some(75)),
        "{status:#}"
    );
    assert!(trainer["started_at"].as_i64().is_some_and(|at| at >= first && at < started), "{status:#}");
    let text = home.cli_ok(&["run", "status", &id.to_string()]);
    assert!(
        text.contains("attempts  ")
            && text.contains("since the first started")
            && text.contains("attempt 2 took"),
        "{text}"
    );

    // report --json and text: the row says which attempt, from where, and both durations.
    let report: Value = serde_json::from_str(&home.cli_ok(&["report", "--json"])).unwrap();
    let row = report["runs"].as_array().unwrap().iter().find(|r| r["id"] == id.to_string()).expect("listed");
    assert_eq!(row["attempt"], 2);
    assert_eq!(row["resumed_from"]["step"], 6, "{row:#}");
    assert_eq!(row["first_started_at"].as_i64(), Some(first), "{row:#}");
    assert_eq!(row["total_ms"].as_i64(), Some(ended - first), "{row:#}");
    assert_eq!(row["duration_ms"].as_i64(), Some(ended - started), "{row:#}");
    let text = home.cli_ok(&["report"]);
    assert!(text.contains("attempt 2, resumed from step 6") && text.contains("(last attempt "), "{text}");

    // The HTTP report, the report page and the run page.
    let client = lachesis::http_client::builder().no_proxy().build().unwrap();
    let get = async |path: &str| {
        let answer = client.get(format!("http://{addr}{path}")).bearer_auth(TOKEN).send().await.unwrap();
        answer.text().await.unwrap()
    };
    let answer: Value = serde_json::from_str(&get("/report").await).unwrap();
    let row = answer["runs"].as_array().unwrap().iter().find(|r| r["id"] == id.to_string()).expect("listed");
    assert_eq!(
        (row["first_started_at"].as_i64(), row["resumed_from"]["step"].as_i64()),
        (Some(first), Some(6))
    );
    let page = get("/ui/report").await;
    assert!(page.contains("attempt 2, resumed from step 6") && page.contains("(last attempt "), "{page}");
    let page = get(&format!("/ui/runs/{id}")).await;
    assert!(page.contains("first attempt started") && page.contains("over 2 attempts"), "{page}");
    // Both attempts' stage bars, each labelled with its attempt.
    for attempt in [1, 2] {
        assert!(
            page.contains(&format!(
                "data-stage=\"trainer\" data-state=\"exited\" data-attempt=\"{attempt}\""
            )),
            "{page}"
        );
        assert!(page.contains(&format!(">trainer #{attempt}<")), "{page}");
    }
    // The steps chart's key: a swatch per attempt.
    for attempt in [1, 2] {
        assert!(page.contains(&format!("<g class=\"key\" data-series=\"attempt {attempt}\">")), "{page}");
    }
    home.kill_daemon();
}

/// A retry's backoff ending wakes the daemon: its next attempt starts then, not at the next
/// fallback scan (an hour away here).
#[tokio::test]
async fn a_retry_starts_when_its_backoff_ends_not_at_the_next_scan() {
    let mut home = TestHome::new();
    home.workflow(
        "flaky",
        r#"name: flaky
stages:
  - name: trainer
    argv: [sh, -c, 'if test -f "{run_dir}/tried"; then exit 0; fi; touch "{run_dir}/tried"; exit 75']
retry: {max_attempts: 2, backoff: 300ms, retry_on_exit_codes: [75]}
"#,
    );
    home.start_daemon_with(&["--scan-interval", "1h"]);
    let id = home.submit(&["--workflow", "flaky"]);
    let (run, _) = home.wait_settled(id, Duration::from_secs(30)).await;
    assert_eq!((run.state, run.attempt), (RunState::Completed, 2), "{:?}\n{}", run.reason, home.daemon_log());
}

/// A retry queued again before the daemon restarted (its backoff written to the store by the
/// daemon that died) starts when its backoff ends: the restarted daemon reads the store's next
/// backoff end, though it never queued the run itself, rather than waiting for its next
/// fallback scan (an hour away here).
#[tokio::test]
async fn a_retry_queued_before_a_restart_starts_when_its_backoff_ends_not_at_the_next_scan() {
    let mut home = TestHome::new();
    home.workflow(
        "flaky",
        r#"name: flaky
stages:
  - name: trainer
    argv: [sh, -c, 'if test -f "{run_dir}/tried"; then exit 0; fi; touch "{run_dir}/tried"; exit 75']
retry: {max_attempts: 2, backoff: 6s, retry_on_exit_codes: [75]}
"#,
    );
    home.start_daemon_with(&["--scan-interval", "1h"]);
    let id = home.submit(&["--workflow", "flaky"]);
    let service = home.service().await;
    let queued = crate::support::wait_for("the run to be queued again", Duration::from_secs(30), || async {
        let run = service.run(id).await.unwrap().unwrap();
        (run.state == RunState::Pending && run.attempt == 2).then_some(run)
    })
    .await;
    // Down before its backoff ends (6 s): the next daemon knows of it only through the store.
    home.kill_daemon();
    home.start_daemon_with(&["--scan-interval", "1h"]);
    let (run, _) = home.wait_settled(id, Duration::from_secs(30)).await;
    assert_eq!((run.state, run.attempt), (RunState::Completed, 2), "{:?}\n{}", run.reason, home.daemon_log());
    let (not_before, started) = (queued.not_before.unwrap(), run.started_at.unwrap());
    assert!(started >= not_before, "started at {started}, before its backoff ended at {not_before}");
}
