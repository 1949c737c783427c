//! A run's checkpoints: one row per checkpoint its trainer wrote, across its attempts, keyed
//! by the line it was read from so a line read again adds nothing.

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::Result;
use super::sql::SqlStore;
use crate::model::{Checkpoint, FoundCheckpoint, Millis};

#[async_trait]
pub trait CheckpointStore: Send + Sync {
    /// Records a checkpoint of `run_id`'s attempt `attempt`; false if its line was recorded
    /// before.
    async fn record_checkpoint(
        &self,
        run_id: Uuid,
        attempt: i64,
        found: &FoundCheckpoint,
        at: Millis,
    ) -> Result<bool>;
    /// A run's checkpoints, oldest first.
    async fn checkpoints(&self, run_id: Uuid) -> Result<Vec<Checkpoint>>;
    /// A run's last checkpoint: one row off the index, however many it has.
    async fn last_checkpoint(&self, run_id: Uuid) -> Result<Option<Checkpoint>>;
    /// The weights path of the run's last checkpoint that had one.
    async fn last_weights(&self, run_id: Uuid) -> Result<Option<String>>;
}

pub(super) fn checkpoint_from_row(row: &sqlx::any::AnyRow) -> Result<Checkpoint> {
    Ok(Checkpoint {
        attempt: row.try_get("attempt")?,
        step: row.try_get("step")?,
        path: row.try_get("path")?,
        weights: row.try_get("weights")?,
        at: row.try_get("at")?,
    })
}

#[async_trait]
impl CheckpointStore for SqlStore {
    async fn record_checkpoint(
        &self,
        run_id: Uuid,
        attempt: i64,
        found: &FoundCheckpoint,
        at: Millis,
    ) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO checkpoints (run_id, attempt, step, path, weights, source_key, at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
        )
        .bind(run_id.to_string())
        .bind(attempt)
        .bind(found.step)
        .bind(found.path.clone())
        .bind(found.weights.clone())
        .bind(found.key.clone())
        .bind(at)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn checkpoints(&self, run_id: Uuid) -> Result<Vec<Checkpoint>> {
        let rows = sqlx::query(
            "SELECT attempt, step, path, weights, at FROM checkpoints WHERE run_id = $1 \
             ORDER BY at, attempt, step",
        )
        .bind(run_id.to_string())
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(checkpoint_from_row).collect()
    }

    async fn last_checkpoint(&self, run_id: Uuid) -> Result<Option<Checkpoint>> {
        let row = sqlx::query(
            "SELECT attempt, step, path, weights, at FROM checkpoints WHERE run_id = $1 \
             ORDER BY at DESC, attempt DESC, step DESC LIMIT 1",
        )
        .bind(run_id.to_string())
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(checkpoint_from_row).transpose()
    }

    async fn last_weights(&self, run_id: Uuid) -> Result<Option<String>> {
        let row = sqlx::query(
            "SELECT weights FROM checkpoints WHERE run_id = $1 AND weights IS NOT NULL \
             ORDER BY at DESC, attempt DESC, step DESC LIMIT 1",
        )
        .bind(run_id.to_string())
        .fetch_optional(self.pool())
        .await?;
        Ok(match row {
            Some(row) => row.try_get("weights")?,
            None => None,
        })
    }
}
