//! Runs: submit, views (find, list, status), stop and requeue, results.

mod results;
mod stop;
mod submit;
mod views;

pub(super) use results::weights_in;
pub use results::{RunResults, trained_weights, trained_weights_of};
pub(super) use stop::resubmitted_set;
pub use submit::{After, AfterTarget, SubmitRequest};
pub use views::{RunStatus, RunSummary};
