//! The progress series of runs: one row per change of step, per attempt.

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::Result;
use super::sql::SqlStore;
use crate::model::{Millis, ProgressPoint};

#[async_trait]
pub trait ProgressStore: Send + Sync {
    /// Records that `run_id`'s attempt reached `step` at `at`.
    async fn record_progress(&self, run_id: Uuid, point: &ProgressPoint) -> Result<()>;
    /// The recorded changes of one attempt, oldest first.
    async fn progress(&self, run_id: Uuid, attempt: i64) -> Result<Vec<ProgressPoint>>;
    /// The recorded changes of every attempt, by attempt, oldest first.
    async fn progress_all(&self, run_id: Uuid) -> Result<Vec<ProgressPoint>>;
    /// What `Progress::of` reads of one attempt, oldest first: its first change, its last with a
    /// total and its last (fewer when there are none). Three rows off the index, however long
    /// the attempt ran, so a listing's progress costs its rows.
    async fn progress_ends(&self, run_id: Uuid, attempt: i64) -> Result<Vec<ProgressPoint>>;
    /// The last recorded change of one attempt.
    async fn last_progress(&self, run_id: Uuid, attempt: i64) -> Result<Option<ProgressPoint>>;
    /// When the run last reached `running` (from its state events), if it did.
    async fn running_since(&self, run_id: Uuid) -> Result<Option<Millis>>;
}

pub(super) fn point_from_row(row: &sqlx::any::AnyRow) -> Result<ProgressPoint> {
    Ok(ProgressPoint {
        attempt: row.try_get("attempt")?,
        step: row.try_get("step")?,
        total: row.try_get("total")?,
        at: row.try_get("at")?,
    })
}

#[async_trait]
impl ProgressStore for SqlStore {
    async fn record_progress(&self, run_id: Uuid, point: &ProgressPoint) -> Result<()> {
        sqlx::query("INSERT INTO progress (run_id, attempt, step, total, at) VALUES ($1, $2, $3, $4, $5)")
            .bind(run_id.to_string())
            .bind(point.attempt)
            .bind(point.step)
            .bind(point.total)
            .bind(point.at)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn progress(&self, run_id: Uuid, attempt: i64) -> Result<Vec<ProgressPoint>> {
        let rows = sqlx::query(
            "SELECT attempt, step, total, at FROM progress WHERE run_id = $1 AND attempt = $2 ORDER BY at",
        )
        .bind(run_id.to_string())
        .bind(attempt)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(point_from_row).collect()
    }

    async fn progress_all(&self, run_id: Uuid) -> Result<Vec<ProgressPoint>> {
        let rows = sqlx::query(
            "SELECT attempt, step, total, at FROM progress WHERE run_id = $1 ORDER BY attempt, at",
        )
        .bind(run_id.to_string())
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(point_from_row).collect()
    }

    async fn progress_ends(&self, run_id: Uuid, attempt: i64) -> Result<Vec<ProgressPoint>> {
        let mut ends = Vec::with_capacity(3);
        for sql in [
            "SELECT attempt, step, total, at FROM progress WHERE run_id = $1 AND attempt = $2 \
             ORDER BY at LIMIT 1",
            "SELECT attempt, step, total, at FROM progress WHERE run_id = $1 AND attempt = $2 \
             AND total IS NOT NULL ORDER BY at DESC LIMIT 1",
            "SELECT attempt, step, total, at FROM progress WHERE run_id = $1 AND attempt = $2 \
             ORDER BY at DESC LIMIT 1",
        ] {
            let row =
                sqlx::query(sql).bind(run_id.to_string()).bind(attempt).fetch_optional(self.pool()).await?;
            if let Some(row) = row {
                ends.push(point_from_row(&row)?);
            }
        }
        Ok(ends)
    }

    async fn last_progress(&self, run_id: Uuid, attempt: i64) -> Result<Option<ProgressPoint>> {
        let row = sqlx::query(
            "SELECT attempt, step, total, at FROM progress WHERE run_id = $1 AND attempt = $2 \
             ORDER BY at DESC LIMIT 1",
        )
        .bind(run_id.to_string())
        .bind(attempt)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(point_from_row).transpose()
    }

    async fn running_since(&self, run_id: Uuid) -> Result<Option<Millis>> {
        let row = sqlx::query(
            "SELECT at FROM events WHERE run_id = $1 AND kind = 'state' AND to_state = 'running' \
             ORDER BY id DESC LIMIT 1",
        )
        .bind(run_id.to_string())
        .fetch_optional(self.pool())
        .await?;
        Ok(match row {
            Some(row) => Some(row.try_get("at")?),
            None => None,
        })
    }
}
