//! Retention: `lachesis gc` and `daemon --keep-finished` forget finished runs with their rows
//! and directories, never a run still to come, and say what they freed.

use std::time::Duration;

use lachesis::model::RunState;
use serde_json::Value;
use uuid::Uuid;

use crate::support::{TestHome, wait_for};

async fn wait_settled(home: &mut TestHome, ids: &[Uuid]) {
    let service = home.service().await;
    wait_for("the runs to end with every stage gone", Duration::from_secs(60), || {
        let service = service.clone();
        async move {
            for id in ids {
                let run = service.run(*id).await.ok()??;
                let stages = service.run_stages(*id).await.ok()?;
                if run.state != RunState::Completed || stages.iter().any(|s| s.record.state.is_live()) {
                    return None;
                }
            }
            Some(())
        }
    })
    .await;
}

fn gc(home: &TestHome, args: &[&str]) -> Value {
    let mut all = vec!["gc", "--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&home.cli_ok(&all)).unwrap()
}

#[tokio::test]
async fn gc_forgets_finished_runs_with_their_files_and_keeps_the_rest() {
    let mut home = TestHome::new();
    home.start_daemon();
    let out = home.cli_ok(&["run", "start", "--workflow", "demo", "--var", "steps=1", "--count", "2"]);
    let done: Vec<Uuid> = out.lines().map(|l| Uuid::parse_str(l).unwrap()).collect();
    wait_settled(&mut home, &done).await;
    home.kill_daemon();
    let pending = home.submit(&["--workflow", "demo", "--var", "steps=1"]);
    let runs_dir = home.path().join("runs");
    let dir = |id: &Uuid| runs_dir.join(id.to_string());

    let report = gc(&home, &["--older-than", "0s", "--dry-run"]);
    assert_eq!((report["runs"].as_u64(), report["dry_run"].as_bool()), (Some(2), Some(true)), "{report}");
    assert!(report["bytes"].as_u64().unwrap() > 0, "{report}");
    assert!(done.iter().all(|id| dir(id).is_dir()), "a dry run removes nothing");
    assert_eq!(gc(&home, &["--older-than", "1d"])["runs"], 0, "nothing ended a day ago");

    let report = gc(&home, &["--older-than", "0s"]);
    assert_eq!(report["runs"], 2, "{report}");
    let service = home.service().await;
    for id in &done {
        assert!(!dir(id).exists());
        assert!(service.run(*id).await.unwrap().is_none());
        assert!(service.events_after(*id, 0).await.unwrap().is_empty());
    }
    assert_eq!(service.run(pending).await.unwrap().unwrap().state, RunState::Pending);
    let text = home.cli_ok(&["gc", "--older-than", "0s"]);
    assert!(text.starts_with("freed 0 runs, 0 tests, 0 B on disk (ended more than 0s ago)"), "{text}");

    // The daemon forgets at start (then hourly): the pending run is claimed, not forgotten.
    home.start_daemon_with(&["--keep-finished", "0s"]);
    wait_settled(&mut home, &[pending]).await;
    home.kill_daemon();
    home.start_daemon_with(&["--keep-finished", "0s"]);
    let service = home.service().await;
    wait_for("the daemon to forget the finished run", Duration::from_secs(20), || {
        let service = service.clone();
        async move { service.run(pending).await.ok()?.is_none().then_some(()) }
    })
    .await;
    assert!(!dir(&pending).exists());
}

#[tokio::test]
async fn doctor_warns_when_the_home_outgrows_its_limit() {
    let mut home = TestHome::new();
    home.cli_ok(&["run", "start", "--workflow", "demo"]);
    home.environ.push(("LACHESIS_HOME_WARN_SIZE".into(), "1K".into()));
    let out = home.cli(&["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("warn home size") && text.contains("over 1.0 KiB (LACHESIS_HOME_WARN_SIZE)"),
        "{text}"
    );
    home.environ.retain(|(k, _)| k != "LACHESIS_HOME_WARN_SIZE");
    let text = String::from_utf8_lossy(&home.cli(&["doctor"]).stdout).to_string();
    assert!(text.contains("ok   home size"), "{text}");
}
