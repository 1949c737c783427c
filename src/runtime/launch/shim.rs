//! `lachesis-shim` (or `lachesis shim`): the small parent that outlives the daemon. It starts the stage in its own
//! process group with output appended to the stage log, reports who it started, waits, and
//! records the exit status atomically (the conmon / containerd-shim pattern). A fork of the
//! stage the machine refuses for want of processes (EAGAIN) is tried again with a backoff
//! (`fork_wait`); still refused, the shim reports `Busy`, and the daemon's own backoff takes over.
//!
//! The exit reaches the daemon by two paths. The daemon that started us reads our stdout, so the
//! status goes there first: a pipe needs no disk space. Then it goes to the exit file, for a
//! daemon that restarts; on a full disk we keep retrying and stay alive until it lands, so a
//! restarted daemon finds us alive and re-attaches rather than calling the stage lost. (Our own
//! exit code cannot carry the status: a re-attached daemon is not our parent and cannot read it.)
//!
//! The shim's exit code is its own health: 0 once the stage's status is in the exit file, 1 if
//! the shim failed (its message on stderr).

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::process::identity_of;
use super::space::{ReservedLog, is_out_of_space};
use super::status::{Durability, Finished, StageFiles, Started, write_atomic};
use crate::logs::limits::MAX_FILES;
use crate::logs::{RotatingLog, Rotation};
use crate::model::{Exit, now_millis};

/// What the shim tells the daemon on its stdout, one JSON line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShimReport {
    Started(Started),
    Failed(String),
    /// No shim could be made for now (the fork server met the machine's process or memory
    /// limit): worth trying again, never the stage's fault.
    Busy(String),
    /// The stage ended; sent before the exit file is written, which may wait for disk space.
    Exited(Finished),
}

#[derive(Debug)]
pub struct ShimArgs {
    pub files: StageFiles,
    pub log: PathBuf,
    /// `--log-max-size BYTES --log-max-files N`; the daemon's default when absent.
    pub rotation: Rotation,
    pub cwd: PathBuf,
    pub argv: Vec<String>,
}

/// The program of `lachesis-shim`, and of `lachesis shim` (the same, for a daemon whose
/// executable has no `lachesis-shim` beside it): parses the command line `spawn` builds and
/// runs the shim. Exit code 2 for a command line it cannot read.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let mut args = args.into_iter().peekable();
    if args.peek().is_some_and(|first| first == "--help" || first == "-h") {
        println!("{USAGE}");
        return 0;
    }
    match parse_args(args) {
        Ok(args) => run(args),
        Err(message) => {
            eprintln!("lachesis shim: {message}");
            eprintln!("{USAGE}");
            2
        }
    }
}

const USAGE: &str = "usage: lachesis-shim --started FILE --exit FILE --log FILE [--log-max-size BYTES] \
                     [--log-max-files N] --cwd DIR -- PROGRAM [ARGS…]";

/// `--started FILE --exit FILE --log FILE [--log-max-size BYTES] [--log-max-files N] --cwd DIR
/// -- PROGRAM [ARGS…]`, the options in any order, each once. No option parser: this runs once per
/// stage, and must start fast.
pub fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<ShimArgs, String> {
    let mut args = args.into_iter();
    let (mut started, mut exit, mut log, mut cwd) = (None, None, None, None);
    let (mut max_size, mut max_files) = (None, None);
    loop {
        let Some(flag) = args.next() else { return Err("no `--` before the stage's command".into()) };
        let limit = match flag.to_str() {
            Some("--log-max-size") => Some(&mut max_size),
            Some("--log-max-files") => Some(&mut max_files),
            _ => None,
        };
        if let Some(limit) = limit {
            let value = args.next().ok_or_else(|| format!("{} needs a value", flag.to_string_lossy()))?;
            let number = value.to_str().and_then(|v| v.parse::<u64>().ok()).filter(|n| *n > 0);
            let number = number.ok_or_else(|| {
                format!("{} needs a positive number, not {value:?}", flag.to_string_lossy())
            })?;
            if limit.replace(number).is_some() {
                return Err(format!("{} given twice", flag.to_string_lossy()));
            }
            continue;
        }
        let slot = match flag.to_str() {
            Some("--") => break,
            Some("--started") => &mut started,
            Some("--exit") => &mut exit,
            Some("--log") => &mut log,
            Some("--cwd") => &mut cwd,
            _ => return Err(format!("unexpected argument {flag:?}")),
        };
        let value = args.next().ok_or_else(|| format!("{} needs a value", flag.to_string_lossy()))?;
        if slot.replace(PathBuf::from(value)).is_some() {
            return Err(format!("{} given twice", flag.to_string_lossy()));
        }
    }
    let argv = args
        .map(|arg| arg.into_string().map_err(|arg| format!("the stage's argument {arg:?} is not UTF-8")))
        .collect::<Result<Vec<String>, String>>()?;
    if argv.is_empty() {
        return Err("no stage command after `--`".into());
    }
    let need = |value: Option<PathBuf>, flag: &str| value.ok_or_else(|| format!("{flag} is required"));
    Ok(ShimArgs {
        files: StageFiles { started: need(started, "--started")?, exit: need(exit, "--exit")? },
        log: need(log, "--log")?,
        rotation: Rotation {
            max_size: max_size.unwrap_or(Rotation::default().max_size),
            max_files: max_files.map_or(Rotation::default().max_files, |n| n.min(MAX_FILES as u64) as u32),
        },
        cwd: need(cwd, "--cwd")?,
        argv,
    })
}

