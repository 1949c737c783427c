//! Truthful outcomes under faults: a home whose disk fills up while stages exit, an exit file
//! forged beside a live stage, and a run's end time when the daemon was down at the exit.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lachesis::launch::process::{Liveness, liveness};
use lachesis::launch::status::{Durability, Finished, write_atomic};
use lachesis::model::{Exit, ProcessState, RunState, now_millis};

use crate::support::{TestHome, assert_no_stage_alive, wait_for};

const T: Duration = Duration::from_secs(30);

/// A tmpfs mounted for one test, unmounted when dropped (also when the test fails).
pub(crate) struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// None (and a note on stderr) where mounting is not permitted.
    pub(crate) fn mount(size: &str) -> Option<Tmpfs> {
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

    pub(crate) fn path(&self) -> &Path {
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
pub(crate) fn fill(file: &Path, leave: u64) {
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
        let url = crate::support::fresh_postgres().await?;
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

pub(crate) async fn stage_process_gone(home: &mut TestHome, id: uuid::Uuid) {
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
    let service = home.service().await;
    wait_for("the events of the ignored file and the re-attach", T, || {
        let service = service.clone();
        async move {
            let messages: Vec<_> =
                service.events_after(id, 0).await.unwrap().into_iter().map(|e| e.message).collect();
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
