//! The daemon as a process a user leaves alone overnight: its log on a full disk, on a pipe
//! whose reader left, on closed descriptors; SIGHUP; started with `--detach` from a shell that
//! exits at once. In each, runs start at that very moment, and each must end truly.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lachesis::model::{Exit, RunState};
use uuid::Uuid;

use crate::faults::{Tmpfs, fill};
use crate::support::{BIN, TestHome, stderr, wait_for};

const T: Duration = Duration::from_secs(60);
/// Runs started in each burst.
const BURST: usize = 6;

/// A home with a quick workflow that exits 0 and one that exits 3.
fn quick_home() -> TestHome {
    let home = TestHome::new();
    home.workflow("ok", "name: ok\nstages:\n  - {name: main, argv: [sh, -c, \"echo hi; exit 0\"]}\n");
    home.workflow("bad", "name: bad\nstages:\n  - {name: main, argv: [sh, -c, \"echo hi; exit 3\"]}\n");
    home
}

/// A foreground daemon of `home`, its stdio as `stdio` sets it; killed when dropped.
struct Foreground(Child);

impl Foreground {
    fn spawn(home: &TestHome, stdio: impl FnOnce(&mut Command)) -> Foreground {
        let mut command = home.command(&["daemon", "--stop-grace", "3s", "--scan-interval", "500ms"]);
        command.stdin(Stdio::null());
        stdio(&mut command);
        Foreground(command.spawn().unwrap())
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    fn assert_alive(&mut self) {
        assert_eq!(self.0.try_wait().unwrap(), None, "the daemon exited");
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until the home's daemon answers (its status is ok).
async fn wait_answering(home: &TestHome) {
    wait_for("the daemon to answer", T, || {
        let ok = home.cli(&["daemon", "status"]).status.success();
        async move { ok.then_some(()) }
    })
    .await;
}

/// Starts `BURST` runs at once (through the daemon, or the store when it does not answer);
/// which of them exit 0.
fn burst(home: &TestHome) -> Vec<(Uuid, bool)> {
    (0..BURST)
        .map(|i| {
            let ok = i % 2 == 0;
            (home.submit(&["--workflow", if ok { "ok" } else { "bad" }]), ok)
        })
        .collect()
}

/// Every run of the burst ended as its stage did.
async fn all_end_truly(home: &mut TestHome, runs: &[(Uuid, bool)]) {
    for (id, ok) in runs {
        let (run, stages) = home.wait_settled(*id, T).await;
        let (state, exit, reason) = match ok {
            true => (RunState::Completed, Exit::Code(0), "stage 'main' finished"),
            false => (RunState::Failed, Exit::Code(3), "stage 'main' exited with code 3"),
        };
        assert_eq!((run.state, run.reason.as_deref()), (state, Some(reason)), "run {id}");
        assert_eq!(stages[0].record.exit, Some(exit), "run {id}");
    }
}

fn signal(pid: i32, signal: rustix::process::Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), signal).unwrap();
}

fn fd_target(pid: i32, fd: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).map(|p| p.display().to_string()).unwrap_or_default()
}

/// A log file as a shell's `2>>` opens it.
fn appending(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test]
async fn a_log_on_a_full_disk_costs_lines_never_the_daemon() {
    let Some(tmpfs) = Tmpfs::mount("1m") else { return };
    let mut home = quick_home();
    let log = tmpfs.path().join("daemon.log");
    let file = appending(&log);
    let mut daemon = Foreground::spawn(&home, |c| {
        c.stdout(Stdio::null()).stderr(file);
    });
    wait_answering(&home).await;
    // The log's last page is filled too (a tmpfs writes into a page it has without new space).
    let len = std::fs::metadata(&log).unwrap().len() as usize;
    let pad = (4096 - len % 4096) % 4096;
    if pad > 0 {
        let line = format!("{}\n", "#".repeat(pad - 1));
        std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(line.as_bytes()).unwrap();
    }
    fill(&tmpfs.path().join("filler"), 0);
    let runs = burst(&home);
    all_end_truly(&mut home, &runs).await;
    daemon.assert_alive();
    // Space returns: the next line that lands says what was lost, and why.
    std::fs::remove_file(tmpfs.path().join("filler")).unwrap();
    let after = burst(&home);
    all_end_truly(&mut home, &after).await;
    wait_for("the daemon to say how many lines it dropped", T, || {
        let text = read(&log);
        async move { text.lines().any(|l| l.contains("log lines were dropped (disk full)")).then_some(()) }
    })
    .await;
    daemon.assert_alive();
}

