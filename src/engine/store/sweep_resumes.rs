//! A sweep's resume in the store: its move from stopped (or done by its stop) back to live,
//! with the members its decision re-runs marked and an event, in one transaction; the marks read
//! back for the re-runs (and by the decider's pass, which repairs a resume cut short); and a
//! sweep's events, one per move.

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::rows::corrupt;
use super::sql::SqlStore;
use super::sweeps::{member_number, uuid_of};
use super::{Result, StoreError};
use crate::model::sweep::{Rerun, SweepState};
use crate::model::{Millis, Run, RunParams, RunTrigger, now_millis};

/// A member marked for a re-run: run `run`, re-run only while it is at `version`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkedRerun {
    pub sweep: Uuid,
    pub k: u64,
    pub run: Uuid,
    pub version: i64,
}

/// One move of a sweep, as its event records it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SweepEvent {
    pub at: Millis,
    pub from: SweepState,
    pub to: SweepState,
    pub message: String,
}

#[async_trait]
pub trait SweepResumeStore: Send + Sync {
    /// Moves the sweep from `from` back to `live` (from `stopped`, or from `done` when its stop
    /// ended it: its reason is `stop_reason` and it has no winner), clears its reason and its
    /// stop's marks, marks `reruns` (each with the version its run was read at) and writes an
    /// event saying `message`, in one transaction. False, with nothing written, when the sweep
    /// was not so.
    async fn resume_sweep(
        &self,
        id: Uuid,
        from: SweepState,
        stop_reason: &str,
        reruns: &[Rerun],
        message: &str,
    ) -> Result<bool>;
    /// The members marked for a re-run: of `sweep`, or of every sweep.
    async fn marked_reruns(&self, sweep: Option<Uuid>) -> Result<Vec<MarkedRerun>>;
    /// Clears member run `run`'s mark, if it still holds `version`.
    async fn clear_rerun(&self, run: Uuid, version: i64) -> Result<()>;
    /// Queues the marked member `run` again (as `RunStore::requeue_resuming` does, with
    /// `params` and `note`) and spends its mark, in one transaction, only while the mark still
    /// holds its version and its sweep is live: a conflict, with nothing written, otherwise (a
    /// stop since took the mark, or the run moved). A stop and a re-run thus never both land:
    /// the stop clears the marks in its own transaction.
    async fn requeue_rerun(&self, run: &Run, reason: &str, params: &RunParams, note: &str) -> Result<Run>;
    /// The members its stop ended (`SweepStore::move_sweep` to stopped marks them).
    async fn stopped_by_sweep(&self, id: Uuid) -> Result<Vec<u64>>;
    /// The sweep's moves, oldest first.
    async fn sweep_events(&self, id: Uuid) -> Result<Vec<SweepEvent>>;
}

