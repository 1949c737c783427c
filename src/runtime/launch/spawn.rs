//! The daemon's side of starting a stage: have a shim started (forked by the fork server, or
//! executed), which moves itself into a session of its own so it survives the daemon, and read
//! back who it started.
//!
//! No `pre_exec` here on purpose: it would force fork+exec of the whole daemon, where plain
//! spawning uses posix_spawn, several times cheaper for a large multi-threaded process.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use super::forkserver::ForkServer;
use super::shim::ShimReport;
use super::status::{Finished, StageFiles, Started};
use crate::workflow::StagePlan;

#[derive(Clone, Debug, thiserror::Error)]
pub enum SpawnError {
    /// The stage process itself could not start (missing program, bad cwd, unwritable log).
    #[error("{0}")]
    Stage(String),
    /// The shim could not be started or said nothing sensible.
    #[error("cannot start the shim: {0}")]
    Shim(String),
    /// The machine is short of processes, descriptors or memory for now (EAGAIN, EMFILE,
    /// ENFILE, ENOMEM): worth trying again shortly, never the stage's fault.
    #[error("{0}")]
    Busy(String),
}

impl SpawnError {
    /// Whether trying again later may succeed where this failed.
    pub fn is_transient(&self) -> bool {
        matches!(self, SpawnError::Busy(_))
    }

    /// A shim that could not be started because of `err`: `Busy` when that is transient.
    fn shim(err: &std::io::Error) -> SpawnError {
        if is_transient(err) {
            SpawnError::Busy(format!("cannot start the shim: {err}"))
        } else {
            SpawnError::Shim(err.to_string())
        }
    }
}

/// EAGAIN, EMFILE, ENFILE, ENOMEM: the machine's limits for now, not the stage's fault.
pub fn is_transient(err: &std::io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::EMFILE | libc::ENFILE | libc::ENOMEM))
}

/// A started stage: its shim and the identities it reported.
pub struct Spawned {
    /// The shim, when the daemon executed it itself; a forked one is the fork server's child.
    shim: Option<Child>,
    pub started: Started,
    /// The rest of the shim's reports: its `exited` line comes here, needing no disk space.
    reports: BufReader<Box<dyn AsyncRead + Send + Unpin>>,
}

impl Spawned {
    /// The stage's end as the shim reports it on its stdout, or None if the shim exited (or
    /// died) without saying. The shim may outlive this report while it writes its exit file.
    pub async fn exit_report(&mut self) -> Option<Finished> {
        let mut line = String::new();
        loop {
            line.clear();
            match self.reports.read_line(&mut line).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {
                    if let Ok(ShimReport::Exited(finished)) = serde_json::from_str(&line) {
                        return Some(finished);
                    }
                }
            }
        }
    }

    /// Waits for the shim to exit (its exit file written), reaping it if it is our child. A
    /// forked shim's report pipe closes when it exits: nobody else holds the write end.
    pub async fn exited(&mut self) {
        match &mut self.shim {
            Some(child) => {
                let _ = child.wait().await;
            }
            None => {
                let _ = tokio::io::copy(&mut self.reports, &mut tokio::io::sink()).await;
            }
        }
    }
}

const SHIM_REPORT_TIMEOUT: Duration = Duration::from_secs(30);

/// The small executable that runs only the shim, built beside `lachesis`.
pub const SHIM_PROGRAM: &str = "lachesis-shim";

/// How this daemon starts shims: forked by its fork server when `lachesis-shim` is beside its
/// executable; else (a lone copied binary) its own executable as `lachesis shim`.
pub struct Shims {
    exe: PathBuf,
    server: Option<ForkServer>,
    /// Stage log limits where a workflow sets none (`--log-max-size`, `--log-max-files`).
    rotation: crate::logs::Rotation,
}

impl Shims {
    pub fn new(exe: &Path, rotation: crate::logs::Rotation) -> Shims {
        let small = exe.with_file_name(SHIM_PROGRAM);
        // Said once in the daemon's log: where an install put (or left out) the shim shows here.
        let server = if small.is_file() {
            tracing::info!("stages start under {} (forked by its fork server)", small.display());
            Some(ForkServer::new(small))
        } else {
            tracing::info!("no {SHIM_PROGRAM} beside {}: stages start under `lachesis shim`", exe.display());
            None
        };
        Shims { exe: exe.to_path_buf(), server, rotation }
    }

