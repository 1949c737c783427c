//! A full disk under the store at each step of a run's life (claim, start, up, exit, stop, and
//! a restart after a held start): the run gets its true outcome once space returns, never
//! moves ahead of the facts behind it, and its record of events is complete.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lachesis::launch::process::{Liveness, liveness};
use lachesis::model::{Exit, ProcessState, RunState};

use crate::faults::{Tmpfs, fill, stage_process_gone};
use crate::support::{TestHome, fork_server_of, processes_mentioning, wait_for};

const T: Duration = Duration::from_secs(30);

/// A daemon on an SQLite home inside a small tmpfs, its log kept outside it (so its warnings
/// survive the full disk), and a directory of flags outside it too.
struct FullDiskLab {
    // Fields drop in order: the home (inside the tmpfs) before the tmpfs.
    home: TestHome,
    flags: tempfile::TempDir,
    _tmpfs: Tmpfs,
}

impl FullDiskLab {
    fn new(workflow: &str) -> Option<FullDiskLab> {
        let tmpfs = Tmpfs::mount("32m")?;
        let flags = tempfile::tempdir().unwrap();
        let mut home = TestHome::new();
        home.dir = tempfile::tempdir_in(tmpfs.path()).unwrap();
        std::os::unix::fs::symlink(flags.path().join("daemon.log"), home.path().join("daemon.log")).unwrap();
        home.workflow("w", workflow);
        home.start_daemon();
        Some(FullDiskLab { home, flags, _tmpfs: tmpfs })
    }

    fn filler(&self) -> PathBuf {
        self.home.path().join("filler")
    }

    /// Fills the disk so that the store's next write cannot land: the WAL, which SQLite
    /// otherwise reuses at its largest size, is checkpointed and truncated first, so the
    /// write needs room the disk no longer has.
    async fn fill_under_the_store(&self) {
        use sqlx::Connection;
        let db = self.home.path().join("lachesis.db");
        let mut conn =
            sqlx::sqlite::SqliteConnection::connect(&format!("sqlite://{}", db.display())).await.unwrap();
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
        fill(&self.filler(), 0);
    }

    /// Waits until the run's (first) stage is recorded in `state`.
    async fn wait_stage(&mut self, id: uuid::Uuid, state: ProcessState) {
        let service = self.home.service().await;
        wait_for(&format!("the stage to be {state:?}"), T, || {
            let service = service.clone();
            async move { (service.run_stages(id).await.unwrap()[0].record.state == state).then_some(()) }
        })
        .await;
    }

    /// Waits for the daemon to say that a write could not land for want of space.
    async fn wait_warned(&self, what: &str) {
        let log = self.flags.path().join("daemon.log");
        let warned = || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.lines().any(|l| l.contains(what) && l.contains("disk full"))
        };
        let deadline = std::time::Instant::now() + T;
        while !warned() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(std::time::Instant::now() < deadline, "the daemon never warned {what:?}:\n{text}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until no stage process (`sh`) of ours waits on `go` any more: the stage exited,
    /// whatever became of its shim.
    async fn wait_stage_gone(&self, go: &Path) {
        wait_for("the stage process to exit", T, || {
            let stages = processes_mentioning(go)
                .into_iter()
                .filter(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sh")
                })
                .count();
            async move { (stages == 0).then_some(()) }
        })
        .await;
    }

    /// Checks the run's outcome once space is back, and that its record of events holds each
    /// of `events` (as message prefixes), in that order.
    async fn settled(&mut self, id: uuid::Uuid, state: RunState, reason: &str, exit: Exit, events: &[&str]) {
        let (run, stages) = self.home.wait_settled(id, T).await;
        let log = self.home.daemon_log();
        assert_eq!((run.state, run.reason.as_deref()), (state, Some(reason)), "daemon log:\n{log}");
        assert_eq!(stages[0].record.exit, Some(exit));
        // A shim waits for space to write its exit file, then exits.
        wait_for("the shims to have written their exit files and exited", T, || {
            let alive = stages
                .iter()
                .flat_map(|s| [&s.record.shim, &s.record.process])
                .flatten()
                .any(|p| liveness(p) == Liveness::Alive);
            async move { (!alive).then_some(()) }
        })
        .await;
        let messages = self.home.messages(id).await;
        let mut rest = messages.iter();
        for want in events {
            assert!(rest.any(|m| m.starts_with(want)), "no {want:?} (in order) among {messages:#?}");
        }
    }
}

/// A stage that waits for `go`, then exits 0.
fn waits_for(go: &Path, extra: &str) -> String {
    format!(
        "name: w\nstages:\n  - name: main\n    argv: [sh, -c, \"while [ ! -e {} ]; do sleep 0.05; done; exit 0\"]\n{extra}",
        go.display()
    )
}

