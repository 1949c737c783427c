//! Outputs pinned by golden files: each command's table and `--json` output and the dashboard's
//! main pages, produced as a user would produce them (the built binary, a scratch home, a real
//! daemon), with what varies between two runs of the suite redacted (`redact.rs`).
//!
//! The golden files are `tests/it/snapshots/*.snap` (insta's format). A change of output fails
//! the test with a diff; once the new output is right, accept it with
//! `INSTA_UPDATE=always cargo test --test it golden` (or `cargo insta review`), and commit the
//! changed `.snap` files with the change that made them (docs/testing.md).

mod dashboard;
mod nodes;
mod quiet;
mod redact;
mod runs;
mod sweeps;

use std::time::Duration;

use serde_json::Value;

pub use redact::Redactions;

use crate::support::{TestHome, wait_for};

/// How long a run, a sweep or a delivery may take to reach what a test waits for.
pub const T: Duration = Duration::from_secs(60);

/// Compares `text` with the golden file `NAME.snap`.
pub fn pin(name: &str, text: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.bind(|| insta::assert_snapshot!(name, text));
}

/// A home whose commands and daemon write times in UTC, whatever the machine's zone, and look
/// at nothing of this machine's: no Python (an interpreter that is not there), no tinker-atropos
/// checkout (one in the home that is not there either).
pub fn home() -> TestHome {
    let mut home = TestHome::new();
    home.environ.push(("TZ".into(), "UTC".into()));
    for (key, name) in [("LACHESIS_PYTHON", "no-python"), ("LACHESIS_TINKER_ATROPOS", "tinker-atropos")] {
        let path = home.path().join(name);
        home.environ.push((key.into(), path.display().to_string()));
    }
    home
}

/// Runs `lachesis ARGS` and pins its text output (redacted) as `NAME`, checking that no line
/// of it ends in a space.
pub fn pin_text(home: &TestHome, redactions: &Redactions, name: &str, args: &[&str]) {
    let out = home.cli_ok(args);
    for line in out.lines() {
        assert_eq!(line, line.trim_end(), "`lachesis {}` pads a line: {out:?}", args.join(" "));
    }
    pin(name, &redactions.text(&out));
}

/// Runs `lachesis ARGS --json` and pins its JSON (redacted, pretty) as `NAME`.
pub fn pin_json(home: &TestHome, redactions: &Redactions, name: &str, args: &[&str]) {
    let mut all = args.to_vec();
    all.push("--json");
    pin(name, &redactions.json(&home.cli_ok(&all)));
}

/// The `--json` output of `lachesis ARGS`, parsed.
pub fn json(home: &TestHome, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = home.cli_ok(&all);
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("`lachesis {}` is not JSON ({e}): {out}", all.join(" ")))
}

/// Waits until `check` (reading the CLI) holds, for `what`.
pub async fn until(what: &str, mut check: impl FnMut() -> bool) {
    wait_for(what, T, || {
        let met = check().then_some(());
        async move { met }
    })
    .await;
}

/// Waits until run `id` is in `state` (read with `run status --json`), with its stages ended.
pub async fn run_ends(home: &TestHome, id: &str, state: &str) {
    until(&format!("run {id} to be {state}"), || {
        let status = json(home, &["run", "status", id]);
        // A stage still pending when its run ended never starts.
        let ended = status["stages"].as_array().is_some_and(|stages| {
            stages.iter().all(|s| ["pending", "exited", "lost"].contains(&s["state"].as_str().unwrap_or("")))
        });
        let now = status["state"].as_str().unwrap_or("").to_string();
        assert!(
            now == state || !["completed", "failed", "stopped"].contains(&now.as_str()),
            "run {id} ended {now}, not {state}: {status:#}\n{}",
            home.daemon_log()
        );
        now == state && ended
    })
    .await;
}
