//! The home's daemon seen from outside: started detached (`daemon --detach`), stopped
//! (`daemon stop`) and asked after (`daemon status`). Each finds the daemon through its record
//! (`record.rs`) and signals it only through a pidfd opened while its identity still holds.

use std::ffi::OsString;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::record::{DaemonRecord, RecordError};
use crate::launch::process::{Liveness, liveness};
use crate::model::{Millis, ProcessIdentity};
use crate::settings::{Settings, StoreLocation};

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(50);
/// A wait longer than this says what it waits for.
const SAY_AFTER: Duration = Duration::from_secs(1);
/// How long the home socket may take to answer `/health`.
const HEALTH_WITHIN: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("a daemon is already running on {home} (pid {pid}); `lachesis daemon stop` stops it")]
    AlreadyRunning { home: PathBuf, pid: i32 },
    #[error("no daemon is running on {home}")]
    NotRunning { home: PathBuf },
    #[error("open the daemon's log {path}: {source}")]
    Log { path: PathBuf, source: std::io::Error },
    #[error("start the daemon: {0}")]
    Spawn(std::io::Error),
    #[error("the daemon exited during start-up ({status}): {last}; its log: {log}")]
    DiedAtStart { status: String, last: String, log: PathBuf },
    #[error(
        "the daemon (pid {pid}) did not answer on {socket} within {secs}s; it is still starting or stuck: see its log {log}"
    )]
    NoAnswer { pid: i32, socket: PathBuf, secs: u64, log: PathBuf },
    #[error("signal the daemon (pid {pid}): {source}")]
    Signal { pid: i32, source: std::io::Error },
    #[error("the daemon (pid {pid}) is still running {secs}s after SIGTERM; {log}")]
    StillRunning { pid: i32, secs: u64, log: String },
    #[error(transparent)]
    Record(#[from] RecordError),
}

/// The log of a detached daemon.
pub fn log_path(home: &Path) -> PathBuf {
    home.join("daemon.log")
}

/// The store as a daemon's record and status show it: a URL's credentials and query redacted.
pub fn store_text(settings: &Settings) -> String {
    match settings.store_location() {
        Ok(StoreLocation::Sqlite(path)) => format!("sqlite://{}", path.display()),
        Ok(StoreLocation::Postgres(url)) => crate::secrets::redact_url(&url),
        Err(err) => crate::secrets::redact_url(&err.0),
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Started {
    pub pid: i32,
    pub log: PathBuf,
}

/// Starts `exe args` (this lachesis, as the detached daemon) in a session of its own, with no
/// terminal: stdin and stdout on /dev/null, stderr on its log. Returns once it answers on the
/// home socket; `waiting` is told (once) if that takes a while.
pub async fn detach(
    settings: &Settings,
    exe: &Path,
    args: Vec<OsString>,
    within: Duration,
    mut waiting: impl FnMut(&str),
) -> Result<Started, ControlError> {
    let home = &settings.home;
    if let Some(record) = DaemonRecord::read(home)?.filter(DaemonRecord::running) {
        return Err(ControlError::AlreadyRunning { home: home.clone(), pid: record.process.pid });
    }
    let log = log_path(home);
    let log_error = |source| ControlError::Log { path: log.clone(), source };
    std::fs::create_dir_all(home).map_err(log_error)?;
    let file =
        std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&log).map_err(log_error)?;
    let offset = file.metadata().map_err(log_error)?.len();
    let mut command = Command::new(exe);
    // Named as the user knows it in `ps`, whatever path it is started through.
    if let Some(name) = std::env::args_os().next() {
        command.arg0(name);
    }
    command.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(file);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| rustix::process::setsid().map(drop).map_err(std::io::Error::from));
    }
    let mut child = command.spawn().map_err(ControlError::Spawn)?;
    let pid = child.id() as i32;
    let started = Instant::now();
    let mut said = false;
    loop {
        if let Some(status) = child.try_wait().map_err(ControlError::Spawn)? {
            return Err(ControlError::DiedAtStart {
                status: exit_text(status),
                last: last_line(&log, offset),
                log,
            });
        }
        if answers(settings, pid).await {
            return Ok(Started { pid, log });
        }
        if started.elapsed() > within {
            let socket = settings.api_socket_path();
            return Err(ControlError::NoAnswer { pid, socket, secs: within.as_secs(), log });
        }
        if !said && started.elapsed() > SAY_AFTER {
            waiting(&format!(
                "waiting for the daemon (pid {pid}) to answer on {}",
                settings.api_socket_path().display()
            ));
            said = true;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether the daemon `pid` holds the home (its record names it) and answers on its socket.
async fn answers(settings: &Settings, pid: i32) -> bool {
    let ours = DaemonRecord::read(&settings.home).ok().flatten().is_some_and(|r| r.process.pid == pid);
    ours && crate::api::client::get(settings, "/health", HEALTH_WITHIN).await.is_some()
}

fn exit_text(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by {}", crate::model::process::signal_name(signal)),
        _ => "exited".into(),
    }
}

/// The last line the daemon wrote to its log after `offset` (main's error, when it failed).
fn last_line(log: &Path, offset: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 16 * 1024;
    let mut text = Vec::new();
    if let Ok(mut file) = std::fs::File::open(log) {
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(offset.max(len.saturating_sub(TAIL))));
        let _ = file.take(TAIL).read_to_end(&mut text);
    }
    let text = String::from_utf8_lossy(&text);
    let last = text.lines().rev().map(str::trim).find(|l| !l.is_empty()).unwrap_or("it wrote nothing");
    let last = last.strip_prefix("lachesis: ").unwrap_or(last);
    crate::text::one_line(last)
}

