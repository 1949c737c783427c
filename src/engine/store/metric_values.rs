//! Training metrics by name in the store (`metric_values`): one reading per (run, metric,
//! attempt, step), upserted, so a re-read after a restart (a follower reading its file again,
//! the W&B poller's next reading) adds nothing. A reading's `recorded_at` moves only when its
//! value changes, so "which runs got new readings since" costs the new readings alone.

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::Result;
use super::rows::corrupt;
use super::sql::SqlStore;
use crate::model::metric_point::{MAX_SERIES_POINTS, series};
use crate::model::metric_row::ROW_METRICS;
use crate::model::{HeadlineValue, MetricPoint, MetricReading, MetricRow, MetricSummary, Millis};

/// The most metric names one read of a run's names lists: a stage that invents a name per step
/// fills its table, not an answer.
pub const MAX_METRIC_NAMES: usize = 1_000;

/// Readings per insert statement: a few round trips for a whole file, well inside SQLite's bound
/// on a statement's parameters.
const ROWS_PER_INSERT: usize = 64;

#[async_trait]
pub trait MetricStore: Send + Sync {
    /// Records `readings` of run `run_id`'s attempt `attempt`, read at `at`, in one transaction;
    /// a reading of a (name, attempt, step) already stored replaces its value, and moves its
    /// `recorded_at` only when the value changed.
    async fn put_metric_values(
        &self,
        run_id: Uuid,
        attempt: u32,
        readings: &[MetricReading],
        at: Millis,
    ) -> Result<()>;
    /// The series of metric `name` of the run, ordered by step: the first
    /// [`MAX_SERIES_POINTS`] readings by attempt and step, a later attempt's replacing an earlier
    /// one's from the step it resumed at (`model::metric_point::series`).
    async fn metric_series(&self, run_id: Uuid, name: &str) -> Result<Vec<MetricPoint>>;
    /// The names of the run's metrics, sorted, at most [`MAX_METRIC_NAMES`].
    async fn metric_names(&self, run_id: Uuid) -> Result<Vec<String>>;
    /// Each of the run's metrics (at most [`MAX_METRIC_NAMES`], by name) with its count of
    /// readings and its last one.
    async fn metric_summaries(&self, run_id: Uuid) -> Result<Vec<MetricSummary>>;
    /// The runs with a reading recorded (or changed) after `recorded_after`
    /// (`metric_values_by_time`).
    async fn metric_runs_since(&self, recorded_after: Millis) -> Result<Vec<Uuid>>;
    /// Writes W&B-shaped `rows` as readings of the run's first attempt, each at its
    /// `recorded_at` (fixtures and tests).
    async fn put_metric_rows(&self, run_id: Uuid, rows: &[MetricRow]) -> Result<()> {
        for row in rows {
            let named = [
                ("train/reward_mean", row.reward_mean),
                ("train/percent_correct", row.percent_correct),
                ("eval/percent_correct", row.eval_percent_correct),
                ("train/loss", row.loss),
            ];
            let readings: Vec<MetricReading> =
                named.into_iter().filter_map(|(n, v)| MetricReading::new(n, row.step, v?)).collect();
            self.put_metric_values(run_id, 1, &readings, row.recorded_at).await?;
        }
        Ok(())
    }
    /// The run's W&B metrics (`ROW_METRICS`) as rows, one per step, by step, each metric's
    /// series read as `run_metric_series` reads it.
    async fn metric_rows(&self, run_id: Uuid) -> Result<Vec<MetricRow>>;
    /// For each of `ids` with a reading of metric `name`: its last one (the latest attempt's
    /// highest step), a seek on the key per run.
    async fn last_values(&self, ids: &[Uuid], name: &str) -> Result<HashMap<Uuid, HeadlineValue>>;
}

/// The readings newer than a mark, off the covering time index (`metric_values_by_time`).
pub(super) const METRIC_RUNS_SINCE: &str = "SELECT run_id FROM metric_values WHERE recorded_at > $1";

/// The last reading of metric `$1` of each of the runs `{ids}` (from `$2`): its latest attempt's
/// highest step, one seek on the key per run.
pub(super) const LAST_VALUES: &str = "SELECT r.id AS run_id, m.step, m.value FROM runs r \
     JOIN metric_values m ON m.run_id = r.id AND m.name = $1 \
     AND m.attempt = (SELECT n.attempt FROM metric_values n WHERE n.run_id = r.id AND n.name = $1 \
                      ORDER BY n.attempt DESC, n.step DESC LIMIT 1) \
     AND m.step = (SELECT n.step FROM metric_values n WHERE n.run_id = r.id AND n.name = $1 \
                   ORDER BY n.attempt DESC, n.step DESC LIMIT 1) \
     WHERE r.id IN ({ids})";

/// Runs one `last_values` query names at most.
const LAST_VALUES_CHUNK: usize = 512;

fn point_from_row(row: &sqlx::any::AnyRow) -> Result<MetricPoint> {
    let attempt: i64 = row.try_get("attempt")?;
    Ok(MetricPoint {
        attempt: u32::try_from(attempt).map_err(corrupt)?,
        step: row.try_get("step")?,
        value: row.try_get("value")?,
    })
}

