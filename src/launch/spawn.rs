//! The daemon's side of starting a stage: start `lachesis-shim` (which moves itself into a
//! session of its own, so it survives the daemon) and read back who it started.
//!
//! No `pre_exec` here on purpose: it would force fork+exec of the whole daemon, where plain
//! spawning uses posix_spawn, several times cheaper for a large multi-threaded process.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use super::shim::ShimReport;
use super::status::{Finished, StageFiles, Started};
use crate::workflow::StagePlan;

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The stage process itself could not start (missing program, bad cwd, unwritable log).
    #[error("{0}")]
    Stage(String),
    /// The shim could not be started or said nothing sensible.
    #[error("cannot start the shim: {0}")]
    Shim(String),
}

/// A started stage: the shim (our child while we live) and the identities it reported.
pub struct Spawned {
    pub shim: Child,
    pub started: Started,
    /// The rest of the shim's reports: its `exited` line comes here, needing no disk space.
    reports: BufReader<ChildStdout>,
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
}

const SHIM_REPORT_TIMEOUT: Duration = Duration::from_secs(30);

/// The small executable that runs only the shim, built beside `lachesis`.
pub const SHIM_PROGRAM: &str = "lachesis-shim";

/// `lachesis-shim` beside the daemon's executable: it starts in a fraction of the time the
/// whole CLI takes, and every stage pays that. Without it (a lone copied binary), the daemon's
/// own executable as `lachesis shim`.
fn shim_command(exe: &Path) -> Command {
    let small = exe.with_file_name(SHIM_PROGRAM);
    if small.is_file() {
        return Command::new(small);
    }
    let mut command = Command::new(exe);
    command.arg("shim");
    command
}

pub async fn spawn_stage(exe: &Path, plan: &StagePlan, files: &StageFiles) -> Result<Spawned, SpawnError> {
    if let Some(dir) = files.started.parent() {
        std::fs::create_dir_all(dir).map_err(|e| SpawnError::Shim(format!("{}: {e}", dir.display())))?;
    }
    if let Some(dir) = plan.log_path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| SpawnError::Stage(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut command = shim_command(exe);
    command
        .arg("--started")
        .arg(&files.started)
        .arg("--exit")
        .arg(&files.exit)
        .arg("--log")
        .arg(&plan.log_path)
        .arg("--cwd")
        .arg(&plan.cwd)
        .arg("--")
        .args(&plan.argv)
        .envs(&plan.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut shim = command.spawn().map_err(|e| SpawnError::Shim(e.to_string()))?;
    let stdout = shim.stdout.take().ok_or_else(|| SpawnError::Shim("no stdout".into()))?;
    let mut line = String::new();
    let mut reports = BufReader::new(stdout);
    let read = tokio::time::timeout(SHIM_REPORT_TIMEOUT, reports.read_line(&mut line)).await;
    match read {
        Ok(Ok(n)) if n > 0 => {}
        Ok(Ok(_)) => return Err(SpawnError::Shim("it exited without reporting".into())),
        Ok(Err(e)) => return Err(SpawnError::Shim(e.to_string())),
        Err(_) => {
            return Err(SpawnError::Shim(format!("no report within {}s", SHIM_REPORT_TIMEOUT.as_secs())));
        }
    }
    match serde_json::from_str::<ShimReport>(&line) {
        Ok(ShimReport::Started(started)) => Ok(Spawned { shim, started, reports }),
        Ok(ShimReport::Failed(reason)) => Err(SpawnError::Stage(reason)),
        Ok(ShimReport::Exited(_)) => Err(SpawnError::Shim("it reported an exit before a start".into())),
        Err(e) => Err(SpawnError::Shim(format!("unreadable report {line:?}: {e}"))),
    }
}
