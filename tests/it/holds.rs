//! Hold, release and edit: a queued run kept out of the queue, put back, changed; each only
//! while it is pending, each an event.

use std::time::Duration;

use lachesis::model::RunState;

use crate::support::{TestHome, stderr};

const QUICK: &str = "name: quick\nstages:\n  - {name: main, argv: [sh, -c, \"exit 0\"]}\n";

#[tokio::test]
async fn a_held_run_is_not_claimed_while_runs_behind_it_are() {
    let mut home = TestHome::new();
    home.workflow("quick", QUICK);
    // First in the queue and at a higher priority: only the hold keeps it back.
    let held = home.submit(&["-w", "quick", "--priority", "5", "--hold"]);
    let behind = home.submit(&["-w", "quick"]);
    home.start_daemon();
    home.wait_state(behind, RunState::Completed, Duration::from_secs(20)).await;
    let run = home.run(held).await;
    assert_eq!((run.state, run.held_at.is_some()), (RunState::Pending, true));
    let list = home.cli_ok(&["run", "list"]);
    assert!(
        list.lines().any(|l| l.contains(&held.to_string()[..8]) && l.contains("pending (held)")),
        "{list}"
    );
    let status = home.cli_ok(&["run", "status", &held.to_string()]);
    assert!(status.contains("held      since"), "{status}");

    // A restarted daemon still leaves it alone.
    home.kill_daemon();
    let third = home.submit(&["-w", "quick"]);
    home.start_daemon();
    home.wait_state(third, RunState::Completed, Duration::from_secs(20)).await;
    assert_eq!(home.run(held).await.state, RunState::Pending);

    let out = home.cli_ok(&["run", "release", &held.to_string()[..8]]);
    assert!(out.contains("pending priority 5") && !out.contains("held"), "{out}");
    home.wait_state(held, RunState::Completed, Duration::from_secs(20)).await;
    let messages = home.messages(held).await;
    assert!(messages[0].ends_with("priority 5, held)"), "{messages:?}");
    let released = messages.iter().position(|m| m.starts_with("released")).expect("a release event");
    let claimed = messages.iter().position(|m| m.starts_with("claim by")).expect("a claim event");
    assert!(released < claimed, "{messages:?}");
}

#[tokio::test]
async fn a_pending_run_is_edited_with_submissions_checks() {
    let mut home = TestHome::new();
    let id = home.submit(&["-w", "demo"]).to_string();
    home.cli_ok(&["run", "hold", &id]);
    // Holding twice is not an error, and writes nothing more.
    home.cli_ok(&["run", "hold", &id]);
    let out = home.cli_ok(&["run", "edit", &id, "--priority", "-3", "--var", "steps=7"]);
    assert!(out.contains("pending (held) priority -3"), "{out}");
    let run = home.run(id.parse().unwrap()).await;
    assert_eq!(run.priority, -3);
    assert_eq!(run.params.vars.get("steps").map(String::as_str), Some("7"));
    assert_eq!(run.params.resolved.get("steps").map(String::as_str), Some("7"));
    // The run keeps its id and directory: the re-plan is under its own.
    assert_eq!(run.params.resolved.get("run_id"), Some(&id));

    // Submission's own refusals, word for word; nothing changes.
    let err = stderr(&home.cli(&["run", "edit", &id, "--var", "stepz=3"]));
    assert!(err.contains("unknown variable 'stepz' for workflow 'demo' (variables: steps)"), "{err}");
    let err = stderr(&home.cli(&["run", "edit", &id, "--var", "python=/tmp/evil"]));
    assert!(err.contains("variable 'python' is set by lachesis"), "{err}");
    let err = stderr(&home.cli(&["run", "edit", &id]));
    assert!(err.contains("nothing to edit"), "{err}");
    let after = home.run(id.parse().unwrap()).await;
    assert_eq!((after.version, after.params.vars.clone()), (run.version, run.params.vars.clone()));

    let messages = home.messages(id.parse().unwrap()).await;
    assert_eq!(messages.iter().filter(|m| m.starts_with("held")).count(), 1, "{messages:?}");
    assert!(messages.iter().any(|m| m == "edited: priority 0 -> -3; values steps"), "{messages:?}");
}

#[tokio::test]
async fn a_run_that_left_the_queue_is_not_held_released_or_edited() {
    let mut home = TestHome::new();
    let id = home.submit(&["-w", "demo"]).to_string();
    home.cli_ok(&["run", "stop", &id]);
    for (args, action) in [
        (vec!["run", "hold", &id], "held"),
        (vec!["run", "release", &id], "released"),
        (vec!["run", "edit", &id, "--priority", "4"], "edited"),
    ] {
        let out = home.cli(&args);
        assert!(!out.status.success());
        let err = stderr(&out);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(&format!("is stopped: only a pending run can be {action}")), "{err}");
    }
    let run = home.run(id.parse().unwrap()).await;
    assert_eq!((run.priority, run.held_at), (0, None));
}