#[tokio::test]
async fn a_full_disk_at_a_claim_delays_it_and_loses_nothing() {
    // The first attempt exits 75 (transient); the second is claimed while the disk is full.
    let flags = tempfile::tempdir().unwrap();
    let once = flags.path().join("once");
    let script = format!("if [ -e {0} ]; then exit 0; fi; touch {0}; exit 75", once.display());
    let workflow = format!(
        "name: w\nstages:\n  - {{name: main, argv: [sh, -c, \"{script}\"]}}\nretry: {{max_attempts: 2, backoff: 2s, retry_on_exit_codes: [75]}}\n"
    );
    let Some(mut lab) = FullDiskLab::new(&workflow) else { return };
    let id = lab.home.submit(&["--workflow", "w"]);
    let service = lab.home.service().await;
    wait_for("the run to queue again for its second attempt", T, || {
        let service = service.clone();
        async move { service.run(id).await.unwrap().filter(|r| r.attempt == 2 && r.state == RunState::Pending) }
    })
    .await;
    lab.fill_under_the_store().await;
    wait_for("the claim to fail for want of space", T, || {
        let text = lab.home.daemon_log();
        async move { text.contains("cannot schedule").then_some(()) }
    })
    .await;
    std::fs::remove_file(lab.filler()).unwrap();
    lab.settled(
        id,
        RunState::Completed,
        "stage 'main' finished",
        Exit::Code(0),
        &[
            "claim",
            "started (pid",
            "exited with code 75",
            "retry",
            "claim",
            "started (pid",
            "exited with code 0",
        ],
    )
    .await;
    assert_eq!(lab.home.run(id).await.attempt, 2);
}

/// A run whose stage starts, and ends, while the disk under the store is full: its start and
/// its end are not recorded yet. Returns the lab and the run.
async fn started_on_a_full_disk() -> Option<(FullDiskLab, uuid::Uuid, tempfile::TempDir)> {
    let flags = tempfile::tempdir().unwrap();
    let go = flags.path().join("go");
    let mut lab = FullDiskLab::new(&waits_for(&go, ""))?;
    // A first run gets the fork server going; it is then paused, so the next stage's start
    // is reported only once the disk is full.
    std::fs::write(&go, b"").unwrap();
    let first = lab.home.submit(&["--workflow", "w"]);
    lab.home.wait_settled(first, T).await;
    std::fs::remove_file(&go).unwrap();
    let server = fork_server_of(lab.home.daemon_pid().unwrap()).expect("the fork server");
    let server = rustix::process::Pid::from_raw(server).unwrap();
    rustix::process::kill_process(server, rustix::process::Signal::STOP).unwrap();
    let id = lab.home.submit(&["--workflow", "w"]);
    lab.wait_stage(id, ProcessState::Spawning).await;
    lab.fill_under_the_store().await;
    rustix::process::kill_process(server, rustix::process::Signal::CONT).unwrap();
    lab.wait_warned("could not record a stage's start").await;
    // It runs, and ends, while its start is not recorded yet.
    std::fs::write(&go, b"").unwrap();
    lab.wait_stage_gone(&go).await;
    assert_eq!(lab.home.run(id).await.state, RunState::Starting, "nothing moved ahead of its facts");
    Some((lab, id, flags))
}

