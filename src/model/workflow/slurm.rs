//! The `slurm:` block of a workflow: the sbatch settings its stages are submitted with.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Per-workflow Slurm settings (the workflow YAML carries `launcher: slurm` plus these under
/// `slurm:`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmOptions {
    pub partition: Option<String>,
    pub account: Option<String>,
    /// Slurm's `--time` syntax (`90`, `4:00:00`, `2-00:00:00`).
    pub time_limit: Option<String>,
    /// Extra sbatch options, applied to every stage (`--gres=gpu:1`).
    #[serde(default)]
    pub sbatch_options: Vec<String>,
    /// Extra sbatch options per stage, by stage name; they come last, so they win.
    #[serde(default)]
    pub stage_options: BTreeMap<String, Vec<String>>,
}

impl SlurmOptions {
    /// The sbatch options these settings give `stage`, in order.
    pub fn sbatch_args(&self, stage: &str) -> Vec<String> {
        let mut args = Vec::new();
        args.extend(self.partition.iter().map(|p| format!("--partition={p}")));
        args.extend(self.account.iter().map(|a| format!("--account={a}")));
        args.extend(self.time_limit.iter().map(|t| format!("--time={t}")));
        args.extend(self.sbatch_options.iter().cloned());
        args.extend(self.stage_options.get(stage).into_iter().flatten().cloned());
        args
    }
}