/// Runs the shim to the end; the process exit code is the shim's own health, not the stage's.
pub fn run(args: ShimArgs) -> i32 {
    match supervise(&args) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("lachesis shim: {message}");
            1
        }
    }
}

fn report(line: &ShimReport) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, line);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

fn supervise(args: &ShimArgs) -> Result<(), String> {
    // First, leave the daemon's session and process group: its death or a Ctrl-C aimed at it
    // must not reach us. (Fails only for a group leader, which a freshly spawned shim is not.)
    let _ = rustix::process::setsid();
    // Who started us: the daemon, or its fork server, which lives exactly as long as it does.
    let daemon = rustix::process::getppid();
    let me = identity_of(std::process::id() as i32).map_err(|e| format!("cannot read own identity: {e}"))?;
    let fail = |reason: String| -> Result<(), String> {
        // The report first: it needs no disk, and the files may not fit on a full one.
        report(&ShimReport::Failed(reason.clone()));
        let started = Started { shim: me.clone(), process: None, started_at: now_millis() };
        write_atomic(&args.files.started, &started, Durability::Cached).map_err(|e| e.to_string())?;
        let finished = Finished { exit: None, spawn_error: Some(reason), ended_at: now_millis() };
        write_atomic(&args.files.exit, &finished, Durability::Synced).map_err(|e| e.to_string())
    };

    if !args.cwd.is_dir() {
        return fail(format!("working directory {} does not exist", args.cwd.display()));
    }
    let mut log = match RotatingLog::open(&args.log, args.rotation) {
        Ok(log) => log,
        Err(e) => return fail(format!("cannot open log {}: {e}", args.log.display())),
    };
    let Some((program, rest)) = args.argv.split_first() else {
        return fail("empty argv".into());
    };
    // Output goes through us: to be redacted when secrets are about, and always so that the
    // log stops growing before the disk is full (see `space`).
    let secrets = crate::secrets::secrets_for(&args.argv);
    let (reader, writer) = std::io::pipe().map_err(|e| format!("cannot create a pipe: {e}"))?;
    let spawn = || -> std::io::Result<std::process::Child> {
        let (stdout, stderr) = (writer.try_clone()?, writer.try_clone()?);
        Command::new(program)
            .args(rest)
            .current_dir(&args.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr))
            // Its own group, so a stop signal reaches the stage and all its children, not the shim.
            .process_group(0)
            .spawn()
    };
    let refused = |err: &std::io::Error, wait: Duration| {
        // Said in the stage's log, where its user looks, and on our stderr.
        let line =
            format!("cannot start '{program}' yet ({}); trying again in {wait:?}", plain_io_error(err));
        eprintln!("lachesis shim: {line}");
        let _ = writeln!(log, "[lachesis: {line}]");
    };
    let spawned = spawn_retrying(spawn, refused, std::thread::sleep);
    // The pipe's write end must close here, so the copy below ends with the stage's output.
    drop(writer);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) if super::spawn::is_transient(&e) => {
            // Still refused after our tries: the daemon tries again later (its own backoff), and
            // the stage is not failed for the machine's limits. Nothing of it was recorded yet.
            let why = format!("cannot start '{program}': {}", plain_io_error(&e));
            report(&ShimReport::Busy(why.clone()));
            return Err(why);
        }
        Err(e) => return fail(format!("cannot start '{program}': {}", plain_io_error(&e))),
    };
    let process = identity_of(child.id() as i32).ok();
    let started = Started { shim: me, process, started_at: now_millis() };
    // Not fatal: the daemon records who runs from the report, and the stage must stay watched.
    if let Err(e) = write_atomic(&args.files.started, &started, Durability::Cached) {
        eprintln!("lachesis shim: cannot record start: {e}");
    }
    report(&ShimReport::Started(started));

    let log = ReservedLog::new(log);
    let (done_tx, copied) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = crate::secrets::copy_redacted(reader, log, &secrets);
        let _ = done_tx.send(());
    });
    let status = child.wait().map_err(|e| format!("cannot wait for the stage: {e}"))?;
    let ended_at = now_millis();
    // A grandchild may hold the pipe open forever; the exit status must not wait for it.
    let _ = copied.recv_timeout(Duration::from_secs(2));
    let exit = match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Code(-1),
    };
    let finished = Finished { exit: Some(exit), spawn_error: None, ended_at };
    // The daemon that started us learns it here, disk full or not. Only while it is still our
    // parent: a gone daemon's pipe has no reader (and a write to it may raise SIGPIPE).
    if rustix::process::getppid() == daemon {
        report(&ShimReport::Exited(finished.clone()));
    }
    record_exit(&args.files.exit, &finished)
}

