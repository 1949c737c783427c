//! The stages of a run's earlier attempts, as each attempt ended: copied from `stages` by the
//! requeue that starts the next attempt (`SqlStore::requeue_with`), in its transaction.

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::Result;
use super::rows::stage_from_row;
use super::sql::SqlStore;
use crate::model::Stage;

#[async_trait]
pub trait AttemptStore: Send + Sync {
    /// The stages of `run_id`'s earlier attempts, each with its attempt: by attempt, then
    /// index. A run on its first attempt has none.
    async fn earlier_stages(&self, run_id: Uuid) -> Result<Vec<(i64, Stage)>>;
}

#[async_trait]
impl AttemptStore for SqlStore {
    async fn earlier_stages(&self, run_id: Uuid) -> Result<Vec<(i64, Stage)>> {
        let rows = sqlx::query(
            "SELECT run_id, attempt, idx, name, state, shim, process, started_at, ready_at, ended_at, exit_code, \
             exit_signal, log_path, slurm_job FROM stage_attempts WHERE run_id = $1 ORDER BY attempt, idx",
        )
        .bind(run_id.to_string())
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(|row| Ok((row.try_get("attempt")?, stage_from_row(row)?))).collect()
    }
}
