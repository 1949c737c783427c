//! `Store`: what the rest of lachesis sees of the store. Runs, their stages and events are its
//! own methods; each other noun's are a trait of its own file, which `Store` gathers.

use async_trait::async_trait;
use uuid::Uuid;

use super::{
    AttemptStore, Backend, CheckpointStore, ClaimStore, DaemonLock, DependencyStore, HoldStore,
    InferenceTestStore, MetricStore, NewDependency, NodeStore, OutboxStore, PreemptionStore, ProgressStore,
    QueueStore, ReportStore, Result, RetentionStore, ScheduleStore, SweepExploitStore, SweepMemberStore,
    SweepResumeStore, SweepStore,
};
use crate::model::{Event, NewEvent, Run, RunQuery, RunState, RunTrigger, Stage, StateCounts};

/// A move of a run made together with a stage's change (see `Store::record_stage`).
#[derive(Clone, Copy, Debug)]
pub struct RunMove<'a> {
    /// The run as last read: the move lands only if it is still in that state and version.
    pub run: &'a Run,
    pub trigger: RunTrigger,
    pub reason: Option<&'a str>,
    /// A terminal state's end, when an exit decides it (see `Store::transition_ended`).
    pub ended_at: Option<crate::model::Millis>,
}

#[async_trait]
pub trait Store:
    InferenceTestStore
    + ScheduleStore
    + NodeStore
    + ClaimStore
    + HoldStore
    + ProgressStore
    + CheckpointStore
    + MetricStore
    + RetentionStore
    + QueueStore
    + ReportStore
    + AttemptStore
    + DependencyStore
    + OutboxStore
    + PreemptionStore
    + SweepStore
    + SweepMemberStore
    + SweepResumeStore
    + SweepExploitStore
    + Send
    + Sync
{
    /// The database underneath, and what it supports.
    fn backend(&self) -> Backend;

    /// The same store, writing as the holder of fencing token `token`: run and test moves,
    /// stage and task writes land only while the row still carries it (`Fenced` otherwise),
    /// and the in-flight queries return only what it holds.
    fn fenced(&self, token: i64) -> std::sync::Arc<dyn Store>;

    /// Inserts a pending run with its (pending) stages and a `submitted` event.
    async fn insert_run(&self, run: &Run, stages: &[Stage]) -> Result<()>;
    /// Inserts many pending runs, each with its stages and `submitted` event, in one
    /// transaction and in order: all of them or none.
    async fn insert_runs(&self, runs: &[(Run, Vec<Stage>)]) -> Result<()>;
    /// `insert_runs` with each run's dependencies (on existing runs or earlier ones of the
    /// list): an edge whose run already ended is settled as it is written, and one that can
    /// never be met refuses the whole list (`Unmet`).
    async fn insert_runs_after(&self, runs: &[(Run, Vec<Stage>, Vec<NewDependency>)]) -> Result<Vec<Run>>;
    async fn run(&self, id: Uuid) -> Result<Option<Run>>;
    /// Runs whose id starts with `prefix` (hex digits and dashes only), at most `limit`.
    async fn runs_by_prefix(&self, prefix: &str, limit: i64) -> Result<Vec<Run>>;
    /// Runs newest first, or pending runs in queue order when filtering on `pending`.
    async fn list_runs(&self, filter: &RunQuery) -> Result<Vec<Run>>;
    /// How many runs are in each state (walks every run: for pages and scrapes, not loops).
    async fn run_counts(&self) -> Result<StateCounts<RunState>>;
    /// How many runs are in each state that is not terminal: an index range, flat however many
    /// finished runs the store keeps.
    async fn live_run_counts(&self) -> Result<StateCounts<RunState>>;
    /// Runs in `starting`, `running`, `stopping` or `retrying` (held under the fence, if any).
    async fn active_runs(&self) -> Result<Vec<Run>>;
    /// Runs a daemon must look after: not terminal, or with a stage that may still be alive.
    async fn supervised_runs(&self) -> Result<Vec<Run>>;
    /// Pending runs in claim order: priority (highest first), then submission.
    async fn pending_runs(&self, limit: i64, offset: i64) -> Result<Vec<Run>>;

    /// Moves `run` by `event` if it is still in the state and version it was read at, writing
    /// the event row in the same transaction. `params` replaces the run's params when given.
    async fn transition(
        &self,
        run: &Run,
        trigger: RunTrigger,
        reason: Option<&str>,
        params: Option<&crate::model::RunParams>,
    ) -> Result<Run>;

    /// `transition` for an end decided by a process's exit: a terminal state's `ended_at` is
    /// `ended_at` (when the process exited, which a daemon that was down learns late), not now.
    async fn transition_ended(
        &self,
        run: &Run,
        trigger: RunTrigger,
        reason: Option<&str>,
        ended_at: crate::model::Millis,
    ) -> Result<Run>;

    /// Moves `run` back to `pending` as its next attempt (a retry after its stages are gone,
    /// or a requeue after its node was lost): attempt + 1, no owner, its stages reset, not
    /// claimed before `not_before`.
    async fn requeue(
        &self,
        run: &Run,
        trigger: RunTrigger,
        reason: &str,
        not_before: crate::model::Millis,
    ) -> Result<Run>;

    /// `requeue` for an attempt that resumes (or says why it does not): its params (with or
    /// without the resume point) and a note event saying so, in the same transaction.
    async fn requeue_resuming(
        &self,
        run: &Run,
        trigger: RunTrigger,
        reason: &str,
        not_before: crate::model::Millis,
        params: &crate::model::RunParams,
        note: &str,
    ) -> Result<Run>;

    /// Gives up an ended run's stages that are still marked live (their node was lost).
    async fn release_run(&self, run: &Run) -> Result<bool>;

    async fn stages(&self, run_id: Uuid) -> Result<Vec<Stage>>;
    /// Writes a stage's row (and an event about it, in the same transaction).
    async fn update_stage(&self, stage: &Stage, event: Option<&NewEvent>) -> Result<()>;
    /// Writes a stage's row with `events` and, in the same transaction, moves its run as
    /// `then` says, if the run is still in the state and version it was read at: a stage's
    /// change and the run state it decides land together. The stage lands either way; `None`
    /// means the run was not moved (it had changed, or the move is a requeue or not allowed
    /// from its state), and the caller re-reads it.
    async fn record_stage(
        &self,
        stage: &Stage,
        events: &[NewEvent],
        then: Option<RunMove<'_>>,
    ) -> Result<Option<Run>>;

    async fn add_event(&self, run_id: Uuid, event: &NewEvent) -> Result<()>;
    /// Events of a run with id greater than `after`, oldest first.
    async fn events(&self, run_id: Uuid, after: i64) -> Result<Vec<Event>>;
    /// The id of the newest event of any run, test or schedule (0 when there is none): a
    /// change marker that pages following the store compare.
    async fn last_event_id(&self) -> Result<i64>;

    /// The selected environment, if any.
    async fn selection(&self) -> Result<Option<crate::environments::Selection>>;
    async fn put_selection(&self, selection: &crate::environments::Selection) -> Result<()>;

    /// The last metrics snapshot of a run: (taken at, data).
    async fn snapshot(&self, run_id: Uuid) -> Result<Option<(i64, serde_json::Value)>>;
    async fn put_snapshot(&self, run_id: Uuid, taken_at: i64, data: &serde_json::Value) -> Result<()>;

    /// Tells the daemons of other machines that work or a stop request is waiting
    /// (PostgreSQL `NOTIFY`); nothing on SQLite, whose one daemon a unix socket wakes.
    async fn announce(&self) -> Result<()>;

    /// Takes the daemon lock for `node` (SQLite: one daemon per store file), or says who
    /// holds it.
    async fn lock_daemon(&self, node: &str) -> Result<DaemonLock>;
}
