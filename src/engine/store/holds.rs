//! Changes to a run still in the queue: a hold, its release, a new priority or new parameters.
//! Each lands only while the run is pending, with its event, in one transaction.

use async_trait::async_trait;

use super::events::insert_event;
use super::rows::json;
use super::sql::SqlStore;
use super::{Result, StoreError};
use crate::model::{EventKind, Run, now_millis};

/// What an edit leaves of a pending run: these columns, as given, replace the stored ones.
#[derive(Clone, Debug)]
pub struct PendingEdit {
    pub held_at: Option<crate::model::Millis>,
    pub priority: i64,
    pub params: crate::model::RunParams,
}

#[async_trait]
pub trait HoldStore: Send + Sync {
    /// Writes `edit` over `run` (read at `run.version`) while it is still pending and
    /// unchanged, recording `message` as its event; `Conflict` when the run moved meanwhile.
    async fn edit_pending(&self, run: &Run, edit: &PendingEdit, message: &str) -> Result<Run>;
}

#[async_trait]
impl HoldStore for SqlStore {
    async fn edit_pending(&self, run: &Run, edit: &PendingEdit, message: &str) -> Result<Run> {
        let now = now_millis();
        let mut tx = self.pool().begin().await?;
        let updated = sqlx::query(
            "UPDATE runs SET held_at = $1, priority = $2, params = $3, version = version + 1, updated_at = $4 \
             WHERE id = $5 AND state = 'pending' AND version = $6",
        )
        .bind(edit.held_at)
        .bind(edit.priority)
        .bind(json(&edit.params))
        .bind(now)
        .bind(run.id.to_string())
        .bind(run.version)
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() == 0 {
            return Err(StoreError::Conflict { id: run.id, expected: run.state, version: run.version });
        }
        insert_event(&mut *tx, run.id, EventKind::Note, None, None, message).await?;
        tx.commit().await?;
        Ok(Run {
            held_at: edit.held_at,
            priority: edit.priority,
            params: edit.params.clone(),
            version: run.version + 1,
            updated_at: now,
            ..run.clone()
        })
    }
}
