//! A stage: one process of a run (api, trainer, env), in the order the workflow starts them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Millis, ProcessRecord};

/// One process of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stage {
    pub run_id: Uuid,
    pub idx: i64,
    pub name: String,
    /// Its process: state, identity, start and end.
    #[serde(flatten)]
    pub record: ProcessRecord,
    /// When it counted as up.
    pub ready_at: Option<Millis>,
    pub log_path: PathBuf,
    /// The Slurm job running the stage, for workflows with `launcher: slurm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job: Option<u64>,
}

impl Stage {
    /// A stage not started yet.
    pub fn pending(run_id: Uuid, idx: usize, name: &str, log_path: PathBuf) -> Stage {
        Stage {
            run_id,
            idx: idx as i64,
            name: name.to_string(),
            record: ProcessRecord::default(),
            ready_at: None,
            log_path,
            slurm_job: None,
        }
    }
}
