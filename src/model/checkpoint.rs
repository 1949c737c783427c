//! A run's checkpoints: what its trainer saved, as recorded from the workflow's `checkpoints:`
//! source, one row per checkpoint across every attempt. Pure.

use serde::{Deserialize, Serialize};

use super::Millis;

/// One checkpoint a trainer wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The attempt that was running when it was recorded.
    pub attempt: i64,
    pub step: i64,
    /// Where training can resume from (a `tinker://…/weights/…` state), if the line had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Weights for inference (a `tinker://…/sampler_weights/…`), if the line had them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights: Option<String>,
    /// When it was recorded (ms since the epoch).
    pub at: Millis,
}

/// A checkpoint as read from its source, before it is recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundCheckpoint {
    pub step: i64,
    pub path: Option<String>,
    pub weights: Option<String>,
    /// Names the line it came from, so a line read again adds nothing.
    pub key: String,
}

impl Checkpoint {
    /// The last checkpoint (of those given, oldest first) that training can resume from.
    pub fn last_resumable(checkpoints: &[Checkpoint]) -> Option<&Checkpoint> {
        checkpoints.iter().rev().find(|c| c.path.is_some())
    }

    /// The last weights path written (the run's trained weights, also for a failed run).
    pub fn last_weights(checkpoints: &[Checkpoint]) -> Option<&str> {
        checkpoints.iter().rev().find_map(|c| c.weights.as_deref())
    }
}
