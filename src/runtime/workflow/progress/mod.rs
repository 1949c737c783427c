//! A workflow's `progress:` block at work: checked and resolved (`spec.rs`; the block as
//! written is `model::workflow::progress`), and what a resolved source reads (`reading.rs`).

mod reading;
mod spec;
#[cfg(test)]
mod tests;

pub use crate::model::workflow::progress::{JsonlSource, LogSource, ProgressSpec, TotalSpec};
pub(in crate::runtime::workflow) use reading::as_count;
pub use reading::{FRACTION_TOTAL, Reading, ResolvedProgress, ResolvedSource, ResolvedTotal};
pub use spec::{DEFAULT_EVERY, ProgressError};
pub(in crate::runtime::workflow) use spec::{check_file, compile, resolve_run_file};
