//! A workflow's `progress:` block as written: where a run's training step comes from (a JSON
//! endpoint, a stage's log or a JSONL metrics file) and what its total is. Checking and
//! resolving it against a run's values is the workflow layer's (`workflow/progress/`).

use serde::{Deserialize, Serialize};

use super::Dur;

/// Written `{http: URL, step: /pointer, total: …, every: 10s}`,
/// `{log: {stage: NAME, pattern: REGEX}, total: …}` or
/// `{jsonl: {file: "{run_dir}/…/metrics.jsonl", step: /step, total: …, fraction: /pointer}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgressSpec {
    /// A URL answering a GET with JSON (templated like probes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// The JSON pointer of the step in the HTTP answer (e.g. `/current_step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonl: Option<JsonlSource>,
    /// A number, a template (`{config.env.total_steps}`), or a JSON pointer into the answer;
    /// absent with a log pattern that has a `total` group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<TotalSpec>,
    /// How often the HTTP source is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<Dur>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSource {
    /// The stage whose log is followed.
    pub stage: String,
    /// A regex with a `step` group and, optionally, a `total` group.
    pub pattern: String,
}

/// A file of one JSON object per line (tinker-cookbook's `metrics.jsonl`), read as it grows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonlSource {
    /// The file, inside the run directory: `{run_dir}/…` or relative to it.
    pub file: String,
    /// The JSON pointer of the step in each line (e.g. `/step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// A number, a template, or a JSON pointer into each line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<TotalSpec>,
    /// The JSON pointer of the fraction done (0 to 1, e.g. `/progress~1done_frac`): where a
    /// line has no step and total, progress is counted in thousandths, step = 1000 × fraction
    /// of a total of 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TotalSpec {
    Number(u64),
    Text(String),
}
