//! What can go wrong talking to Slurm, and which of it may pass.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("{0} is not installed (not found on PATH)")]
    NotInstalled(&'static str),
    /// Slurm's tools would retry reading a missing config for 60 s before failing.
    #[error("SLURM_CONF is {}, which does not exist", .0.display())]
    NoConfig(PathBuf),
    #[error("{command} failed: {stderr}")]
    Failed { command: &'static str, stderr: String },
    #[error("{command} gave no answer within {}s", .after.as_secs())]
    Timeout { command: &'static str, after: Duration },
    #[error("cannot run {command}: {source}")]
    Io {
        command: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("unexpected output from {command}: {output:?}")]
    Unexpected { command: &'static str, output: String },
    #[error("cannot submit stage '{stage}': {reason}")]
    BadPlan { stage: String, reason: String },
    #[error("'{0}' is not a signal name or number")]
    BadSignal(String),
    /// A job state this module does not know (a newer Slurm?): better said than guessed.
    #[error("Slurm reports job state {0}, which lachesis does not know")]
    UnknownState(String),
}

impl SlurmError {
    /// Failures that may pass (slurmctld restarting, a slow answer); worth retrying a few times.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            SlurmError::Failed { .. }
                | SlurmError::Timeout { .. }
                | SlurmError::Io { .. }
                | SlurmError::Unexpected { .. }
        )
    }
}