    /// An executed shim: `lachesis-shim` beside the daemon's executable, which loads in a
    /// fraction of the time the whole CLI takes; without it, `lachesis shim`. Looked for again
    /// each time: an upgrade may have removed it since the daemon started.
    fn command(&self) -> Command {
        let small = self.exe.with_file_name(SHIM_PROGRAM);
        if small.is_file() {
            return Command::new(small);
        }
        let mut command = Command::new(&self.exe);
        command.arg("shim");
        command
    }

    pub async fn spawn_stage(&self, plan: &StagePlan, files: &StageFiles) -> Result<Spawned, SpawnError> {
        if let Some(dir) = files.started.parent() {
            std::fs::create_dir_all(dir).map_err(|e| SpawnError::Shim(format!("{}: {e}", dir.display())))?;
        }
        if let Some(dir) = plan.log_path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| SpawnError::Stage(format!("cannot create {}: {e}", dir.display())))?;
        }
        let rotation = plan.log_limits.over(self.rotation);
        let mut args: Vec<OsString> = Vec::with_capacity(plan.argv.len() + 13);
        args.extend(["--log-max-size".into(), rotation.max_size.to_string().into()]);
        args.extend(["--log-max-files".into(), rotation.max_files.to_string().into()]);
        for (flag, value) in [
            ("--started", files.started.as_os_str()),
            ("--exit", files.exit.as_os_str()),
            ("--log", plan.log_path.as_os_str()),
            ("--cwd", plan.cwd.as_os_str()),
        ] {
            args.extend([OsString::from(flag), value.to_os_string()]);
        }
        args.push(OsString::from("--"));
        args.extend(plan.argv.iter().map(OsString::from));

        let env = crate::environ::for_child(&plan.environ);
        let forked = match &self.server {
            Some(server) => match server.fork_shim(&args, &env).await {
                Ok(reports) => Some(reports),
                // Short of descriptors or processes: executing it would meet the same limit.
                Err(err) if is_transient(&err) => return Err(SpawnError::shim(&err)),
                Err(err) => {
                    tracing::warn!("shim fork server: {err}; executing the shim instead");
                    None
                }
            },
            None => None,
        };
        let (shim, reports): (Option<Child>, Box<dyn AsyncRead + Send + Unpin>) = match forked {
            Some(reports) => {
                let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(reports)
                    .map_err(|e| SpawnError::shim(&e))?;
                (None, Box::new(pipe))
            }
            None => {
                let mut command = self.command();
                command
                    .args(&args)
                    .envs(&env)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null());
                let mut shim = command.spawn().map_err(|e| SpawnError::shim(&e))?;
                let stdout = shim.stdout.take().ok_or_else(|| SpawnError::Shim("no stdout".into()))?;
                (Some(shim), Box::new(stdout))
            }
        };
        let mut line = String::new();
        let mut reports = BufReader::new(reports);
        let read = tokio::time::timeout(SHIM_REPORT_TIMEOUT, reports.read_line(&mut line)).await;
        match read {
            Ok(Ok(n)) if n > 0 => {}
            Ok(Ok(_)) => return Err(SpawnError::Shim("it exited without reporting".into())),
            Ok(Err(e)) => return Err(SpawnError::shim(&e)),
            Err(_) => {
                return Err(SpawnError::Shim(format!("no report within {}s", SHIM_REPORT_TIMEOUT.as_secs())));
            }
        }
        match serde_json::from_str::<ShimReport>(&line) {
            Ok(ShimReport::Started(started)) => Ok(Spawned { shim, started, reports }),
            Ok(ShimReport::Failed(reason)) => Err(SpawnError::Stage(reason)),
            Ok(ShimReport::Busy(reason)) => Err(SpawnError::Busy(reason)),
            Ok(ShimReport::Exited(_)) => Err(SpawnError::Shim("it reported an exit before a start".into())),
            Err(e) => Err(SpawnError::Shim(format!("unreadable report {line:?}: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_machines_passing_limits_are_transient() {
        let err = |errno| std::io::Error::from_raw_os_error(errno);
        for (errno, transient) in [
            (libc::EAGAIN, true),
            (libc::EMFILE, true),
            (libc::ENFILE, true),
            (libc::ENOMEM, true),
            (libc::ENOENT, false),
            (libc::EACCES, false),
            (libc::ENOEXEC, false),
        ] {
            assert_eq!(is_transient(&err(errno)), transient, "errno {errno}");
            assert_eq!(SpawnError::shim(&err(errno)).is_transient(), transient, "errno {errno}");
        }
        assert!(
            !SpawnError::Stage("cannot start 'x': EAGAIN".into()).is_transient(),
            "words are not the kind"
        );
    }
}
