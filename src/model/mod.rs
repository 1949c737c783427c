//! The persisted nouns, one per file: runs (with their transition table), their stages, the
//! process record stages and inference-test tasks share, inference tests (with their table),
//! schedules, events and the training-metric history.

pub mod checkpoint;
pub mod dependency;
pub mod event;
pub mod inference_test;
pub mod metric_point;
pub mod metric_row;
pub mod pool;
pub mod preemption;
pub mod process;
pub mod progress;
pub mod run;
pub mod schedule;
pub mod stage;
pub mod sweep;

use uuid::Uuid;

pub use checkpoint::{Checkpoint, FoundCheckpoint, NextAttempt, ResumePoint, Start, next_start};
pub use dependency::{Dependency, Settled, When};
pub use event::{Event, EventKind, NewEvent};
pub use inference_test::{IllegalTestTransition, InferenceTest, TestState, TestTask, TestTrigger};
pub use metric_point::{MetricPoint, MetricReading, MetricSummary};
pub use metric_row::{MetricRow, sample_evenly};
pub use pool::{Needs, Pools};
pub use process::{
    Exit, IllegalProcessMove, ProcessIdentity, ProcessRecord, ProcessState, ProcessTrigger, signal_name,
};
pub use progress::{Progress, ProgressPoint};
pub use run::{IllegalTransition, Run, RunPage, RunParams, RunQuery, RunState, RunTrigger};
pub use schedule::Schedule;
pub use stage::Stage;

/// Milliseconds since the Unix epoch: one integer type that both SQLite and PostgreSQL store as is.
pub type Millis = i64;

pub fn now_millis() -> Millis {
    chrono::Utc::now().timestamp_millis()
}

/// The first 8 hex digits of an id: what people type and read.
pub fn short_id(id: &Uuid) -> String {
    id.simple().to_string()[..8].to_string()
}

/// A state name that no state of `kind` has.
#[derive(Debug, thiserror::Error)]
#[error("unknown {kind} state '{text}' (expected one of: {expected})")]
pub struct UnknownState {
    pub kind: &'static str,
    pub text: String,
    pub expected: String,
}

impl UnknownState {
    /// `text` is not one of `names`, the states of a `kind`.
    pub fn new<'a>(kind: &'static str, text: &str, names: impl IntoIterator<Item = &'a str>) -> UnknownState {
        let expected = names.into_iter().collect::<Vec<_>>().join(", ");
        UnknownState { kind, text: text.to_string(), expected }
    }
}
