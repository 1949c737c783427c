//! The persisted things: runs, their stages and events, and the states they move through.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::workflow::Workflow;

/// Milliseconds since the Unix epoch: one integer type that both SQLite and PostgreSQL store as is.
pub type Millis = i64;

pub fn now_millis() -> Millis {
    chrono::Utc::now().timestamp_millis()
}

/// A run's place in its life; see `transitions` for the moves between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    Pending,
    Starting,
    Running,
    Stopping,
    /// A transient failure: the rest of the stages are stopped, then the run queues again.
    Retrying,
    Stopped,
    Completed,
    Failed,
}

impl RunState {
    pub const ALL: [RunState; 8] = [
        RunState::Pending,
        RunState::Starting,
        RunState::Running,
        RunState::Stopping,
        RunState::Retrying,
        RunState::Stopped,
        RunState::Completed,
        RunState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::Starting => "starting",
            RunState::Running => "running",
            RunState::Stopping => "stopping",
            RunState::Retrying => "retrying",
            RunState::Stopped => "stopped",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, RunState::Stopped | RunState::Completed | RunState::Failed)
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "unknown state '{0}' (expected one of: pending, starting, running, stopping, retrying, stopped, completed, failed)"
)]
pub struct UnknownState(pub String);

impl FromStr for RunState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunState::ALL.into_iter().find(|state| state.as_str() == s).ok_or_else(|| UnknownState(s.to_string()))
    }
}

/// One execution of a workflow.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub id: Uuid,
    pub workflow: String,
    pub env_name: Option<String>,
    pub state: RunState,
    /// Bumped by every write; the optimistic-concurrency token of the conditional updates.
    pub version: i64,
    pub priority: i64,
    pub attempt: i64,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    /// Why the run is in its state, in words (failure cause, who stopped it).
    pub reason: Option<String>,
    pub run_dir: PathBuf,
    /// The workflow as it was when the run was submitted: later edits don't change queued runs.
    pub spec: Workflow,
    /// Template variables given at submission (`--var`), and config values (`--set`).
    pub params: RunParams,
    /// The node that claimed the run (kept after it ends, to say where it ran).
    #[serde(default)]
    pub node: Option<String>,
    /// The fencing token of the claim: the owner's writes must still carry it.
    #[serde(default)]
    pub fence: Option<i64>,
    /// A retry's backoff: the run is not claimed before this time.
    #[serde(default)]
    pub not_before: Option<Millis>,
}

impl Run {
    /// A run queued now: the first attempt, owned by no node yet.
    pub fn queued(id: Uuid, spec: Workflow, run_dir: PathBuf, priority: i64, params: RunParams) -> Run {
        let now = now_millis();
        Run {
            id,
            workflow: spec.name.clone(),
            env_name: None,
            state: RunState::Pending,
            version: 0,
            priority,
            attempt: 1,
            created_at: now,
            updated_at: now,
            started_at: None,
            ended_at: None,
            reason: None,
            run_dir,
            spec,
            params,
            node: None,
            fence: None,
            not_before: None,
        }
    }

    /// Its stages as they start: not started, each logging under the run directory.
    pub fn pending_stages(&self) -> Vec<Stage> {
        let stages = self.spec.stages.iter().enumerate();
        stages
            .map(|(idx, s)| Stage::pending(self.id, idx, &s.name, self.run_dir.join(s.log_file())))
            .collect()
    }

    pub fn short_id(&self) -> String {
        short_id(&self.id)
    }
}

pub fn short_id(id: &Uuid) -> String {
    id.simple().to_string()[..8].to_string()
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunParams {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, serde_json::Value>,
    /// Values resolved at claim time (ports picked, paths), so a restarted daemon expands the same.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resolved: BTreeMap<String, String>,
}

/// Where a stage is in its own life, independent of the run's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StageState {
    /// Not started yet (or never will be, if the run ended first).
    Pending,
    /// The shim is being started; its identity is not known yet.
    Spawning,
    /// Process alive, waiting for its delay or probe.
    Starting,
    /// Counted as up.
    Up,
    /// The process exited; its status is recorded.
    Exited,
    /// The process vanished without a recorded status, or could not be started.
    Lost,
}

impl StageState {
    pub const ALL: [StageState; 6] = [
        StageState::Pending,
        StageState::Spawning,
        StageState::Starting,
        StageState::Up,
        StageState::Exited,
        StageState::Lost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StageState::Pending => "pending",
            StageState::Spawning => "spawning",
            StageState::Starting => "starting",
            StageState::Up => "up",
            StageState::Exited => "exited",
            StageState::Lost => "lost",
        }
    }

    /// A process may exist for this stage (or is about to).
    pub fn is_live(self) -> bool {
        matches!(self, StageState::Spawning | StageState::Starting | StageState::Up)
    }
}

impl fmt::Display for StageState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StageState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StageState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_string()))
    }
}

/// Who a process is: a pid alone can be reused, so a pid is only ever trusted together with
/// its start time (clock ticks since boot, /proc/PID/stat field 22) and the boot it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: i32,
    pub start_time: u64,
    pub boot_id: String,
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl ExitStatus {
    pub fn success(self) -> bool {
        self == ExitStatus::Code(0)
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(code) => write!(f, "code {code}"),
            ExitStatus::Signal(signal) => write!(f, "signal {} ({})", signal, signal_name(*signal)),
        }
    }
}

pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// One process of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stage {
    pub run_id: Uuid,
    pub idx: i64,
    pub name: String,
    pub state: StageState,
    pub shim: Option<ProcessIdentity>,
    pub process: Option<ProcessIdentity>,
    pub started_at: Option<Millis>,
    pub ready_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub exit: Option<ExitStatus>,
    pub log_path: PathBuf,
    /// The Slurm job running the stage, for workflows with `launcher: slurm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job: Option<u64>,
}

impl Stage {
    /// A stage not started yet.
    pub fn pending(run_id: Uuid, idx: usize, name: &str, log_path: PathBuf) -> Stage {
        Stage {
            run_id,
            idx: idx as i64,
            name: name.to_string(),
            state: StageState::Pending,
            shim: None,
            process: None,
            started_at: None,
            ready_at: None,
            ended_at: None,
            exit: None,
            log_path,
            slurm_job: None,
        }
    }
}

/// An append-only record of something that happened to a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Event {
    pub id: i64,
    pub run_id: Uuid,
    pub at: Millis,
    pub kind: EventKind,
    pub from_state: Option<RunState>,
    pub to_state: Option<RunState>,
    pub stage: Option<String>,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// The run moved between states.
    State,
    /// A stage started, came up, exited, was signalled or was lost.
    Stage,
    /// Anything else worth keeping (daemon restarts, repairs).
    Note,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::State => "state",
            EventKind::Stage => "stage",
            EventKind::Note => "note",
        }
    }
}

impl FromStr for EventKind {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "state" => Ok(EventKind::State),
            "stage" => Ok(EventKind::Stage),
            "note" => Ok(EventKind::Note),
            other => Err(UnknownState(other.to_string())),
        }
    }
}

/// An event about to be written.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub kind: EventKind,
    pub stage: Option<String>,
    pub message: String,
}

impl NewEvent {
    pub fn stage(stage: &str, message: impl Into<String>) -> Self {
        NewEvent { kind: EventKind::Stage, stage: Some(stage.to_string()), message: message.into() }
    }

    pub fn note(message: impl Into<String>) -> Self {
        NewEvent { kind: EventKind::Note, stage: None, message: message.into() }
    }
}
