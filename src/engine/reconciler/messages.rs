//! What the loop is told: a `Msg` from a worker (a spawner, an exit watcher, a probe, a
//! timer), a wake-up, or a held write come due. Messages about one run are handled in its
//! order, and held together when one of their writes cannot land (see `held`).

use uuid::Uuid;

use crate::launch::probe::ReadyHow;
use crate::launch::spawn::SpawnError;
use crate::launch::status::{Finished, Started};
use crate::model::{Exit, NewEvent, ProcessRecord, now_millis};

/// How a process (a stage's or a task's) ended, as far as the daemon can tell.
#[derive(Clone, Debug)]
pub enum ProcessEnd {
    Finished(Finished),
    /// Gone without a recorded status.
    Vanished(String),
}

impl ProcessEnd {
    /// Records this end on `record`; returns what happened, in words for its event.
    pub(super) fn record_on(
        &self,
        record: &mut ProcessRecord,
    ) -> std::result::Result<String, crate::model::IllegalProcessMove> {
        match self {
            ProcessEnd::Finished(f) => record.exited(f.exit, f.spawn_error.as_deref(), f.ended_at),
            ProcessEnd::Vanished(why) => record.lost(why, now_millis()),
        }
    }

    /// The exit status, when one was recorded.
    pub(super) fn exit(&self) -> Option<Exit> {
        match self {
            ProcessEnd::Finished(f) => f.exit,
            ProcessEnd::Vanished(_) => None,
        }
    }
}

/// Whose process a spawner or watcher reports on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    Stage { run: Uuid, idx: usize },
    Task { test: Uuid, idx: usize },
}

#[derive(Clone, Debug)]
pub enum Msg {
    /// The store changed (a CLI wrote something) or the fallback timer fired.
    Wake,
    /// New runs or tests were queued: only the queue needs a look.
    Queued,
    Spawned {
        owner: Owner,
        result: std::result::Result<Started, SpawnError>,
    },
    Ready {
        run: Uuid,
        idx: usize,
        how: ReadyHow,
    },
    NotReady {
        run: Uuid,
        idx: usize,
        /// Why, in words (`NotReady`'s).
        error: String,
    },
    Ended {
        owner: Owner,
        end: ProcessEnd,
    },
    GraceElapsed {
        run: Uuid,
        idx: usize,
    },
    /// A test task ran past its timeout.
    TaskTimedOut {
        test: Uuid,
        idx: usize,
    },
    /// The heartbeat found this node's lease reaped.
    LeaseLost,
    /// sbatch answered for a Slurm stage: its job id, or why it was refused.
    Submitted {
        run: Uuid,
        idx: usize,
        result: std::result::Result<u64, String>,
    },
    /// A Slurm stage's job left the queue and runs.
    SlurmRunning {
        run: Uuid,
        idx: usize,
    },
    /// A progress worker read a new step.
    Progress {
        run: Uuid,
        reading: crate::workflow::progress::Reading,
    },
    /// A checkpoint worker read checkpoints (or a malformed line): they wait in the run's
    /// watch until the loop records them.
    Checkpoints {
        run: Uuid,
    },
    /// A run's stall timer fired at `deadline` (ms since the epoch).
    StallCheck {
        run: Uuid,
        deadline: crate::model::Millis,
    },
    /// A victim asked to checkpoint before its preemption had its `preempt_wait`.
    PreemptDue {
        run: Uuid,
    },
    /// A run's time-limit timer fired.
    TimeLimit {
        run: Uuid,
    },
    /// Do whatever the run's state asks next (after a spawn's backoff, or a write held while
    /// the run was found in the store).
    Drive {
        run: Uuid,
    },
    /// Fail (or retry) a run for a reason found outside a message (its claim).
    Fail {
        run: Uuid,
        reason: String,
    },
    /// An event of a run to record (a signal it was sent, a note on its restart).
    Note {
        run: Uuid,
        event: NewEvent,
    },
    /// Write a stage's row as the loop holds it, with an event (what restart repair found).
    Record {
        run: Uuid,
        idx: usize,
        event: NewEvent,
    },
    /// Restart repair looks again at a stage that had left no trace.
    Examine {
        run: Uuid,
        idx: usize,
        looks_left: u32,
    },
    /// The held messages (their writes could not land) are due again.
    Replay,
}

impl Msg {
    /// The run this message is about, if it is about one: its messages are handled in order,
    /// and held together when one of their writes cannot land.
    pub(super) fn run(&self) -> Option<Uuid> {
        match self {
            Msg::Spawned { owner: Owner::Stage { run, .. }, .. }
            | Msg::Ended { owner: Owner::Stage { run, .. }, .. } => Some(*run),
            Msg::Ready { run, .. }
            | Msg::NotReady { run, .. }
            | Msg::GraceElapsed { run, .. }
            | Msg::Submitted { run, .. }
            | Msg::SlurmRunning { run, .. }
            | Msg::Progress { run, .. }
            | Msg::Checkpoints { run }
            | Msg::StallCheck { run, .. }
            | Msg::TimeLimit { run }
            | Msg::PreemptDue { run }
            | Msg::Drive { run }
            | Msg::Fail { run, .. }
            | Msg::Note { run, .. }
            | Msg::Record { run, .. }
            | Msg::Examine { run, .. } => Some(*run),
            Msg::Spawned { owner: Owner::Task { .. }, .. }
            | Msg::Ended { owner: Owner::Task { .. }, .. }
            | Msg::Wake
            | Msg::Queued
            | Msg::TaskTimedOut { .. }
            | Msg::LeaseLost
            | Msg::Replay => None,
        }
    }

    /// What handling it records, for the warning when that cannot land.
    pub(super) fn what(&self) -> &'static str {
        match self {
            Msg::Spawned { .. } => "a stage's start",
            Msg::Ready { .. } => "a stage being up",
            Msg::NotReady { .. } => "a stage not coming up",
            Msg::Ended { .. } => "the exit",
            Msg::GraceElapsed { .. } => "a SIGKILL after the grace",
            Msg::Submitted { .. } | Msg::SlurmRunning { .. } => "a Slurm job's start",
            Msg::Progress { .. } => "a step",
            Msg::Checkpoints { .. } => "checkpoints",
            Msg::StallCheck { .. } => "a stall",
            Msg::TimeLimit { .. } => "a time limit",
            Msg::PreemptDue { .. } => "a preemption",
            Msg::Fail { .. } => "a failure",
            Msg::Note { .. } | Msg::Record { .. } => "an event",
            Msg::Examine { .. } => "a stage found at restart",
            Msg::Drive { .. } | Msg::Wake | Msg::Queued | Msg::Replay => "the run's next step",
            Msg::TaskTimedOut { .. } | Msg::LeaseLost => "a change",
        }
    }
}
