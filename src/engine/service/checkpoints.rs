//! A run's checkpoints as surfaces show them: the list, the last one, and the trained weights.

use uuid::Uuid;

use super::{Result, Service, ServiceError};
use crate::model::{Checkpoint, NextAttempt, Run, RunState, RunTrigger, next_start, now_millis};
use crate::workflow::checkpoints::params_for;

impl Service {
    /// Every checkpoint of the run named by `prefix`, oldest first, across its attempts.
    pub async fn run_checkpoints(&self, prefix: &str) -> Result<(Run, Vec<Checkpoint>)> {
        let run = self.resolve_run(prefix).await?;
        let checkpoints = self.run_checkpoints_of(run.id).await?;
        Ok((run, checkpoints))
    }

    /// A run's checkpoints, oldest first (none without a `checkpoints:` block).
    pub async fn run_checkpoints_of(&self, id: Uuid) -> Result<Vec<Checkpoint>> {
        Ok(self.store.checkpoints(id).await?)
    }
}

impl Service {
    /// Queues a failed or stopped run again as its next attempt (same id, attempt + 1), from
    /// its checkpoint at step `from` or its last resumable one (from 0 without any); the event
    /// saying which lands with the move.
    pub async fn resume_run(&self, prefix: &str, from: Option<i64>) -> Result<Run> {
        let run = self.resolve_run(prefix).await?;
        if !matches!(run.state, RunState::Failed | RunState::Stopped) {
            return Err(ServiceError::NotResumable { id: run.id.to_string(), state: run.state });
        }
        let checkpoints = self.run_checkpoints_of(run.id).await?;
        let start = next_start(NextAttempt::Resume { from }, &checkpoints)
            .map_err(|problem| ServiceError::NoCheckpoint { id: run.id.to_string(), problem })?;
        let params = params_for(&run.params, &start);
        let note = start.describe(run.attempt + 1);
        let queued = self
            .store
            .requeue_resuming(&run, RunTrigger::Resume, "resume requested", now_millis(), &params, &note)
            .await?;
        self.wake().await;
        Ok(queued)
    }
}
