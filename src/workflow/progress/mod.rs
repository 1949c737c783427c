//! A workflow's `progress:` block: the spec as written (`spec.rs`), and what a resolved source
//! reads (`reading.rs`).

mod reading;
mod spec;
#[cfg(test)]
mod tests;

pub(in crate::workflow) use reading::as_count;
pub use reading::{FRACTION_TOTAL, Reading, ResolvedProgress, ResolvedSource, ResolvedTotal};
pub use spec::{DEFAULT_EVERY, JsonlSource, LogSource, ProgressError, ProgressSpec, TotalSpec};
pub(in crate::workflow) use spec::{check_file, compile, resolve_run_file};
