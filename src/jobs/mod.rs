//! Jobs: one-shot work the daemon runs beside training runs — inference tests of an
//! environment against one or more models, enqueued by hand or by a schedule.

pub mod inference;
pub mod results;
pub mod schedule;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use inference::{InferenceSpec, Provider};

use crate::model::{ExitStatus, Millis, ProcessIdentity, StageState, UnknownState};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Running,
    Succeeded,
    /// Succeeded, but a model's accuracy fell below its schedule's baseline.
    Regressed,
    Failed,
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Regressed,
        JobState::Failed,
        JobState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Regressed => "regressed",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, JobState::Queued | JobState::Running)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL.into_iter().find(|st| st.as_str() == s).ok_or_else(|| UnknownState(s.to_string()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobEvent {
    Claim,
    Succeed,
    Regress,
    Fail,
    Cancel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a {from} job cannot {event:?}")]
pub struct IllegalJobTransition {
    pub from: JobState,
    pub event: JobEvent,
}

/// The job state machine: `queued → running → succeeded | regressed | failed`, and
/// `cancelled` from either live state. Pure, like the run table.
pub fn next(from: JobState, event: JobEvent) -> Result<JobState, IllegalJobTransition> {
    use JobEvent as E;
    use JobState as S;
    Ok(match (from, event) {
        (S::Queued, E::Claim) => S::Running,
        (S::Queued | S::Running, E::Cancel) => S::Cancelled,
        (S::Running, E::Succeed) => S::Succeeded,
        (S::Running, E::Regress) => S::Regressed,
        (S::Running, E::Fail) => S::Failed,
        _ => return Err(IllegalJobTransition { from, event }),
    })
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    pub id: Uuid,
    pub state: JobState,
    pub version: i64,
    pub schedule_id: Option<Uuid>,
    pub env_name: String,
    pub spec: InferenceSpec,
    pub created_at: Millis,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub reason: Option<String>,
    /// Per-model results and the summary, once the job has ended.
    pub results: Option<serde_json::Value>,
    pub job_dir: PathBuf,
    /// The node running the job, and the fencing token of its claim.
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub fence: Option<i64>,
}

/// One model's process of a job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobTask {
    pub job_id: Uuid,
    pub idx: i64,
    pub model: String,
    pub state: StageState,
    pub shim: Option<ProcessIdentity>,
    pub process: Option<ProcessIdentity>,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub exit: Option<ExitStatus>,
    pub timed_out: bool,
}

/// A queued job running `spec`, with its directory under `jobs_dir`.
pub fn new_job(id: Uuid, spec: InferenceSpec, schedule_id: Option<Uuid>, jobs_dir: &std::path::Path) -> Job {
    Job {
        id,
        state: JobState::Queued,
        version: 0,
        schedule_id,
        env_name: spec.env_name.clone(),
        spec,
        created_at: crate::model::now_millis(),
        started_at: None,
        ended_at: None,
        reason: None,
        results: None,
        job_dir: jobs_dir.join(id.to_string()),
        node: None,
        fence: None,
    }
}

/// One pending task per model of `job`.
pub fn pending_tasks(job: &Job) -> Vec<JobTask> {
    job.spec
        .models
        .iter()
        .enumerate()
        .map(|(idx, model)| JobTask {
            job_id: job.id,
            idx: idx as i64,
            model: model.clone(),
            state: StageState::Pending,
            shim: None,
            process: None,
            started_at: None,
            ended_at: None,
            exit: None,
            timed_out: false,
        })
        .collect()
}

/// A cron expression that enqueues an inference test (a nightly regression check).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Schedule {
    pub id: Uuid,
    pub name: String,
    pub cron: String,
    pub tz: Option<String>,
    /// The job each firing enqueues.
    pub spec: InferenceSpec,
    /// URLs POSTed when a job of this schedule finishes or regresses.
    pub webhooks: Vec<String>,
    /// How far a model's accuracy may fall below the baseline before the job is `regressed`.
    pub policy: schedule::RegressionPolicy,
    pub paused: bool,
    /// Due times up to here are handled (fired, caught up or skipped).
    pub last_fired: Millis,
    pub created_at: Millis,
}

#[cfg(test)]
mod tests {
    use super::*;
    use JobEvent as E;
    use JobState as S;

    #[test]
    fn the_job_table_is_exactly_this() {
        let legal = [
            (S::Queued, E::Claim, S::Running),
            (S::Queued, E::Cancel, S::Cancelled),
            (S::Running, E::Cancel, S::Cancelled),
            (S::Running, E::Succeed, S::Succeeded),
            (S::Running, E::Regress, S::Regressed),
            (S::Running, E::Fail, S::Failed),
        ];
        for from in JobState::ALL {
            for event in [E::Claim, E::Succeed, E::Regress, E::Fail, E::Cancel] {
                let want = legal.iter().find(|(f, e, _)| *f == from && *e == event).map(|t| t.2);
                assert_eq!(next(from, event).ok(), want, "{from} {event:?}");
            }
        }
        assert!(JobState::ALL.iter().filter(|s| s.is_terminal()).all(|s| next(*s, E::Cancel).is_err()));
    }
}
