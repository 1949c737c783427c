//! A workflow's `checkpoints:` block as written: where a run's trainer says it saved a
//! checkpoint (a stage's log, or a JSONL file such as tinker-cookbook's `checkpoints.jsonl`).
//! Checking, resolving and reading it is the workflow layer's (`workflow/checkpoints.rs`).

use serde::{Deserialize, Serialize};

/// Written `{log: {stage: NAME, pattern: REGEX}}` (groups `step`, `path`, optional `weights`)
/// or `{jsonl: {file: "{run_dir}/…/checkpoints.jsonl", step: /batch, path: /state_path,
/// weights: /sampler_path}}` (JSON pointers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<CheckpointLog>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonl: Option<CheckpointJsonl>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointLog {
    /// The stage whose log is followed.
    pub stage: String,
    /// A regex with a `step` group and a `path` or `weights` group (or both).
    pub pattern: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointJsonl {
    /// The file, inside the run directory: `{run_dir}/…` or relative to it.
    pub file: String,
    /// The JSON pointer of the step (e.g. `/batch`).
    pub step: String,
    /// The JSON pointer of the resumable path (e.g. `/state_path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The JSON pointer of the weights for inference (e.g. `/sampler_path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<String>,
    /// How a run starts from a checkpoint it did not write (a pbt exploit's donor's) when its
    /// trainer resumes by itself from the file's last line, as tinker-cookbook does: that
    /// checkpoint is appended to the run's own file as a line of these fields, with its step and
    /// path at the `step` and `path` pointers (e.g. `{name: pbt}`, since the cookbook's records
    /// need a name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_line: Option<std::collections::BTreeMap<String, String>>,
}
