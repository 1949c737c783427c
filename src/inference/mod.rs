//! Inference tests of an environment: what a test runs for each model, what the JSONL it wrote
//! means. The test, its spec and the regression rule are `model`'s (`regression` is re-exported).

pub mod results;
pub mod spec;

pub use crate::model::regression;
pub use spec::{InferenceSpec, Provider};
