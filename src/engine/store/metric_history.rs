//! The training-metric history in the store: one row per (run, step), upserted, so a reading
//! taken every few minutes adds only the steps that are new and refreshes the rest.

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::Result;
use super::sql::SqlStore;
use crate::model::MetricRow;

#[async_trait]
pub trait MetricStore: Send + Sync {
    /// Writes `rows` of run `run_id`, replacing any stored row of the same step.
    async fn put_metric_rows(&self, run_id: Uuid, rows: &[MetricRow]) -> Result<()>;
    /// The run's stored rows, by step.
    async fn metric_rows(&self, run_id: Uuid) -> Result<Vec<MetricRow>>;
    /// The run's last stored metric row that holds a metric.
    async fn last_metric_row(&self, run_id: Uuid) -> Result<Option<MetricRow>>;
}

pub(super) fn metric_row_from_row(row: &sqlx::any::AnyRow) -> Result<MetricRow> {
    Ok(MetricRow {
        step: row.try_get("step")?,
        reward_mean: row.try_get("reward_mean")?,
        percent_correct: row.try_get("percent_correct")?,
        eval_percent_correct: row.try_get("eval_percent_correct")?,
        loss: row.try_get("loss")?,
        recorded_at: row.try_get("recorded_at")?,
    })
}

#[async_trait]
impl MetricStore for SqlStore {
    async fn put_metric_rows(&self, run_id: Uuid, rows: &[MetricRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let run_id = run_id.to_string();
        // One transaction: a reading lands whole or not at all.
        let mut tx = self.pool().begin().await?;
        for row in rows {
            sqlx::query(
                "INSERT INTO metric_history \
                 (run_id, step, reward_mean, percent_correct, eval_percent_correct, loss, recorded_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (run_id, step) DO UPDATE SET reward_mean = excluded.reward_mean, \
                 percent_correct = excluded.percent_correct, \
                 eval_percent_correct = excluded.eval_percent_correct, loss = excluded.loss, \
                 recorded_at = excluded.recorded_at",
            )
            // Not cached: PostgreSQL would keep the parameter types of the first rows it saw, and
            // a metric that was NULL there (typed as such) refuses a number later.
            .persistent(false)
            .bind(&run_id)
            .bind(row.step)
            .bind(row.reward_mean)
            .bind(row.percent_correct)
            .bind(row.eval_percent_correct)
            .bind(row.loss)
            .bind(row.recorded_at)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn metric_rows(&self, run_id: Uuid) -> Result<Vec<MetricRow>> {
        let rows = sqlx::query(
            "SELECT step, reward_mean, percent_correct, eval_percent_correct, loss, recorded_at \
             FROM metric_history WHERE run_id = $1 ORDER BY step",
        )
        .bind(run_id.to_string())
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(metric_row_from_row).collect()
    }

    async fn last_metric_row(&self, run_id: Uuid) -> Result<Option<MetricRow>> {
        // Walks the (run_id, step) key backwards to the first row that holds a metric.
        let row = sqlx::query(
            "SELECT step, reward_mean, percent_correct, eval_percent_correct, loss, recorded_at \
             FROM metric_history WHERE run_id = $1 AND (reward_mean IS NOT NULL OR percent_correct IS NOT NULL \
             OR eval_percent_correct IS NOT NULL OR loss IS NOT NULL) ORDER BY step DESC LIMIT 1",
        )
        .bind(run_id.to_string())
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(metric_row_from_row).transpose()
    }
}
