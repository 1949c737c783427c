//! Inference tests of an environment: what a test runs for each model, what the JSONL it wrote
//! means, and whether a scheduled test regressed. The test itself is a noun of `model`.

pub mod regression;
pub mod results;
pub mod spec;

pub use spec::{InferenceSpec, Provider};