#[async_trait]
impl MetricStore for SqlStore {
    async fn put_metric_values(
        &self,
        run_id: Uuid,
        attempt: u32,
        readings: &[MetricReading],
        at: Millis,
    ) -> Result<()> {
        if readings.is_empty() {
            return Ok(());
        }
        let run_id = run_id.to_string();
        // One transaction: a batch lands whole or not at all.
        let mut tx = self.pool().begin().await?;
        for chunk in readings.chunks(ROWS_PER_INSERT) {
            let values = (0..chunk.len())
                .map(|i| format!("($1, ${}, $2, ${}, ${}, $3)", 4 + 3 * i, 5 + 3 * i, 6 + 3 * i))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!(
                "INSERT INTO metric_values (run_id, name, attempt, step, value, recorded_at) VALUES {values} \
                 ON CONFLICT (run_id, name, attempt, step) DO UPDATE SET value = excluded.value, \
                 recorded_at = excluded.recorded_at WHERE metric_values.value <> excluded.value"
            );
            let mut query =
                sqlx::query(sqlx::AssertSqlSafe(sql)).bind(&run_id).bind(i64::from(attempt)).bind(at);
            for reading in chunk {
                query = query.bind(&reading.name).bind(reading.step).bind(reading.value);
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn metric_series(&self, run_id: Uuid, name: &str) -> Result<Vec<MetricPoint>> {
        let rows = sqlx::query(
            "SELECT attempt, step, value FROM metric_values WHERE run_id = $1 AND name = $2 \
             ORDER BY attempt, step LIMIT $3",
        )
        .bind(run_id.to_string())
        .bind(name)
        .bind(MAX_SERIES_POINTS as i64)
        .fetch_all(self.pool())
        .await?;
        let points = rows.iter().map(point_from_row).collect::<Result<Vec<_>>>()?;
        Ok(series(points))
    }

    async fn metric_names(&self, run_id: Uuid) -> Result<Vec<String>> {
        let rows =
            sqlx::query("SELECT DISTINCT name FROM metric_values WHERE run_id = $1 ORDER BY name LIMIT $2")
                .bind(run_id.to_string())
                .bind(MAX_METRIC_NAMES as i64)
                .fetch_all(self.pool())
                .await?;
        rows.iter().map(|row| Ok(row.try_get("name")?)).collect()
    }

    async fn metric_summaries(&self, run_id: Uuid) -> Result<Vec<MetricSummary>> {
        let last = "SELECT {col} FROM metric_values n WHERE n.run_id = m.run_id AND n.name = m.name \
                    ORDER BY n.attempt DESC, n.step DESC LIMIT 1";
        let sql = format!(
            "SELECT g.name, g.count, m.attempt, m.step, m.value, m.recorded_at \
             FROM (SELECT name, COUNT(*) AS count FROM metric_values WHERE run_id = $1 \
                   GROUP BY name ORDER BY name LIMIT $2) g \
             JOIN metric_values m ON m.run_id = $1 AND m.name = g.name \
             AND m.attempt = ({}) AND m.step = ({}) ORDER BY g.name",
            last.replace("{col}", "n.attempt"),
            last.replace("{col}", "n.step"),
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(run_id.to_string())
            .bind(MAX_METRIC_NAMES as i64)
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|row| {
                Ok(MetricSummary {
                    name: row.try_get("name")?,
                    count: row.try_get("count")?,
                    last: point_from_row(row)?,
                    recorded_at: row.try_get("recorded_at")?,
                })
            })
            .collect()
    }

    async fn metric_runs_since(&self, recorded_after: Millis) -> Result<Vec<Uuid>> {
        // Not DISTINCT: SQLite would walk the key for its order rather than the time index.
        let rows = sqlx::query(METRIC_RUNS_SINCE).bind(recorded_after).fetch_all(self.pool()).await?;
        let mut runs = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for row in &rows {
            let id: String = row.try_get("run_id")?;
            if seen.insert(id.clone()) {
                runs.push(Uuid::parse_str(&id).map_err(corrupt)?);
            }
        }
        Ok(runs)
    }

    async fn metric_rows(&self, run_id: Uuid) -> Result<Vec<MetricRow>> {
        let mut readings = Vec::new();
        for name in ROW_METRICS {
            let rows = sqlx::query(
                "SELECT attempt, step, value, recorded_at FROM metric_values \
                 WHERE run_id = $1 AND name = $2 ORDER BY attempt, step LIMIT $3",
            )
            .bind(run_id.to_string())
            .bind(*name)
            .bind(MAX_SERIES_POINTS as i64)
            .fetch_all(self.pool())
            .await?;
            let mut at = HashMap::new();
            let mut points = Vec::with_capacity(rows.len());
            for row in &rows {
                let point = point_from_row(row)?;
                at.insert((point.attempt, point.step), row.try_get::<i64, _>("recorded_at")?);
                points.push(point);
            }
            readings.extend(
                series(points).into_iter().map(|p| (*name, p.step, p.value, at[&(p.attempt, p.step)])),
            );
        }
        Ok(MetricRow::from_readings(readings))
    }

    async fn last_values(&self, ids: &[Uuid], name: &str) -> Result<HashMap<Uuid, HeadlineValue>> {
        let mut found = HashMap::new();
        for chunk in ids.chunks(LAST_VALUES_CHUNK) {
            // Padded to a power of two with its first id, so the statement has a few shapes.
            let n = chunk.len().next_power_of_two();
            let marks = (2..n + 2).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
            let mut query = sqlx::query(sqlx::AssertSqlSafe(LAST_VALUES.replace("{ids}", &marks))).bind(name);
            for i in 0..n {
                query = query.bind(chunk.get(i).unwrap_or(&chunk[0]).to_string());
            }
            for row in query.fetch_all(self.pool()).await? {
                let id: String = row.try_get("run_id")?;
                let value = HeadlineValue {
                    name: name.to_string(),
                    step: row.try_get("step")?,
                    value: row.try_get("value")?,
                };
                found.insert(Uuid::parse_str(&id).map_err(corrupt)?, value);
            }
        }
        Ok(found)
    }
}
