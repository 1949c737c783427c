//! The persisted nouns, one per file: runs (with their transition table), their stages, the
//! process record stages and inference-test tasks share, inference tests (with their table),
//! schedules, events and the training-metric history; and the specs they carry: a run's workflow
//! (`workflow/`), a test's inference spec and a schedule's regression policy.

pub mod checkpoint;
pub mod dependency;
pub mod env_kind;
pub mod event;
pub mod headline;
pub mod inference_spec;
pub mod inference_test;
pub mod metric_point;
pub mod metric_row;
pub mod names;
pub mod pool;
pub mod preemption;
pub mod process;
pub mod progress;
pub mod regression;
pub mod run;
pub mod schedule;
pub mod stage;
pub mod state_counts;
pub mod sweep;
pub mod time;
pub mod webhook_delivery;
pub mod workflow;

pub use checkpoint::{Checkpoint, FoundCheckpoint, NextAttempt, ResumePoint, Start, next_start};
pub use dependency::{Awaited, AwaitedKind, Dependency, Settled, When};
pub use env_kind::{EnvKind, EnvSource};
pub use event::{Event, EventKind, NewEvent};
pub use headline::{HeadlineValue, headline_line, headline_names};
pub use inference_spec::InferenceSpec;
pub use inference_test::{IllegalTestTransition, InferenceTest, TestState, TestTask, TestTrigger};
pub use metric_point::{MetricPoint, MetricReading, MetricSummary};
pub use metric_row::{MetricRow, sample_evenly};
pub use names::{UnknownState, short_id};
pub use pool::{Needs, Pools};
pub use process::{
    Exit, IllegalProcessMove, ProcessIdentity, ProcessRecord, ProcessState, ProcessTrigger, signal_name,
};
pub use progress::{Progress, ProgressPoint};
pub use run::{AfterStop, IllegalTransition, Run, RunPage, RunParams, RunQuery, RunState, RunTrigger};
pub use schedule::Schedule;
pub use stage::Stage;
pub use state_counts::{CountedState, StateCounts};
pub use time::{Millis, now_millis};
pub use webhook_delivery::{DeliveryAttempt, DeliveryState, WebhookDelivery};
