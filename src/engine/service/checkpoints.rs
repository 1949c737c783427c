//! A run's checkpoints as surfaces show them: the list, the last one, and the trained weights.

use uuid::Uuid;

use super::{Result, Service};
use crate::model::{Checkpoint, Run};

impl Service {
    /// Every checkpoint of the run named by `prefix`, oldest first, across its attempts.
    pub async fn checkpoints(&self, prefix: &str) -> Result<(Run, Vec<Checkpoint>)> {
        let run = self.resolve(prefix).await?;
        let checkpoints = self.checkpoints_of(run.id).await?;
        Ok((run, checkpoints))
    }

    /// A run's checkpoints, oldest first (none without a `checkpoints:` block).
    pub async fn checkpoints_of(&self, id: Uuid) -> Result<Vec<Checkpoint>> {
        Ok(self.store.checkpoints(id).await?)
    }
}