#[derive(Clone, Debug, Serialize)]
pub struct Stopped {
    pub pid: i32,
}

/// Sends SIGTERM to the home's daemon and waits (up to `within`) until it is gone. Its stages
/// keep running under their shims.
pub async fn stop(
    settings: &Settings,
    within: Duration,
    mut waiting: impl FnMut(&str),
) -> Result<Stopped, ControlError> {
    let home = &settings.home;
    let Some(record) = DaemonRecord::read(home)?.filter(DaemonRecord::running) else {
        return Err(ControlError::NotRunning { home: home.clone() });
    };
    let pid = record.process.pid;
    if !terminate(&record.process).map_err(|source| ControlError::Signal { pid, source })? {
        return Err(ControlError::NotRunning { home: home.clone() });
    }
    let started = Instant::now();
    let mut said = false;
    while record.running() {
        if started.elapsed() > within {
            let log = match &record.log {
                Some(log) => format!("see its log {}", log.display()),
                None => "see its log (its stderr)".into(),
            };
            return Err(ControlError::StillRunning { pid, secs: within.as_secs(), log });
        }
        if !said && started.elapsed() > SAY_AFTER {
            waiting(&format!("waiting for the daemon (pid {pid}) to exit"));
            said = true;
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(Stopped { pid })
}

/// SIGTERM to the process `id` names, through a pidfd opened while it is still that process:
/// a pid reused by someone else is never signalled. False when it is already gone.
fn terminate(id: &ProcessIdentity) -> std::io::Result<bool> {
    use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};
    let Some(pid) = Pid::from_raw(id.pid) else { return Ok(false) };
    let fd = match pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::SRCH) => return Ok(false),
        Err(err) => return Err(err.into()),
    };
    // Checked after opening: if the identity still holds now, the descriptor is that process's.
    if liveness(id) != Liveness::Alive {
        return Ok(false);
    }
    pidfd_send_signal(&fd, Signal::TERM)?;
    Ok(true)
}

/// `daemon status`: the home's daemon as its record and its `/health` answer give it.
#[derive(Clone, Debug, Serialize)]
pub struct DaemonStatus {
    pub home: PathBuf,
    /// A daemon runs on this home (its record names a live process, or its socket answers).
    pub running: bool,
    /// Running, and `/health` answered with success.
    pub ok: bool,
    pub pid: Option<i32>,
    pub started_at: Option<Millis>,
    pub uptime_secs: Option<u64>,
    pub version: Option<String>,
    pub store: Option<String>,
    pub node: Option<String>,
    /// Its log file; None with a record means its stderr.
    pub log: Option<PathBuf>,
    /// The HTTP status `/health` answered, and its body, as the daemon gives them.
    pub health_status: Option<u16>,
    pub health: Option<serde_json::Value>,
}

pub async fn status(settings: &Settings) -> Result<DaemonStatus, ControlError> {
    let record = DaemonRecord::read(&settings.home)?.filter(DaemonRecord::running);
    let health = crate::api::client::get(settings, "/health", HEALTH_WITHIN).await;
    let now = crate::model::now_millis();
    let running = record.is_some() || health.is_some();
    let record = record.as_ref();
    Ok(DaemonStatus {
        home: settings.home.clone(),
        running,
        ok: running && health.as_ref().is_some_and(|(code, _)| (200..300).contains(code)),
        pid: record.map(|r| r.process.pid),
        started_at: record.map(|r| r.started_at),
        uptime_secs: record.map(|r| (now - r.started_at).max(0) as u64 / 1000),
        version: record.map(|r| r.version.clone()),
        store: record.map(|r| r.store.clone()),
        node: record.map(|r| r.node.clone()),
        log: record.and_then(|r| r.log.clone()),
        health_status: health.as_ref().map(|(code, _)| *code),
        health: health.map(|(_, body)| body),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_is_shown_without_credentials() {
        let home = tempfile::tempdir().unwrap();
        let settings =
            Settings::new(Some(home.path().into()), Some("postgres://me:secret@db/l?password=x".into()));
        let text = store_text(&settings);
        assert!(!text.contains("secret") && !text.contains("password=x"), "{text}");
        assert!(text.starts_with("postgres://") && text.contains("db/l"), "{text}");
        let settings = Settings::new(Some(home.path().into()), None);
        assert_eq!(store_text(&settings), format!("sqlite://{}", home.path().join("lachesis.db").display()));
    }

    #[test]
    fn the_last_line_after_the_offset_is_the_error_without_its_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("daemon.log");
        std::fs::write(&log, "old line\n").unwrap();
        let offset = std::fs::metadata(&log).unwrap().len();
        assert_eq!(last_line(&log, offset), "it wrote nothing");
        std::fs::write(&log, "old line\nINFO started\nlachesis: another daemon holds the lock\n\n").unwrap();
        assert_eq!(last_line(&log, offset), "another daemon holds the lock");
    }

    #[test]
    fn a_stranger_with_a_recorded_pid_is_never_signalled() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let id = crate::launch::process::identity_of(child.id() as i32).unwrap();
        let stranger = ProcessIdentity { start_time: id.start_time + 1, ..id.clone() };
        assert!(!terminate(&stranger).unwrap());
        assert_eq!(liveness(&id), Liveness::Alive);
        assert!(terminate(&id).unwrap());
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
        assert!(!terminate(&id).unwrap(), "a gone process is not signalled");
    }
}
