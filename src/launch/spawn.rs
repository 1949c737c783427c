//! The daemon's side of starting a stage: start `lachesis shim` (which moves itself into a
//! session of its own, so it survives the daemon) and read back who it started.
//!
//! No `pre_exec` here on purpose: it would force fork+exec of the whole daemon, where plain
//! spawning uses posix_spawn, several times cheaper for a large multi-threaded process.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::shim::ShimReport;
use super::status::{StageFiles, Started};
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
}

const SHIM_REPORT_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn spawn_stage(exe: &Path, plan: &StagePlan, files: &StageFiles) -> Result<Spawned, SpawnError> {
    if let Some(dir) = files.started.parent() {
        std::fs::create_dir_all(dir).map_err(|e| SpawnError::Shim(format!("{}: {e}", dir.display())))?;
    }
    if let Some(dir) = plan.log_path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| SpawnError::Stage(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut command = Command::new(exe);
    command
        .arg("shim")
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
    let read = tokio::time::timeout(SHIM_REPORT_TIMEOUT, BufReader::new(stdout).read_line(&mut line)).await;
    match read {
        Ok(Ok(n)) if n > 0 => {}
        Ok(Ok(_)) => return Err(SpawnError::Shim("it exited without reporting".into())),
        Ok(Err(e)) => return Err(SpawnError::Shim(e.to_string())),
        Err(_) => {
            return Err(SpawnError::Shim(format!("no report within {}s", SHIM_REPORT_TIMEOUT.as_secs())));
        }
    }
    match serde_json::from_str::<ShimReport>(&line) {
        Ok(ShimReport::Started(started)) => Ok(Spawned { shim, started }),
        Ok(ShimReport::Failed(reason)) => Err(SpawnError::Stage(reason)),
        Err(e) => Err(SpawnError::Shim(format!("unreadable report {line:?}: {e}"))),
    }
}