#[tokio::test]
async fn a_log_pipe_whose_reader_exits_costs_lines_never_the_daemon() {
    let mut home = quick_home();
    let mut daemon = Foreground::spawn(&home, |c| {
        c.stdout(Stdio::null()).stderr(Stdio::piped());
    });
    // The reader sees the daemon start, then goes away (as `tee` would).
    let mut reader = std::io::BufReader::new(daemon.0.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("daemon started") {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the daemon's stderr closed before it started");
    }
    // A write to the gone reader is an error (EPIPE) it counts, not a signal that ends it.
    let ignored = read(Path::new(&format!("/proc/{}/status", daemon.pid())))
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:").map(|m| u64::from_str_radix(m.trim(), 16).unwrap()))
        .unwrap();
    assert_ne!(ignored & (1 << (libc::SIGPIPE - 1)), 0, "SIGPIPE is ignored");
    drop(reader);
    let runs = burst(&home);
    all_end_truly(&mut home, &runs).await;
    daemon.assert_alive();
    wait_answering(&home).await;
}

#[tokio::test]
async fn closed_stdout_and_stderr_cost_nothing_and_no_file_takes_their_place() {
    let mut home = quick_home();
    let mut daemon = Foreground::spawn(&home, |c| {
        // The same daemon command, through a shell that closes both (`>&- 2>&-`) and execs it.
        let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let mut shell = Command::new("sh");
        shell.arg("-c").arg("exec \"$0\" \"$@\" >&- 2>&-").arg(BIN).args(args);
        for (key, value) in c.get_envs() {
            match value {
                Some(value) => shell.env(key, value),
                None => shell.env_remove(key),
            };
        }
        shell.stdin(Stdio::null());
        *c = shell;
    });
    wait_answering(&home).await;
    // What the daemon writes to stdout and stderr goes nowhere, not into a file it opened.
    assert_eq!(fd_target(daemon.pid(), 1), "/dev/null");
    assert_eq!(fd_target(daemon.pid(), 2), "/dev/null");
    let runs = burst(&home);
    all_end_truly(&mut home, &runs).await;
    daemon.assert_alive();
}

#[tokio::test]
async fn sighup_leaves_a_foreground_daemon_running() {
    let mut home = quick_home();
    let log = home.path().join("daemon.log");
    let file = appending(&log);
    let mut daemon = Foreground::spawn(&home, |c| {
        c.stdout(Stdio::null()).stderr(file);
    });
    wait_answering(&home).await;
    let runs = burst(&home);
    signal(daemon.pid(), rustix::process::Signal::HUP);
    all_end_truly(&mut home, &runs).await;
    wait_for("the daemon to say it ignored SIGHUP", T, || {
        let said = read(&log).contains("SIGHUP ignored");
        async move { said.then_some(()) }
    })
    .await;
    daemon.assert_alive();
}

/// `daemon status --json` of `home`.
fn daemon_status(home: &TestHome) -> (bool, serde_json::Value) {
    let out = home.cli(&["daemon", "status", "--json"]);
    (out.status.success(), serde_json::from_slice(&out.stdout).unwrap())
}

fn detach(home: &TestHome) -> i32 {
    let out = home.cli_ok(&["daemon", "--detach", "--stop-grace", "3s", "--scan-interval", "500ms"]);
    out.trim().parse().unwrap()
}

fn stop(home: &TestHome) {
    let out = home.cli(&["daemon", "stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test]
async fn sighup_reopens_a_detached_daemons_log_as_logrotate_expects() {
    let mut home = quick_home();
    let pid = detach(&home);
    let log = home.path().join("daemon.log");
    let moved = home.path().join("daemon.log.1");
    std::fs::rename(&log, &moved).unwrap();
    let runs = burst(&home);
    signal(pid, rustix::process::Signal::HUP);
    wait_for("a new daemon.log saying it was reopened", T, || {
        let text = read(&log);
        async move { text.contains("SIGHUP: reopened the log").then_some(()) }
    })
    .await;
    all_end_truly(&mut home, &runs).await;
    // Lines after the reopen go to the new file: the runs started now are claimed there.
    let after = burst(&home);
    all_end_truly(&mut home, &after).await;
    let text = read(&log);
    assert!(text.lines().filter(|l| l.contains("claimed")).count() >= after.len(), "{text}");
    assert!(read(&moved).contains("daemon started"));
    assert_eq!(daemon_status(&home).1["pid"], pid);
    stop(&home);
}

#[tokio::test]
async fn a_detached_daemon_outlives_the_shell_that_started_it_and_stops_on_request() {
    let mut home = quick_home();
    // No colour in a file, even where NO_COLOR would allow it.
    home.environ.push(("NO_COLOR".into(), String::new()));
    // The shell exits as soon as `--detach` returns; its pipes close behind it.
    let shell = home.command(&["daemon", "--detach", "--json", "--scan-interval", "500ms"]);
    let args: Vec<String> = shell.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let mut sh = Command::new("sh");
    sh.arg("-c").arg("\"$0\" \"$@\"; exit $?").arg(BIN).args(args);
    sh.envs(shell.get_envs().filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))));
    sh.env_remove("LACHESIS_DATABASE_URL").env_remove("LACHESIS_WORKFLOWS");
    let out = sh.stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let started: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pid = started["pid"].as_i64().unwrap() as i32;
    let log = home.path().join("daemon.log");
    assert_eq!(started["log"], log.display().to_string());
    // Its own session, no terminal, nothing of the shell's: /dev/null in and out, the log as stderr.
    let stat = read(Path::new(&format!("/proc/{pid}/stat")));
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    assert_eq!(
        (fields[3], fields[4]),
        (pid.to_string().as_str(), "0"),
        "session {} and tty {}",
        fields[3],
        fields[4]
    );
    assert_eq!((fd_target(pid, 0), fd_target(pid, 1)), ("/dev/null".into(), "/dev/null".into()));
    assert_eq!(fd_target(pid, 2), log.display().to_string());
    // Named as users look for it (`pgrep lachesis`, `top`), though it re-executed /proc/self/exe.
    assert_eq!(read(Path::new(&format!("/proc/{pid}/comm"))), "lachesis\n");
    let pgrep = Command::new("pgrep").args(["-x", "lachesis"]).output();
    if let Ok(pgrep) = pgrep {
        let pids = String::from_utf8_lossy(&pgrep.stdout).to_string();
        assert!(pids.lines().any(|line| line == pid.to_string()), "pgrep -x lachesis: {pids}");
    }
    let runs = burst(&home);
    all_end_truly(&mut home, &runs).await;

    let (ok, status) = daemon_status(&home);
    assert!(ok, "{status}");
    assert_eq!(status["pid"], pid);
    assert_eq!(status["running"], true);
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["log"], log.display().to_string());
    assert_eq!(status["health"]["status"], "ok");
    assert!(status["store"].as_str().unwrap().starts_with("sqlite://"), "{status}");
    assert_eq!(
        std::fs::metadata(&log)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
            .unwrap(),
        0o600
    );

    // A second one is refused in one line, and the first runs on.
    let again = home.cli(&["daemon", "--detach"]);
    let err = stderr(&again);
    assert!(!again.status.success() && err.trim().lines().count() == 1, "{err}");
    assert!(err.contains(&format!("already running on {} (pid {pid})", home.path().display())), "{err}");

    stop(&home);
    assert!(crate::support::gone_or_zombie(pid), "the daemon is gone when stop returns");
    let (ok, status) = daemon_status(&home);
    assert!(!ok && status["running"] == false, "{status}");
    let again = home.cli(&["daemon", "stop"]);
    assert!(stderr(&again).contains("no daemon is running"), "{}", stderr(&again));
    assert_eq!(again.status.code(), Some(5), "no daemon: its own exit code");
    assert_eq!(home.cli(&["daemon", "status"]).status.code(), Some(5));
    let text = read(&log);
    assert!(text.contains("SIGTERM: daemon exits") && !text.contains('\x1b'), "{text}");
}

