//! Runs: submit, views (find, list, status), stop and requeue, commands on several, results.

mod environment;
mod results;
mod selection;
mod stop;
mod submit;
mod views;

pub(super) use crate::engine::reconciler::weights_in;
pub use crate::engine::reconciler::{trained_weights, trained_weights_of};
pub use crate::workflow::request::{DependencyRequest, DependencyTarget, RunRequest};
pub(super) use environment::RunEnvironment;
pub use results::RunResults;
pub use selection::{RunAction, RunOutcome, RunSelection};
pub(super) use stop::resubmitted_set;
pub(super) use submit::{Earlier, InBatch, SweepRows};
pub use views::{RunStatus, RunSummary};