/// The first wait after the machine refused the stage a process (EAGAIN: out of process
/// slots; or descriptors, memory), doubling after each refusal...
const FORK_FIRST_WAIT: Duration = Duration::from_millis(50);
/// ... to at most this ...
const FORK_LONGEST_WAIT: Duration = Duration::from_secs(4);
/// ... while the waits add up to no more than this: the daemon waits 30 s for our first report,
/// and past this budget we report `Busy`, so its own backoff takes over.
const FORK_BUDGET: Duration = Duration::from_secs(20);

/// The wait before trying the stage's fork again after `refusals` refusals in a row (1 for the
/// first), having waited `waited` so far; None once the budget would be spent.
pub fn fork_wait(refusals: u32, waited: Duration) -> Option<Duration> {
    let wait =
        FORK_FIRST_WAIT.saturating_mul(1u32 << refusals.saturating_sub(1).min(16)).min(FORK_LONGEST_WAIT);
    (waited + wait <= FORK_BUDGET).then_some(wait)
}

/// Calls `spawn` until it succeeds, fails for a reason other than the machine's limits, or
/// the retry budget is spent (see `fork_wait`); `refused` hears of each refusal and its wait.
fn spawn_retrying<T>(
    mut spawn: impl FnMut() -> std::io::Result<T>,
    mut refused: impl FnMut(&std::io::Error, Duration),
    mut sleep: impl FnMut(Duration),
) -> std::io::Result<T> {
    let (mut refusals, mut waited) = (0u32, Duration::ZERO);
    loop {
        match spawn() {
            Err(err) if super::spawn::is_transient(&err) => {
                refusals += 1;
                let Some(wait) = fork_wait(refusals, waited) else { return Err(err) };
                refused(&err, wait);
                sleep(wait);
                waited += wait;
            }
            other => return other,
        }
    }
}

/// Other write errors are retried this many times (the run directory vanished, a flaky mount).
const OTHER_ERROR_ATTEMPTS: u32 = 20;