/// A new pseudo-terminal: its master, and its slave opened (not yet anyone's controlling one).
fn pseudo_terminal() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // SAFETY: plain libc calls on a descriptor this function owns; ptsname_r writes into `name`.
    let (master, path) = unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        assert_eq!(libc::grantpt(fd), 0);
        assert_eq!(libc::unlockpt(fd), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(fd, name.as_mut_ptr(), name.len()), 0);
        let path = std::ffi::CStr::from_ptr(name.as_ptr()).to_str().unwrap().to_owned();
        (std::fs::File::from_raw_fd(fd), path)
    };
    let slave =
        std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOCTTY).open(path).unwrap();
    (master, slave)
}

#[tokio::test]
async fn a_terminal_that_hangs_up_costs_lines_never_the_daemon() {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut home = quick_home();
    // Colour is for terminals: an empty NO_COLOR does not turn it off.
    home.environ.push(("NO_COLOR".into(), String::new()));
    let (mut master, slave) = pseudo_terminal();
    let mut daemon = Foreground::spawn(&home, |c| {
        c.stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave.try_clone().unwrap());
        // As a login shell's job would be: the terminal is its session's controlling one.
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                rustix::process::setsid()?;
                if libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    drop(slave);
    // The terminal shows the daemon start, in colour.
    let mut shown = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&shown).contains("daemon started") {
        let n = master.read(&mut buf).unwrap();
        assert!(n > 0, "the terminal closed before the daemon started");
        shown.extend_from_slice(&buf[..n]);
    }
    assert!(shown.windows(2).any(|w| w == b"\x1b["), "{}", String::from_utf8_lossy(&shown));
    wait_answering(&home).await;
    // The terminal goes (the ssh session ends): SIGHUP, then every write fails.
    drop(master);
    let runs = burst(&home);
    all_end_truly(&mut home, &runs).await;
    daemon.assert_alive();
}

