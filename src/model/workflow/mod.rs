//! A workflow as data: the YAML that says which processes a run starts, in which order, how to
//! tell they are up, what they hold exclusively and when the run is over, as serde reads it, with
//! the checks that need nothing else. Reading a workflow file, templating and planning a run's
//! stages are the workflow layer's (`src/runtime/workflow/`).

pub mod checkpoints;
mod duration;
pub mod metrics;
pub mod progress;
pub mod retry;
mod schema;
mod slurm;

pub use checkpoints::{CheckpointJsonl, CheckpointLog, CheckpointSpec};
pub use duration::{Dur, MAX_DURATION};
pub use metrics::{MetricJsonl, MetricLog, MetricSpec};
pub use progress::{JsonlSource, LogSource, ProgressSpec, TotalSpec};
pub use retry::RetryPolicy;
pub use schema::{
    AutoPort, BUILTIN_VARS, Completion, DEFAULT_MAX_PREEMPTIONS, DEFAULT_MIN_RUNTIME, DEFAULT_PREEMPT_WAIT,
    DEFAULT_START_TIMEOUT, Launcher, MAX_NAME_LEN, PortSpec, PreemptSignal, Probe, StageSpec, Workflow,
};
pub use slurm::SlurmOptions;
