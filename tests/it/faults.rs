//! Truthful outcomes under faults: a home whose disk fills up while stages exit, an exit file
//! forged beside a live stage, and a run's end time when the daemon was down at the exit.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lachesis::launch::process::{Liveness, liveness};
use lachesis::launch::status::{Durability, Finished, write_atomic};
use lachesis::model::{Exit, ProcessState, RunState, now_millis};

use crate::support::{TestHome, assert_no_stage_alive, fork_server_of, processes_mentioning, wait_for};

const T: Duration = Duration::from_secs(30);

/// A tmpfs mounted for one test, unmounted when dropped (also when the test fails).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// None (and a note on stderr) where mounting is not permitted.
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(out) if out.status.success() => Some(Tmpfs { dir }),
            Ok(out) => {
                eprintln!("skipped: cannot mount a tmpfs: {}", String::from_utf8_lossy(&out.stderr).trim());
                None
            }
            Err(err) => {
                eprintln!("skipped: cannot run mount: {err}");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy, so a process still holding a file open cannot keep the mount behind.
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// Fills the filesystem holding `dir` with `file` until at most `leave` bytes are free.
fn fill(file: &Path, leave: u64) {
    let mut out = std::fs::OpenOptions::new().create(true).append(true).open(file).unwrap();
    let chunk = vec![0u8; 4096];
    loop {
        let free = lachesis::launch::space::space_at(file.parent().unwrap()).unwrap().available;
        if free <= leave {
            return;
        }
        let n = (free - leave).min(chunk.len() as u64) as usize;
        match out.write_all(&chunk[..n]) {
            Ok(()) => {}
            Err(err) if lachesis::launch::space::is_out_of_space(&err) => return,
            Err(err) => panic!("cannot fill {}: {err}", file.display()),
        }
    }
}

/// A stage that prints a tick until `go` exists, then exits with `code`.
fn waiting_stage(name: &str, go: &Path, code: i32) -> String {
    format!(
        "name: {name}\nstages:\n  - name: main\n    argv: [sh, -c, \"while [ ! -e {} ]; do echo tick; sleep 0.05; done; echo bye; exit {code}\"]\n",
        go.display()
    )
}

fn status_leftovers(run_dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(run_dir.join(".status"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().contains(".tmp")))
        .collect()
}

/// Waits for the run to settle and checks its state, reason, stage exit and status files.
async fn settled_as(
    home: &mut TestHome,
    id: uuid::Uuid,
    run_dir: &Path,
    (state, exit, reason): (RunState, Exit, &str),
) {
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(
        (run.state, run.reason.as_deref()),
        (state, Some(reason)),
        "run {}; daemon log:\n{}",
        run.spec.name,
        home.daemon_log()
    );
    assert_eq!(stages[0].record.state, ProcessState::Exited);
    assert_eq!(stages[0].record.exit, Some(exit));
    assert_no_stage_alive(&stages);
    assert_eq!(status_leftovers(run_dir), Vec::<PathBuf>::new(), "no temporary status file stays");
}

/// A daemon whose home is a 16 MB tmpfs and whose store is a scratch PostgreSQL database, with
/// one run of `quick` running: its stage exits with `code` once `go` exists. None (the test
/// skips) where a tmpfs can't be mounted or PostgreSQL isn't there.
struct FullHomeLab {
    // Fields drop in order: the home (inside the tmpfs) before the tmpfs.
    home: TestHome,
    id: uuid::Uuid,
    go: PathBuf,
    _flags: tempfile::TempDir,
    _tmpfs: Tmpfs,
}

impl FullHomeLab {
    async fn running(code: i32) -> Option<FullHomeLab> {
        let tmpfs = Tmpfs::mount("16m")?;
        let url = crate::store::fresh_postgres().await?;
        let flags = tempfile::tempdir().unwrap();
        let go = flags.path().join("go");
        let mut home = TestHome::new();
        home.dir = tempfile::tempdir_in(tmpfs.path()).unwrap();
        home.database_url = Some(url);
        home.workflow("quick", &waiting_stage("quick", &go, code));
        home.start_daemon();
        let id = home.submit(&["--workflow", "quick"]);
        home.wait_state(id, RunState::Running, T).await;
        Some(FullHomeLab { home, id, go, _flags: flags, _tmpfs: tmpfs })
    }
}

async fn stage_process_gone(home: &mut TestHome, id: uuid::Uuid) {
    let process = home.stages(id).await[0].record.process.clone().unwrap();
    wait_for("the stage process to exit", T, || {
        let gone = liveness(&process) != Liveness::Alive;
        async move { gone.then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn a_full_disk_delays_but_never_falsifies_the_recorded_exits() {
    let Some(tmpfs) = Tmpfs::mount("48m") else { return };
    let flags = tempfile::tempdir().unwrap();
    let mut home = TestHome::new();
    home.dir = tempfile::tempdir_in(tmpfs.path()).unwrap();
    let (go_live, go_down) = (flags.path().join("go-live"), flags.path().join("go-down"));
    home.workflow("live-ok", &waiting_stage("live-ok", &go_live, 0));
    home.workflow("live-bad", &waiting_stage("live-bad", &go_live, 3));
    home.workflow("down-ok", &waiting_stage("down-ok", &go_down, 0));
    home.workflow("down-bad", &waiting_stage("down-bad", &go_down, 5));
    home.start_daemon();
    let ids: Vec<_> = ["live-ok", "live-bad", "down-ok", "down-bad"]
        .iter()
        .map(|w| home.submit(&["--workflow", w]))
        .collect();
    for id in &ids {
        home.wait_state(*id, RunState::Running, T).await;
    }
    let run_dirs: Vec<_> = {
        let mut dirs = Vec::new();
        for id in &ids {
            dirs.push(home.run(*id).await.run_dir);
        }
        dirs
    };
    let filler = home.path().join("filler");

    // Below the reserve, logs stop growing (a marker says so) while the store still has room.
    let reserve = lachesis::launch::space::space_at(home.path()).unwrap().reserve();
    fill(&filler, reserve / 2);
    let log = home.stages(ids[0]).await[0].log_path.clone();
    const MARKER: &str = "[lachesis: log output dropped from here";
    wait_for("the log's drop marker", T, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        async move { text.contains(MARKER).then_some(()) }
    })
    .await;

    let doctor: serde_json::Value = serde_json::from_slice(&home.cli(&["doctor", "--json"]).stdout).unwrap();
    let disk = doctor["checks"].as_array().unwrap().iter().find(|c| c["name"] == "disk").cloned().unwrap();
    assert_eq!(disk["ok"], false, "doctor warns below the reserve: {disk}");
    assert!(disk["detail"].as_str().unwrap().contains("reserve"), "{disk}");

    // Full: the first two stages exit while the daemon runs, and it cannot write a byte.
    fill(&filler, 0);
    std::fs::write(&go_live, b"").unwrap();
    stage_process_gone(&mut home, ids[0]).await;
    stage_process_gone(&mut home, ids[1]).await;
    // Space returns: the daemon, which kept the exits it was told over the shims' pipes,
    // commits them.
    std::fs::remove_file(&filler).unwrap();
    let want = [
        (RunState::Completed, Exit::Code(0), "stage 'main' finished"),
        (RunState::Failed, Exit::Code(3), "stage 'main' exited with code 3"),
        (RunState::Completed, Exit::Code(0), "stage 'main' finished"),
        (RunState::Failed, Exit::Code(5), "stage 'main' exited with code 5"),
    ];
    for i in 0..2 {
        settled_as(&mut home, ids[i], &run_dirs[i], want[i]).await;
    }

    // Full again; the next two exit while no daemon runs: their shims wait for space to
    // write the status, and stay alive meanwhile.
    fill(&filler, 0);
    home.kill_daemon();
    std::fs::write(&go_down, b"").unwrap();
    stage_process_gone(&mut home, ids[2]).await;
    stage_process_gone(&mut home, ids[3]).await;
    let shim = home.stages(ids[2]).await[0].record.shim.clone().unwrap();
    assert_eq!(liveness(&shim), Liveness::Alive, "a shim stays until its exit is on disk");
    std::fs::remove_file(&filler).unwrap();
    home.start_daemon();
    for i in 2..4 {
        settled_as(&mut home, ids[i], &run_dirs[i], want[i]).await;
    }

    let text = std::fs::read_to_string(&log).unwrap();
    let after = &text[text.find(MARKER).unwrap()..];
    assert!(text.starts_with("tick\n"), "output reached the log before the disk was low: {text}");
    assert!(!after.contains("tick"), "the log grew after its drop marker: {after}");
}

#[tokio::test]
async fn a_forged_exit_file_does_not_orphan_a_live_stage() {
    let mut home = TestHome::new();
    home.workflow(
        "server",
        "name: server\nstop_grace: 3s\nstages:\n  - {name: main, argv: [sleep, \"60\"]}\n",
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "server"]);
    home.wait_state(id, RunState::Running, T).await;
    home.kill_daemon();
    let run_dir = home.run(id).await.run_dir;
    let forged = Finished { exit: Some(Exit::Code(0)), spawn_error: None, ended_at: now_millis() };
    write_atomic(&run_dir.join(".status/main.exit.json"), &forged, Durability::Cached).unwrap();

    home.start_daemon();
    let store = home.store().await;
    wait_for("the events of the ignored file and the re-attach", T, || {
        let store = store.clone();
        async move {
            let messages: Vec<_> =
                store.events(id, 0).await.unwrap().into_iter().map(|e| e.message).collect();
            let said = |prefix: &str| messages.iter().any(|m| m.starts_with(prefix));
            (said("ignored main.exit.json") && said("re-attached after a daemon restart")).then_some(messages)
        }
    })
    .await;
    let run = home.run(id).await;
    assert_eq!(run.state, RunState::Running, "{:?}", run.reason);
    let process = home.stages(id).await[0].record.process.clone().unwrap();
    assert_eq!(liveness(&process), Liveness::Alive);

    // Still supervised: stopping the run stops the stage.
    home.cli_ok(&["run", "stop", &id.to_string()]);
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Stopped, "{:?}", run.reason);
    assert_eq!(stages[0].record.exit, Some(Exit::Signal(15)));
    assert_no_stage_alive(&stages);
}

#[tokio::test]
async fn a_run_ends_at_its_deciding_exit_even_when_the_daemon_was_down() {
    let flags = tempfile::tempdir().unwrap();
    let go = flags.path().join("go");
    let mut home = TestHome::new();
    home.workflow("late", &waiting_stage("late", &go, 0));
    home.start_daemon();
    let id = home.submit(&["--workflow", "late"]);
    home.wait_state(id, RunState::Running, T).await;
    home.kill_daemon();
    std::fs::write(&go, b"").unwrap();
    let exit_file = home.run(id).await.run_dir.join(".status/main.exit.json");
    let finished: Finished = wait_for("the shim to record the exit", T, || {
        let read = std::fs::read(&exit_file).ok().and_then(|b| serde_json::from_slice(&b).ok());
        async move { read }
    })
    .await;
    // The daemon comes back well after the exit.
    wait_for("time to pass after the exit", T, || async move {
        (now_millis() > finished.ended_at + 1500).then_some(())
    })
    .await;
    home.start_daemon();
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    assert_eq!(stages[0].record.ended_at, Some(finished.ended_at));
    assert_eq!(run.ended_at, Some(finished.ended_at), "the run ends at its deciding exit, not when noticed");
}

#[tokio::test]
async fn with_the_store_elsewhere_an_exit_on_a_full_home_is_recorded_at_once() {
    let Some(mut lab) = FullHomeLab::running(4).await else { return };
    let (home, id, go) = (&mut lab.home, lab.id, lab.go.clone());
    let filler = home.path().join("filler");
    fill(&filler, 0);
    std::fs::write(&go, b"").unwrap();
    // The shim's pipe carries the exit to the daemon; PostgreSQL has room for it.
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.reason.as_deref(), Some("stage 'main' exited with code 4"), "{}", home.daemon_log());
    assert_eq!(stages[0].record.exit, Some(Exit::Code(4)));
    let shim = stages[0].record.shim.clone().unwrap();
    assert_eq!(liveness(&shim), Liveness::Alive, "the shim still waits to write its exit file");
    std::fs::remove_file(&filler).unwrap();
    wait_for("the shim to write its file and exit", T, || {
        let gone = liveness(&shim) != Liveness::Alive;
        async move { gone.then_some(()) }
    })
    .await;
    let exit_file = run.run_dir.join(".status/main.exit.json");
    let finished: Finished = serde_json::from_slice(&std::fs::read(exit_file).unwrap()).unwrap();
    assert_eq!((finished.exit, Some(finished.ended_at)), (Some(Exit::Code(4)), stages[0].record.ended_at));
}

#[tokio::test]
async fn an_exit_lost_to_a_full_disk_says_so_rather_than_vanished() {
    let Some(mut lab) = FullHomeLab::running(0).await else { return };
    let (home, id, go) = (&mut lab.home, lab.id, lab.go.clone());
    home.kill_daemon();
    fill(&home.path().join("filler"), 0);
    std::fs::write(&go, b"").unwrap();
    stage_process_gone(home, id).await;
    // The shim, waiting for space to write the exit file, is killed: nobody knows the status.
    let shim = home.stages(id).await[0].record.shim.clone().unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(shim.pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    wait_for("the shim to die", T, || {
        let gone = liveness(&shim) != Liveness::Alive;
        async move { gone.then_some(()) }
    })
    .await;
    home.start_daemon();
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Failed);
    assert_eq!(
        run.reason.as_deref(),
        Some(
            "stage 'main' lost: could not record the exit: disk full (its shim ended before space returned)"
        ),
        "{}",
        home.daemon_log()
    );
}

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
        "name: w\nstages:\n  - {{name: main, argv: [sh, -c, \"{script}\"]}}\nretry: {{max_attempts: 2, backoff: 1s, retry_on_exit_codes: [75]}}\n"
    );
    let Some(mut lab) = FullDiskLab::new(&workflow) else { return };
    let id = lab.home.submit(&["--workflow", "w"]);
    let store = lab.home.store().await;
    wait_for("the run to queue again for its second attempt", T, || {
        let store = store.clone();
        async move { store.run(id).await.unwrap().filter(|r| r.attempt == 2 && r.state == RunState::Pending) }
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
    let store = lab.home.store().await;
    wait_for("the stage to be spawning", T, || {
        let store = store.clone();
        async move {
            let stages = store.stages(id).await.unwrap();
            (stages[0].record.state == ProcessState::Spawning).then_some(())
        }
    })
    .await;
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
    // The daemon dies holding the start and the exit 0; once space is back the shim writes
    // its exit file, and the next daemon finds it (the issue's case: a false "exited with code
    // 0 during start-up").
    lab.home.kill_daemon();
    std::fs::remove_file(lab.filler()).unwrap();
    let exit_file = lab.home.run(id).await.run_dir.join(".status/main.exit.json");
    wait_for("the shim to write its exit file", T, || {
        let there = exit_file.exists();
        async move { there.then_some(()) }
    })
    .await;
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
    let Some(mut lab) = FullDiskLab::new(&waits_for(&go, "    start_delay: 1s\n")) else { return };
    let id = lab.home.submit(&["--workflow", "w"]);
    let store = lab.home.store().await;
    wait_for("the stage to be starting", T, || {
        let store = store.clone();
        async move {
            let stages = store.stages(id).await.unwrap();
            (stages[0].record.state == ProcessState::Starting).then_some(())
        }
    })
    .await;
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
            "up (start delay of 1s elapsed)",
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
    let workflow = "name: w\nstop_grace: 1s\nstages:\n  - name: main\n    argv: [sh, -c, \"trap '' TERM; while true; do sleep 0.05; done\"]\n";
    let Some(mut lab) = FullDiskLab::new(workflow) else { return };
    let id = lab.home.submit(&["--workflow", "w"]);
    lab.home.wait_state(id, RunState::Running, T).await;
    lab.home.cli_ok(&["run", "stop", &id.to_string()]);
    let store = lab.home.store().await;
    wait_for("the SIGTERM", T, || {
        let store = store.clone();
        async move {
            let events = store.events(id, 0).await.unwrap();
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