/// Writes an event of sweep `id`'s move in `tx`.
pub(super) async fn insert_sweep_event(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    id: Uuid,
    from: SweepState,
    to: SweepState,
    message: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO sweep_events (sweep_id, at, from_state, to_state, message) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(id.to_string())
    .bind(now_millis())
    .bind(from.as_str())
    .bind(to.as_str())
    .bind(message)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Marks the members of sweep `id` not ended yet as ended by its stop, in the stop's `tx`, and
/// drops the marks of a resume's re-runs not made yet (a stopped sweep queues nothing).
pub(super) async fn mark_stopped_members(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    id: Uuid,
) -> Result<()> {
    sqlx::query(
        "UPDATE sweep_members SET rerun_version = NULL WHERE sweep_id = $1 AND rerun_version IS NOT NULL",
    )
    .bind(id.to_string())
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "UPDATE sweep_members SET stopped_by_sweep = 1 WHERE sweep_id = $1 AND run_id IN \
         (SELECT id FROM runs WHERE id = sweep_members.run_id AND state NOT IN ('completed', 'failed', 'stopped'))",
    )
    .bind(id.to_string())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

fn marked_from_row(row: &sqlx::any::AnyRow) -> Result<MarkedRerun> {
    Ok(MarkedRerun {
        sweep: uuid_of(row, "sweep_id")?,
        k: member_number(row, "k")?,
        run: uuid_of(row, "run_id")?,
        version: row.try_get("rerun_version")?,
    })
}

#[async_trait]
impl SweepResumeStore for SqlStore {
    async fn resume_sweep(
        &self,
        id: Uuid,
        from: SweepState,
        stop_reason: &str,
        reruns: &[Rerun],
        message: &str,
    ) -> Result<bool> {
        if !matches!(from, SweepState::Stopped | SweepState::Done) {
            return Ok(false);
        }
        let mut tx = self.pool().begin().await?;
        let moved = sqlx::query(
            "UPDATE sweeps SET state = 'live', reason = NULL, updated_at = $1 WHERE id = $2 AND state = $3 \
             AND (state = 'stopped' OR (reason = $4 AND winner_k IS NULL))",
        )
        .bind(now_millis())
        .bind(id.to_string())
        .bind(from.as_str())
        .bind(stop_reason)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if moved == 0 {
            return Ok(false);
        }
        sqlx::query(
            "UPDATE sweep_members SET stopped_by_sweep = 0 WHERE sweep_id = $1 AND stopped_by_sweep = 1",
        )
        .bind(id.to_string())
        .execute(&mut *tx)
        .await?;
        for rerun in reruns {
            sqlx::query(
                "UPDATE sweep_members SET rerun_version = $1 WHERE sweep_id = $2 AND k = $3 AND run_id = $4",
            )
            .bind(rerun.version)
            .bind(id.to_string())
            .bind(rerun.k as i64)
            .bind(rerun.run.to_string())
            .execute(&mut *tx)
            .await?;
        }
        insert_sweep_event(&mut tx, id, from, SweepState::Live, message).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn marked_reruns(&self, sweep: Option<Uuid>) -> Result<Vec<MarkedRerun>> {
        let rows = match sweep {
            Some(sweep) => {
                sqlx::query(
                    "SELECT sweep_id, k, run_id, rerun_version FROM sweep_members \
                     WHERE sweep_id = $1 AND rerun_version IS NOT NULL ORDER BY k",
                )
                .bind(sweep.to_string())
                .fetch_all(self.pool())
                .await?
            }
            None => {
                sqlx::query(
                    "SELECT sweep_id, k, run_id, rerun_version FROM sweep_members \
                     WHERE rerun_version IS NOT NULL ORDER BY sweep_id, k",
                )
                .fetch_all(self.pool())
                .await?
            }
        };
        rows.iter().map(marked_from_row).collect()
    }

    async fn clear_rerun(&self, run: Uuid, version: i64) -> Result<()> {
        sqlx::query("UPDATE sweep_members SET rerun_version = NULL WHERE run_id = $1 AND rerun_version = $2")
            .bind(run.to_string())
            .bind(version)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn requeue_rerun(&self, run: &Run, reason: &str, params: &RunParams, note: &str) -> Result<Run> {
        let (mut tx, queued) = self
            .requeue_uncommitted(run, RunTrigger::Resume, reason, now_millis(), Some((params, note)), None)
            .await?;
        let spent = sqlx::query(
            "UPDATE sweep_members SET rerun_version = NULL WHERE run_id = $1 AND rerun_version = $2 \
             AND EXISTS (SELECT 1 FROM sweeps WHERE sweeps.id = sweep_members.sweep_id AND sweeps.state = 'live')",
        )
        .bind(run.id.to_string())
        .bind(run.version)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if spent == 0 {
            drop(tx);
            return Err(StoreError::Conflict { id: run.id, expected: run.state, version: run.version });
        }
        tx.commit().await?;
        Ok(queued)
    }

    async fn stopped_by_sweep(&self, id: Uuid) -> Result<Vec<u64>> {
        let rows = sqlx::query(
            "SELECT k FROM sweep_members WHERE sweep_id = $1 AND stopped_by_sweep = 1 ORDER BY k",
        )
        .bind(id.to_string())
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(|row| member_number(row, "k")).collect()
    }

    async fn sweep_events(&self, id: Uuid) -> Result<Vec<SweepEvent>> {
        let rows = sqlx::query(
            "SELECT at, from_state, to_state, message FROM sweep_events WHERE sweep_id = $1 ORDER BY id",
        )
        .bind(id.to_string())
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| {
                let from: String = row.try_get("from_state")?;
                let to: String = row.try_get("to_state")?;
                Ok(SweepEvent {
                    at: row.try_get("at")?,
                    from: from.parse().map_err(corrupt)?,
                    to: to.parse().map_err(corrupt)?,
                    message: row.try_get("message")?,
                })
            })
            .collect()
    }
}
