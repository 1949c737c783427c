//! Hostile input through the real binary: bad command-line values, a closed stdout, a catalog
//! with a broken file and a dangling symlink, a zero start delay, workflows whose logs aim out
//! of the run directory. Each gets a one-line error naming the field, never a panic.

use std::process::Stdio;
use std::time::Duration;

use lachesis::model::RunState;

use crate::support::{TestHome, stderr};

const T: Duration = Duration::from_secs(30);

fn assert_one_line_error(out: &std::process::Output, want: &str) {
    let err = stderr(out);
    assert!(!out.status.success(), "succeeded: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(want), "{err:?} does not contain {want:?}");
}

#[test]
fn daemon_refuses_bad_numbers_and_durations_without_panicking() {
    let home = TestHome::new();
    for (args, want) in [
        (&["daemon", "--scan-interval", "0"][..], "--scan-interval"),
        (&["daemon", "--stop-grace", "1e300"][..], "--stop-grace"),
        (&["daemon", "--stop-grace", "99999999999999999999999h"][..], "--stop-grace"),
        (&["daemon", "--stop-grace", "31 days"][..], "maximum"),
        (&["daemon", "--max-parallel", "0"][..], "--max-parallel"),
        (&["daemon", "--sweep-interval", "0s"][..], "--sweep-interval"),
        (&["test", "start", "--timeout", "1e300"][..], "--timeout"),
    ] {
        assert_one_line_error(&home.cli(args), want);
    }
}

#[test]
fn a_closed_stdout_ends_printing_commands_quietly() {
    let home = TestHome::new();
    for args in
        [&["workflow", "list"][..], &["workflow", "show", "tinker-atropos", "--json"], &["run", "list"]]
    {
        // A pipe whose reader is gone: every write fails with EPIPE.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out =
            home.command(args).stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped()).output().unwrap();
        assert!(out.status.success(), "{args:?}: {:?} {}", out.status, stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
}

#[test]
fn a_broken_or_linked_workflow_only_affects_itself() {
    let home = TestHome::new();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("written-through-the-link");
    std::fs::create_dir_all(home.workflows()).unwrap();
    std::os::unix::fs::symlink(&target, home.workflows().join("demo.yaml")).unwrap();
    home.workflow("bad", "name: bad\nstop_grace: 1e300\nstages:\n  - {name: a, argv: [x]}\n");
    let deep = format!("name: deep\nstages: {}{}\n", "[".repeat(20_000), "]".repeat(20_000));
    home.workflow("deep", &deep);
    home.workflow("good", "name: good\nstages:\n  - {name: a, argv: [\"true\"]}\n");

    let began = std::time::Instant::now();
    let list = home.cli_ok(&["workflow", "list", "--json"]);
    assert!(began.elapsed() < Duration::from_secs(5), "{:?}", began.elapsed());
    assert!(!target.exists(), "workflow list wrote the bundled demo through a dangling link");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&list).unwrap();
    let row =
        |name: &str| rows.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("{name}: {list}"));
    assert!(row("good")["error"].is_null() && row("tinker-atropos")["error"].is_null(), "{list}");
    assert!(row("bad")["error"].as_str().unwrap().contains("bad.yaml: stop_grace: "), "{list}");
    assert!(row("deep")["error"].as_str().unwrap().contains("nested more than"), "{list}");
    assert!(row("demo")["error"].as_str().unwrap().contains("symlink"), "{list}");

    let doctor = home.cli(&["doctor"]);
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(report.contains("bad.yaml") && report.contains("demo.yaml"), "{report}");
    assert_one_line_error(&home.cli(&["run", "start", "--workflow", "bad"]), "stop_grace");
}

#[tokio::test]
async fn logs_must_stay_in_the_run_directory() {
    let home = TestHome::new();
    let db = home.path().join("lachesis.db");
    for (name, log) in [
        ("abs", db.display().to_string()),
        ("up", "../../lachesis.db".into()),
        ("status", ".status/a.exit.json".into()),
    ] {
        home.workflow(
            name,
            &format!("name: {name}\nstages:\n  - {{name: a, argv: [\"true\"], log: \"{log}\"}}\n"),
        );
        assert_one_line_error(&home.cli(&["run", "start", "--workflow", name]), "stages[0].log");
    }
    // Templated, the check happens once the value is known.
    home.workflow(
        "tpl",
        "name: tpl\nstages:\n  - {name: a, argv: [\"true\"], log: \"{home}/lachesis.db\"}\n",
    );
    assert_one_line_error(&home.cli(&["run", "start", "--workflow", "tpl"]), "log: ");
}

#[tokio::test]
async fn a_zero_start_delay_means_up_at_once() {
    let mut home = TestHome::new();
    home.workflow("quick", "name: quick\nstages:\n  - {name: only, argv: [\"true\"], start_delay: 0}\n");
    home.start_daemon();
    let id = home.submit(&["--workflow", "quick"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}\n{}", run.reason, home.daemon_log());
}
