//! Workflows: the YAML that says which processes a run starts, in which order, how to tell they
//! are up, what they hold exclusively and when the run is over.

mod catalog;
pub mod checkpoints;
mod duration;
pub mod metrics;
mod names;
mod parse;
pub mod pipeline;
mod plan;
pub mod progress;
pub mod request;
pub mod retry;
mod schema;
mod slurm;
pub mod template;
pub mod wandb;

pub use catalog::{Catalog, CatalogError};
pub use checkpoints::CheckpointSpec;
pub use duration::{Dur, MAX_DURATION};
pub use metrics::MetricSpec;
pub use names::{NAME_RULE, check_log_path, is_simple_name};
pub use parse::InvalidWorkflow;
pub use plan::{PlanError, StagePlan, expand_home};
pub use progress::ProgressSpec;
pub use request::RunRequest;
pub use retry::RetryPolicy;
pub use schema::{
    AutoPort, BUILTIN_VARS, Completion, DEFAULT_START_TIMEOUT, Launcher, MAX_NAME_LEN, PortSpec, Probe,
    StageSpec, Workflow,
};
pub use slurm::SlurmOptions;
