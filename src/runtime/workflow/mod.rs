//! Workflows at work: reading a workflow file, checking it, filling its templates and planning
//! a run's stages. The workflow as data (its schema) is `model::workflow`, re-exported here.

mod catalog;
pub mod checkpoints;
pub mod metrics;
mod names;
mod parse;
pub mod pipeline;
mod plan;
pub mod program;
pub mod progress;
pub mod request;
pub mod template;
mod trains;
pub mod wandb;

pub use crate::model::workflow::retry;
pub use crate::model::workflow::{
    AutoPort, BUILTIN_VARS, Completion, DEFAULT_START_TIMEOUT, Dur, Launcher, MAX_DURATION, MAX_NAME_LEN,
    PortSpec, PreemptSignal, Probe, RetryPolicy, SlurmOptions, StageSpec, Workflow,
};
pub use catalog::{Catalog, CatalogError};
pub use checkpoints::CheckpointSpec;
pub use metrics::MetricSpec;
pub use names::{NAME_RULE, check_log_path, is_simple_name};
pub use parse::InvalidWorkflow;
pub use plan::{PlanError, StagePlan, expand_home};
pub use progress::ProgressSpec;
pub use request::RunRequest;
