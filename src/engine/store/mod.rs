//! Persistence of runs, stages and events. `Store` is what the rest of lachesis sees; SQLite
//! (the embedded default) and PostgreSQL sit behind it.
//!
//! Both backends share one SQL implementation (`sql.rs`, over sqlx's `Any` driver, in the SQL
//! both dialects accept); what really differs — connecting, migrations, the daemon lock — lives
//! in `sqlite.rs` and `postgres.rs`.

/// The run columns every run query reads, in `run_from_row`'s terms.
macro_rules! select_runs_sql {
    () => {
        concat!(
            "SELECT id, workflow, env_name, state, version, priority, attempt, created_at, updated_at, ",
            "started_at, ended_at, reason, run_dir, spec, params, node, fence, not_before, held_at, deps_open FROM runs "
        )
    };
}

/// The test columns every test query reads, in `test_from_row`'s terms.
macro_rules! select_tests_sql {
    () => {
        concat!(
            "SELECT id, state, version, schedule_id, env_name, spec, created_at, started_at, ended_at, reason, ",
            "results, test_dir, node, fence FROM tests "
        )
    };
}

/// The run states a daemon holds a run in (`RunState::is_in_flight`), as an SQL list's inside;
/// a unit test checks it against the model.
macro_rules! in_flight_states {
    () => {
        "'starting', 'running', 'stopping', 'retrying'"
    };
}

/// The process states of a stage or task that may still be alive (`ProcessState::is_live`), as
/// an SQL list's inside; a unit test checks it against the model.
macro_rules! live_process_states {
    () => {
        "'spawning', 'starting', 'up'"
    };
}

/// The runs a daemon supervises, as a condition on `runs`: in flight, or ended with a stage
/// that may still be alive; never a pending run (the queue's, whatever its stages say). Both
/// halves are indexed lookups (run state; the partial index of live stages), so what a
/// restart touches does not grow with the finished runs a node has kept.
macro_rules! supervised_runs_sql {
    () => {
        concat!(
            "id IN (SELECT id FROM runs WHERE state IN (",
            in_flight_states!(),
            ") UNION SELECT run_id FROM stages WHERE state IN (",
            live_process_states!(),
            ")) AND state <> 'pending'"
        )
    };
}

mod attempts;
mod backend;
mod checkpoint;
mod checkpoints;
mod claims;
mod dependencies;
mod events;
mod full;
mod holds;
mod inference_tests;
mod metric_history;
mod migrations;
mod moves;
mod nodes;
mod notices;
pub mod postgres;
mod progress;
mod queue;
mod report;
mod retention;
mod rows;
mod sql;
mod sqlite;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use crate::settings::StoreLocation;

use async_trait::async_trait;
use uuid::Uuid;

use crate::model::{Event, NewEvent, Run, RunQuery, RunState, Stage};
use crate::model::{IllegalTransition, RunTrigger};

pub use attempts::AttemptStore;
pub use backend::Backend;
pub use checkpoints::CheckpointStore;
pub use claims::{ClaimStore, Pick};
pub use dependencies::{DependencyStore, NewDependency};
pub use holds::{HoldStore, PendingEdit};
pub use inference_tests::TestStore;
pub use metric_history::MetricStore;
pub use nodes::{Lease, NodeInfo, NodeRegistration, NodeStore, Reap, labels_fit};
pub use notices::NoticeStore;
pub use progress::ProgressStore;
pub use queue::QueueStore;
pub use report::ReportStore;
pub use retention::{Expired, RetentionStore};
use sql::Locking;
pub use sql::SqlStore;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the store at {target}: {source}")]
    Open { target: String, source: sqlx::Error },
    #[error("cannot migrate the store: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Someone else moved the run first; re-read it and decide again.
    #[error("run {id} changed concurrently (expected {expected} at version {version})")]
    Conflict { id: Uuid, expected: RunState, version: i64 },
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// Someone else moved the test first; re-read it and decide again.
    #[error("test {id} changed concurrently")]
    TestConflict { id: Uuid },
    #[error("corrupt row in the store: {0}")]
    Corrupt(String),
    #[error("{0}")]
    Locked(String),
    /// The node's lease was reaped or replaced: it must register again before writing.
    #[error("node '{node}' lost its lease (its heartbeat expired and another node took over its work)")]
    LeaseLost { node: String },
    /// A write carried a fencing token the row no longer holds: another node took it over.
    #[error("run {id} is no longer held under fencing token {token}; the write was rejected")]
    Fenced { id: Uuid, token: i64 },
    #[error("cannot use {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    UnsupportedUrl(#[from] crate::settings::UnsupportedUrl),
    /// A submitted run's dependency can never be met (its run ended otherwise, or is gone).
    #[error("a dependency can never be met: {reason}")]
    Unmet { reason: String },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A move of a run made together with a stage's change (see `Store::record_stage`).
#[derive(Clone, Copy, Debug)]
pub struct RunMove<'a> {
    /// The run as last read: the move lands only if it is still in that state and version.
    pub run: &'a Run,
    pub event: RunTrigger,
    pub reason: Option<&'a str>,
    /// A terminal state's end, when an exit decides it (see `Store::transition_ended`).
    pub ended_at: Option<crate::model::Millis>,
}

/// Held while a daemon owns the store; dropping it lets another daemon start.
pub struct DaemonLock {
    _held: Box<dyn std::any::Any + Send + Sync>,
}

#[async_trait]
pub trait Store:
    TestStore
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
    + NoticeStore
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
    async fn run_counts(&self) -> Result<Vec<(String, i64)>>;
    /// How many runs are in each state that is not terminal: an index range, flat however many
    /// finished runs the store keeps.
    async fn live_run_counts(&self) -> Result<Vec<(String, i64)>>;
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
        event: RunTrigger,
        reason: Option<&str>,
        params: Option<&crate::model::RunParams>,
    ) -> Result<Run>;

    /// `transition` for an end decided by a process's exit: a terminal state's `ended_at` is
    /// `ended_at` (when the process exited, which a daemon that was down learns late), not now.
    async fn transition_ended(
        &self,
        run: &Run,
        event: RunTrigger,
        reason: Option<&str>,
        ended_at: crate::model::Millis,
    ) -> Result<Run>;

    /// Moves `run` back to `pending` as its next attempt (a retry after its stages are gone,
    /// or a requeue after its node was lost): attempt + 1, no owner, its stages reset, not
    /// claimed before `not_before`.
    async fn requeue(
        &self,
        run: &Run,
        event: RunTrigger,
        reason: &str,
        not_before: crate::model::Millis,
    ) -> Result<Run>;

    /// `requeue` for an attempt that resumes (or says why it does not): its params (with or
    /// without the resume point) and a note event saying so, in the same transaction.
    async fn requeue_resuming(
        &self,
        run: &Run,
        event: RunTrigger,
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

/// Opens (creating and migrating if needed) the store at `location`.
pub async fn open(location: &StoreLocation) -> Result<SqlStore> {
    match location {
        StoreLocation::Sqlite(path) => {
            Ok(SqlStore::new(sqlite::open(path).await?, Backend::Sqlite, Locking::File(path.clone())))
        }
        StoreLocation::Postgres(url) => {
            Ok(SqlStore::new(postgres::open(url).await?, Backend::Postgres, Locking::Advisory))
        }
    }
}