/// Writes the exit file. A full disk is waited out however long it lasts: until the file lands
/// we stay alive, and a restarted daemon re-attaches to us instead of calling the stage lost.
fn record_exit(path: &std::path::Path, finished: &Finished) -> Result<(), String> {
    let mut pause = Duration::from_millis(100);
    let mut other_errors = 0;
    loop {
        match write_atomic(path, finished, Durability::Synced) {
            Ok(()) => return Ok(()),
            Err(e) if is_out_of_space(&e) => {}
            Err(e) => {
                other_errors += 1;
                if other_errors >= OTHER_ERROR_ATTEMPTS {
                    return Err(format!("cannot record exit: {e}"));
                }
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// `No such file or directory` rather than `No such file or directory (os error 2)`.
fn plain_io_error(err: &std::io::Error) -> String {
    let text = err.to_string();
    match text.find(" (os error") {
        Some(pos) => text[..pos].to_lowercase(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn reads_the_command_line_spawn_builds() {
        let args = parse_args(os(&[
            "--started",
            "s.json",
            "--exit",
            "e.json",
            "--log",
            "main.log",
            "--cwd",
            "/w",
            "--",
            "python",
            "--",
            "-x",
        ]))
        .unwrap();
        assert_eq!(args.files.started, PathBuf::from("s.json"));
        assert_eq!(args.files.exit, PathBuf::from("e.json"));
        assert_eq!(args.log, PathBuf::from("main.log"));
        assert_eq!(args.cwd, PathBuf::from("/w"));
        assert_eq!(args.rotation, Rotation::default(), "no limits given: the default");
        // Everything after the first `--` is the stage's, a later `--` included.
        assert_eq!(args.argv, ["python", "--", "-x"]);
    }

    #[test]
    fn refuses_what_spawn_never_builds() {
        let full = ["--started", "s", "--exit", "e", "--log", "l", "--cwd", "c"];
        for (args, says) in [
            (os(&full), "no `--`"),
            (os(&[&full[..], &["--"]].concat()), "no stage command"),
            (os(&["--exit", "e", "--log", "l", "--cwd", "c", "--", "true"]), "--started is required"),
            (os(&["--started", "s", "--started", "t", "--", "true"]), "given twice"),
            (os(&["--log"]), "--log needs a value"),
            (os(&["--verbose", "--", "true"]), "unexpected argument"),
            (os(&["--log-max-size", "0", "--", "true"]), "needs a positive number"),
            (os(&["--log-max-files", "x", "--", "true"]), "needs a positive number"),
            (os(&["--log-max-files", "2", "--log-max-files", "2", "--", "true"]), "given twice"),
        ] {
            let err = parse_args(args.clone()).err().unwrap_or_else(|| panic!("{args:?} was accepted"));
            assert!(err.contains(says), "{args:?}: {err}");
        }
        use std::os::unix::ffi::OsStringExt;
        let mut args = os(&full);
        args.extend([OsString::from("--"), OsString::from_vec(vec![0xff, b'x'])]);
        assert!(parse_args(args).unwrap_err().contains("not UTF-8"));
        let mut limited = os(&["--log-max-size", "4096", "--log-max-files", "5"]);
        limited.extend(os(&full));
        limited.extend(os(&["--", "true"]));
        assert_eq!(parse_args(limited).unwrap().rotation, Rotation { max_size: 4096, max_files: 5 });
    }

    #[test]
    fn a_refused_fork_is_tried_again_sooner_than_the_daemon_gives_up() {
        use Duration;
        let mut waits = Vec::new();
        let mut waited = Duration::ZERO;
        while let Some(wait) = fork_wait(waits.len() as u32 + 1, waited) {
            waits.push(wait.as_millis());
            waited += wait;
        }
        assert_eq!(waits, [50, 100, 200, 400, 800, 1600, 3200, 4000, 4000, 4000]);
        assert!(waited <= FORK_BUDGET && waited > Duration::from_secs(15), "{waited:?}");
        assert_eq!(fork_wait(u32::MAX, Duration::ZERO), Some(FORK_LONGEST_WAIT));
    }

    #[test]
    fn the_stage_starts_once_the_machine_has_a_process_for_it() {
        let eagain = || std::io::Error::from_raw_os_error(libc::EAGAIN);
        // Refused three times, then started: each refusal heard, the waits slept.
        let mut left = 3;
        let (mut heard, mut slept) = (Vec::new(), Vec::new());
        let spawned = spawn_retrying(
            || match left {
                0 => Ok("child"),
                _ => {
                    left -= 1;
                    Err(eagain())
                }
            },
            |err, wait| heard.push((err.raw_os_error(), wait.as_millis())),
            |wait| slept.push(wait.as_millis()),
        );
        assert_eq!(spawned.unwrap(), "child");
        assert_eq!(heard, [(Some(libc::EAGAIN), 50), (Some(libc::EAGAIN), 100), (Some(libc::EAGAIN), 200)]);
        assert_eq!(slept, [50, 100, 200]);
        // Always refused: given up once the budget is spent, with the refusal.
        let mut slept = Duration::ZERO;
        let err = spawn_retrying(|| Err::<(), _>(eagain()), |_, _| {}, |wait| slept += wait).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EAGAIN));
        assert!(slept <= FORK_BUDGET);
        // Not the machine's limits: no retry.
        let mut tries = 0;
        let err = spawn_retrying(
            || {
                tries += 1;
                Err::<(), _>(std::io::Error::from_raw_os_error(libc::ENOENT))
            },
            |_, _| panic!("not a refusal"),
            |_| panic!("no wait"),
        )
        .unwrap_err();
        assert_eq!((err.raw_os_error(), tries), (Some(libc::ENOENT), 1));
    }

    proptest! {
        #[test]
        fn any_command_line_is_read_or_refused_in_words(
            args in proptest::collection::vec(
                prop_oneof![
                    Just("--".to_string()), Just("--started".to_string()), Just("--exit".to_string()),
                    Just("--log".to_string()), Just("--cwd".to_string()), ".{0,8}",
                    Just("--log-max-size".to_string()), Just("--log-max-files".to_string()), "[0-9]{1,3}",
                ],
                0..12,
            )
        ) {
            match parse_args(args.iter().map(OsString::from)) {
                Ok(parsed) => prop_assert!(!parsed.argv.is_empty()),
                Err(message) => prop_assert!(!message.is_empty() && !message.contains('\n')),
            }
        }
    }
}
