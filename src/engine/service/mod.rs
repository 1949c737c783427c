//! The operations every surface (CLI, HTTP, MCP) offers, in one place. Surfaces parse and
//! print; they decide nothing.
//!
//! `bench`, `fixtures` and `records` write beneath the transition table, read by exact id and
//! claim one at a time: for the tests and the figures bench only. A build without `testing`
//! (what users install) has none of them, so no surface can reach around the reconciler.

mod attempts;
#[cfg(any(test, feature = "testing"))]
mod bench;
mod checkpoints;
mod daemon;
mod environments;
mod error;
#[cfg(any(test, feature = "testing"))]
mod fixtures;
mod handle;
mod headline;
mod inference_tests;
mod logs;
mod metric_history;
mod metrics;
mod nodes;
mod pending;
mod pipelines;
#[cfg(any(test, feature = "testing"))]
mod records;
mod report;
mod retention;
mod runs;
mod schedules;
mod sweeps;
mod webhooks;

pub use crate::engine::store::NodeRegistration;
#[cfg(any(test, feature = "testing"))]
pub use crate::engine::store::fresh_postgres;
pub use attempts::AttemptStages;
#[cfg(any(test, feature = "testing"))]
pub use bench::Claimer;
pub use environments::{ConfigView, FieldView};
pub use error::{ErrorKind, Result, ServiceError};
#[cfg(any(test, feature = "testing"))]
pub use fixtures::WaitingRun;
pub use handle::Service;
use handle::resolve_prefix;
pub use inference_tests::{TestRequest, TestStatus};
pub use logs::{DEFAULT_TAIL_LINES, LogRequest, MAX_TAIL_LINES, StageLog, read_log};
pub use metric_history::{HISTORY_SAMPLES, NamedMetrics, ReadingError};
pub use metrics::{RunMetrics, wandb_project, wandb_run_name};
pub use nodes::NodeView;
pub use pending::EditRequest;
pub use pipelines::QueuedPipeline;
pub use report::{
    DEFAULT_WINDOW, LOG_LINES, ModelAccuracy, REPORT_ROWS, Report, ReportRun, ReportTest, Waiting,
    deciding_stage, window_text,
};
pub use retention::{GcReport, disk_usage};
pub use runs::{
    DependencyRequest, DependencyTarget, RunAction, RunOutcome, RunRequest, RunResults, RunSelection,
    RunStatus, RunSummary, trained_weights, trained_weights_of,
};
pub use schedules::ScheduleDetail;
pub use sweeps::{
    Curve, EarlyTermination, MemberStatus, MetricSeries, REPORT_SWEEPS, ReportSweep, SWEEP_LIST_LIMIT,
    StartedSweep, SweepCurves, SweepDecider, SweepDecision, SweepEnd, SweepListing, SweepReadings,
    SweepStatus, SweepSummary, not_a_number_note,
};
pub use webhooks::{DELIVERIES_SHOWN, DeliveryPage, MAX_DELIVERIES_SHOWN};
