//! A Slurm job as lachesis knows it: its id, and where it is.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::model::Exit;

/// A Slurm job id. Serialized as a plain number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SlurmJobId(pub u64);

impl fmt::Display for SlurmJobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("'{0}' is not a Slurm job id")]
pub struct BadJobId(String);

impl FromStr for SlurmJobId {
    type Err = BadJobId;

    /// Takes `123`, or `123;cluster` as `sbatch --parsable` prints on a federated cluster.
    fn from_str(text: &str) -> Result<SlurmJobId, BadJobId> {
        let id = text.trim().split(';').next().unwrap_or_default();
        match id.parse::<u64>() {
            Ok(n) if n > 0 && id.bytes().all(|b| b.is_ascii_digit()) => Ok(SlurmJobId(n)),
            _ => Err(BadJobId(text.chars().take(40).collect())),
        }
    }
}

/// Where a job is, as far as lachesis cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Waiting for resources, a begin time, or a requeue.
    Pending,
    /// Running, or still tearing down (COMPLETING): its processes may still be about.
    Running,
    /// Over. `state` is Slurm's word for it (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...), worth
    /// showing: a stage that hit its time limit ends with SIGTERM like one that was cancelled.
    Ended { exit: Exit, state: String },
    /// Cancelled before it ran, or unknown to both scontrol and sacct.
    Vanished(String),
}

impl JobState {
    /// Whether the job may still have processes running or still start some.
    pub fn is_live(&self) -> bool {
        matches!(self, JobState::Pending | JobState::Running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids() {
        assert_eq!("123\n".parse::<SlurmJobId>().unwrap(), SlurmJobId(123));
        assert_eq!("123;cluster".parse::<SlurmJobId>().unwrap(), SlurmJobId(123));
        for bad in ["", "0", "-1", "+5", "12a", "abc", "99999999999999999999999"] {
            assert!(bad.parse::<SlurmJobId>().is_err(), "{bad}");
        }
        assert_eq!(serde_json::to_string(&SlurmJobId(42)).unwrap(), "42");
        assert_eq!(serde_json::from_str::<SlurmJobId>("42").unwrap(), SlurmJobId(42));
    }
}
