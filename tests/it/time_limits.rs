//! Time limits: an attempt that runs past its `time_limit` is stopped (its normal stop) and
//! fails with the reason, or is retried by the policy; the clock survives a daemon SIGKILL.

use std::time::Duration;

use lachesis::model::{RunState, now_millis};

use crate::support::{TestHome, assert_no_stage_alive, wait_for};

/// Two long stages, so the stop has an order to keep.
fn sleeper(extra: &str) -> String {
    format!(
        "name: sleeper\nstop_grace: 2s\n{extra}stages:\n  - {{name: api, argv: [sleep, \"60\"]}}\n  - {{name: trainer, argv: [sleep, \"60\"]}}\n"
    )
}

#[tokio::test]
async fn a_run_past_its_time_limit_is_stopped_and_fails_with_the_reason() {
    let mut home = TestHome::new();
    home.workflow("sleeper", &sleeper("time_limit: 2s\n"));
    let id = home.submit(&["-w", "sleeper"]);
    home.start_daemon();
    home.wait_state(id, RunState::Running, Duration::from_secs(20)).await;
    let status = home.cli_ok(&["run", "status", &id.to_string()]);
    assert!(status.contains("time left"), "{status}");
    let (run, stages) = home.wait_settled(id, Duration::from_secs(30)).await;
    assert_eq!((run.state, run.reason.as_deref()), (RunState::Failed, Some("time limit 2s reached")));
    assert_no_stage_alive(&stages);
    // Stopped in reverse order: the trainer before the api.
    let events = home.events(id).await;
    let signalled = |stage: &str| {
        events.iter().position(|e| e.stage.as_deref() == Some(stage) && e.message.starts_with("sent SIGTERM"))
    };
    assert!(signalled("trainer").unwrap() < signalled("api").unwrap(), "{events:?}");
}

#[tokio::test]
async fn an_override_on_the_command_line_holds_across_a_daemon_sigkill() {
    let mut home = TestHome::new();
    home.workflow("sleeper", &sleeper(""));
    let id = home.submit(&["-w", "sleeper", "--time-limit", "4s"]);
    home.start_daemon();
    let run = home.wait_state(id, RunState::Running, Duration::from_secs(20)).await;
    home.kill_daemon();
    // The limit passes while no daemon runs: the stages keep going under their shims.
    let deadline = run.started_at.unwrap() + 4_000;
    wait_for("the limit to pass", Duration::from_secs(20), || async {
        (now_millis() > deadline).then_some(())
    })
    .await;
    let restarted = now_millis();
    home.start_daemon();
    let (ended, stages) = home.wait_settled(id, Duration::from_secs(30)).await;
    assert_eq!((ended.state, ended.reason.as_deref()), (RunState::Failed, Some("time limit 4s reached")));
    assert_no_stage_alive(&stages);
    // The clock ran from the attempt's recorded start: a clock restarted with the daemon
    // would have let it run 4s more.
    let failed_after = ended.ended_at.unwrap() - restarted;
    assert!(failed_after < 4_000, "failed {failed_after}ms after the restart");
}

#[tokio::test]
async fn a_time_limit_is_retried_when_the_policy_says_so() {
    let mut home = TestHome::new();
    let retry = "time_limit: 1s\nretry: {max_attempts: 2, backoff: 100ms, retry_on_time_limit: true}\n";
    home.workflow("sleeper", &sleeper(retry));
    let id = home.submit(&["-w", "sleeper"]);
    home.start_daemon();
    let (run, stages) = home.wait_settled(id, Duration::from_secs(40)).await;
    assert_eq!((run.state, run.attempt), (RunState::Failed, 2));
    assert_eq!(run.reason.as_deref(), Some("time limit 1s reached"));
    assert_no_stage_alive(&stages);
    let messages = home.messages(id).await;
    assert!(
        messages
            .iter()
            .any(|m| m.contains("time limit 1s reached (retried by the retry policy): attempt 2 of 2")),
        "{messages:?}"
    );
}
