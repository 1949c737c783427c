//! Persistence of runs, stages and events. `Store` is what the rest of lachesis sees; SQLite
//! (the embedded default) and PostgreSQL sit behind it.
//!
//! Both backends share one SQL implementation (`sql.rs`, over sqlx's `Any` driver, in the SQL
//! both dialects accept); what really differs — connecting, migrations, the daemon lock — lives
//! in `sqlite.rs` and `postgres.rs`.

#[macro_use]
mod columns;

mod attempts;
mod backend;
mod checkpoints;
mod claims;
mod dependencies;
mod error;
mod events;
mod fault;
mod holds;
mod inference_tests;
mod metric_values;
mod migrations;
mod moves;
mod nodes;
mod open;
mod outbox;
pub mod postgres;
mod preemptions;
mod progress;
mod queue;
mod report;
mod retention;
mod rows;
mod runs;
mod schedules;
#[cfg(any(test, feature = "testing"))]
mod scratch;
mod sql;
mod sqlite;
mod sweep_exploits;
mod sweep_members;
mod sweep_resumes;
mod sweeps;
#[cfg(test)]
mod tests;
mod wal;

pub use attempts::AttemptStore;
pub use backend::Backend;
pub use checkpoints::CheckpointStore;
pub use claims::{ClaimStore, Pick};
pub use dependencies::{DependencyStore, NewDependency};
pub use error::{Result, StoreError};
pub use fault::Fault;
pub use holds::{HoldStore, PendingEdit};
pub use inference_tests::InferenceTestStore;
pub use metric_values::MetricStore;
pub use nodes::{Lease, NodeInfo, NodeRegistration, NodeStore, Reap, labels_fit};
pub use open::{DaemonLock, open};
pub use outbox::{OutboxStore, PostedDelivery};
pub use preemptions::PreemptionStore;
pub use progress::ProgressStore;
pub use queue::QueueStore;
pub use report::{ListedRun, ReportStore};
pub use retention::{Expired, RetentionStore};
pub use runs::{RunMove, Store};
pub use schedules::ScheduleStore;
#[cfg(any(test, feature = "testing"))]
pub use scratch::fresh_postgres;
pub use sql::SqlStore;
pub use sweep_exploits::SweepExploitStore;
pub use sweep_members::SweepMemberStore;
pub use sweep_resumes::{SweepEvent, SweepResumeStore};
pub use sweeps::SweepStore;