#[tokio::test]
async fn a_full_disk_as_a_stage_starts_holds_its_start_and_loses_nothing() {
    let Some((mut lab, id, _flags)) = started_on_a_full_disk().await else { return };
    std::fs::remove_file(lab.filler()).unwrap();
    lab.settled(
        id,
        RunState::Completed,
        "stage 'main' finished",
        Exit::Code(0),
        &[
            "claim",
            "started (pid",
            "up (no start delay or probe)",
            "all stages up",
            "exited with code 0",
            "complete",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_start_held_by_a_full_disk_then_a_restart_still_gives_the_true_outcome() {
    let Some((mut lab, id, _flags)) = started_on_a_full_disk().await else { return };
    // The daemon dies holding the start and the exit 0, and the next one starts as soon as
    // space is back: the shim, which waits out the full disk, has not written its exit file
    // yet. It is looked for again rather than called lost (the case gave a false
    // "exited with code 0 during start-up").
    lab.home.kill_daemon();
    std::fs::remove_file(lab.filler()).unwrap();
    lab.home.start_daemon();
    lab.settled(
        id,
        RunState::Completed,
        "stage 'main' finished",
        Exit::Code(0),
        &["claim", "started (", "exited with code 0", "complete"],
    )
    .await;
}

#[tokio::test]
async fn a_full_disk_as_a_stage_comes_up_holds_it_and_loses_nothing() {
    let flags = tempfile::tempdir().unwrap();
    let go = flags.path().join("go");
    let Some(mut lab) = FullDiskLab::new(&waits_for(&go, "    start_delay: 2s\n")) else { return };
    let id = lab.home.submit(&["--workflow", "w"]);
    lab.wait_stage(id, ProcessState::Starting).await;
    lab.fill_under_the_store().await;
    lab.wait_warned("could not record a stage being up").await;
    std::fs::write(&go, b"").unwrap();
    lab.wait_stage_gone(&go).await;
    assert_eq!(lab.home.run(id).await.state, RunState::Starting, "nothing moved ahead of its facts");
    std::fs::remove_file(lab.filler()).unwrap();
    lab.settled(
        id,
        RunState::Completed,
        "stage 'main' finished",
        Exit::Code(0),
        &[
            "started (pid",
            "up (start delay of 2s elapsed)",
            "all stages up",
            "exited with code 0",
            "complete",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_full_disk_as_a_stage_exits_holds_its_end_and_loses_nothing() {
    let flags = tempfile::tempdir().unwrap();
    let go = flags.path().join("go");
    let Some(mut lab) = FullDiskLab::new(&waits_for(&go, "")) else { return };
    let id = lab.home.submit(&["--workflow", "w"]);
    lab.home.wait_state(id, RunState::Running, T).await;
    lab.fill_under_the_store().await;
    std::fs::write(&go, b"").unwrap();
    lab.wait_warned("could not record the exit").await;
    assert_eq!(lab.home.run(id).await.state, RunState::Running);
    std::fs::remove_file(lab.filler()).unwrap();
    lab.settled(
        id,
        RunState::Completed,
        "stage 'main' finished",
        Exit::Code(0),
        &["started (pid", "up (no start delay or probe)", "all stages up", "exited with code 0", "complete"],
    )
    .await;
}

#[tokio::test]
async fn a_full_disk_as_a_run_stops_holds_its_events_and_loses_nothing() {
    // The stage ignores SIGTERM: the stop ends in a SIGKILL after the grace, on a full disk.
    let workflow = "name: w\nstop_grace: 2s\nstages:\n  - name: main\n    argv: [sh, -c, \"trap '' TERM; while true; do sleep 0.05; done\"]\n";
    let Some(mut lab) = FullDiskLab::new(workflow) else { return };
    let id = lab.home.submit(&["--workflow", "w"]);
    lab.home.wait_state(id, RunState::Running, T).await;
    lab.home.cli_ok(&["run", "stop", &id.to_string()]);
    let service = lab.home.service().await;
    wait_for("the SIGTERM", T, || {
        let service = service.clone();
        async move {
            let events = service.events_after(id, 0).await.unwrap();
            events.iter().any(|e| e.message.starts_with("sent SIGTERM")).then_some(())
        }
    })
    .await;
    lab.fill_under_the_store().await;
    lab.wait_warned("could not record an event").await;
    stage_process_gone(&mut lab.home, id).await;
    assert_eq!(lab.home.run(id).await.state, RunState::Stopping, "nothing moved ahead of its facts");
    std::fs::remove_file(lab.filler()).unwrap();
    lab.settled(
        id,
        RunState::Stopped,
        "stop requested",
        Exit::Signal(9),
        &[
            "stop",
            "sent SIGTERM",
            "grace period over: sent SIGKILL",
            "exited with signal 9",
            "all stages gone",
        ],
    )
    .await;
}

#[tokio::test]
async fn eight_runs_starting_as_the_disk_fills_all_complete_with_every_event() {
    // The case: short runs of a one-stage workflow, the disk full while they start.
    let workflow = "name: w\nstages:\n  - {name: w, argv: [sh, -c, \"echo hello\"]}\n";
    let Some(mut lab) = FullDiskLab::new(workflow) else { return };
    // A first run gets the fork server going; paused, it makes the eight start on a full disk.
    let first = lab.home.submit(&["--workflow", "w"]);
    lab.home.wait_settled(first, T).await;
    let server = fork_server_of(lab.home.daemon_pid().unwrap()).expect("the fork server");
    let server = rustix::process::Pid::from_raw(server).unwrap();
    rustix::process::kill_process(server, rustix::process::Signal::STOP).unwrap();
    let out = lab.home.cli_ok(&["run", "start", "--workflow", "w", "--count", "8"]);
    let ids: Vec<uuid::Uuid> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    for &id in &ids {
        lab.wait_stage(id, ProcessState::Spawning).await;
    }
    lab.fill_under_the_store().await;
    rustix::process::kill_process(server, rustix::process::Signal::CONT).unwrap();
    lab.wait_warned("could not record").await;
    std::fs::remove_file(lab.filler()).unwrap();
    for id in ids {
        lab.settled(
            id,
            RunState::Completed,
            "stage 'w' finished",
            Exit::Code(0),
            &["claim", "started (pid", "up (no start delay or probe)", "exited with code 0", "complete"],
        )
        .await;
    }
}
