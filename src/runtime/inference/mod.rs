//! Inference tests of an environment: what a test runs for each model (an Atropos
//! environment's `process` mode, or a verifiers environment's `vf-eval`), and what the files it
//! wrote mean. The test, its spec and the regression rule are `model`'s (`regression` is
//! re-exported).

pub mod results;
pub mod spec;
pub mod verifiers_results;

pub use crate::model::regression;
pub use spec::{InferenceSpec, Provider};
