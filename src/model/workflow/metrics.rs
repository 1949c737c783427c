//! A workflow's `metrics:` block as data: where a run's training metrics appear, by name.
//! Checking and reading it are the workflow layer's (`src/runtime/workflow/metrics.rs`).

use serde::{Deserialize, Serialize};

/// Written `{jsonl: {file: "{run_dir}/…/metrics.jsonl", step: /step}}` (every number of a row
/// but its step is a metric, nested objects' keys joined with `/`) or
/// `{log: {stage: NAME, pattern: REGEX}}` (every named group but `step` is a metric).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<MetricLog>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonl: Option<MetricJsonl>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricLog {
    /// The stage whose log is followed.
    pub stage: String,
    /// A regex with a `step` group and a named group per metric.
    pub pattern: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricJsonl {
    /// The file, inside the run directory: `{run_dir}/…` or relative to it.
    pub file: String,
    /// The JSON pointer of the step (e.g. `/step`).
    pub step: String,
}