#[test]
fn daemon_commands_refuse_what_makes_no_sense_in_one_line() {
    let home = TestHome::new();
    for args in [
        &["daemon", "--json"][..],
        &["daemon", "--detach", "--install-service"],
        &["daemon", "--max-parallel", "2", "stop"],
        &["daemon", "stop", "--timeout", "0s"],
    ] {
        let out = home.cli(args);
        assert!(!out.status.success(), "{args:?} was accepted");
    }
    let out = home.cli(&["daemon", "stop"]);
    let err = stderr(&out);
    assert!(!out.status.success() && err.trim().lines().count() == 1, "{err}");
    assert!(err.contains(&format!("no daemon is running on {}", home.path().display())), "{err}");
    let out = home.cli(&["daemon", "status"]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("no daemon is running on {}", home.path().display())
    );
    // A record left by a daemon that was killed names nobody: no one is signalled.
    let stale = serde_json::json!({
        "process": {"pid": std::process::id(), "start_time": 1, "boot_id": "another boot"},
        "started_at": 0, "version": "0.0.0", "store": "sqlite:///x", "log": null, "node": "n"
    });
    std::fs::write(home.path().join("daemon.json"), stale.to_string()).unwrap();
    let out = home.cli(&["daemon", "stop"]);
    assert!(stderr(&out).contains("no daemon is running"), "{}", stderr(&out));
}
