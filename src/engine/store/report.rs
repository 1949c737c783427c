//! The morning report's reads and the cron post's memory. Every read is an index range with a
//! limit (runs and tests by end time, live ones by state; a run's last checkpoint and metric row
//! are the checkpoint and metric stores' own reads), so a report costs what it shows, however
//! long the store's history.

use async_trait::async_trait;
use sqlx::Row;

use super::Result;
use super::inference_tests::test_from_row;
use super::rows::run_from_row;
use super::sql::{SqlStore, count_by_state};
use crate::model::{InferenceTest, Millis, Run};

#[async_trait]
pub trait ReportStore: Send + Sync {
    /// Up to `limit` runs that ended at or after `since`, the latest end first (`runs_by_end`).
    async fn runs_ended_since(&self, since: Millis, limit: i64) -> Result<Vec<Run>>;
    /// Up to `limit` runs in flight (starting, running, stopping, retrying), in queue order.
    async fn runs_in_flight(&self, limit: i64) -> Result<Vec<Run>>;
    /// How many runs ended at or after `since`, per state (counted on `runs_by_end`).
    async fn ended_run_counts(&self, since: Millis) -> Result<Vec<(String, i64)>>;
    /// How many pending runs are held.
    async fn held_count(&self) -> Result<i64>;
    /// Up to `limit` tests that ended at or after `since`, the latest end first (`tests_by_end`).
    async fn tests_ended_since(&self, since: Millis, limit: i64) -> Result<Vec<InferenceTest>>;
    /// How many tests ended at or after `since`, per state.
    async fn ended_test_counts(&self, since: Millis) -> Result<Vec<(String, i64)>>;
    /// How many tests are queued or running, per state.
    async fn live_test_counts(&self) -> Result<Vec<(String, i64)>>;
    /// When the cron post `name` last handled a due time; the first call records `now` (a new
    /// setting has missed nothing) and returns it.
    async fn report_post_since(&self, name: &str, now: Millis) -> Result<Millis>;
    /// Moves the cron post's last handled time from `from` to `to`; false (nothing written)
    /// when another daemon moved it first.
    async fn claim_report_post(&self, name: &str, from: Millis, to: Millis) -> Result<bool>;
}

pub(super) const RUNS_ENDED: &str = concat!(
    select_runs_sql!(),
    "WHERE ended_at IS NOT NULL AND ended_at >= $1 ORDER BY ended_at DESC LIMIT $2"
);
/// Only a pending run is held (a hold goes with the move out of the queue), so the partial index
/// `runs_held` answers alone: the held few, never a walk of every pending run.
pub(super) const HELD_COUNT: &str = "SELECT COUNT(*) AS n FROM runs WHERE held_at IS NOT NULL";
const RUNS_IN_FLIGHT: &str =
    concat!(select_runs_sql!(), "WHERE state IN (", in_flight_states!(), ") ORDER BY seq LIMIT $1");
const TESTS_ENDED: &str = concat!(
    select_tests_sql!(),
    "WHERE ended_at IS NOT NULL AND ended_at >= $1 ORDER BY ended_at DESC LIMIT $2"
);

#[async_trait]
impl ReportStore for SqlStore {
    async fn runs_ended_since(&self, since: Millis, limit: i64) -> Result<Vec<Run>> {
        let rows = sqlx::query(RUNS_ENDED).bind(since).bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn runs_in_flight(&self, limit: i64) -> Result<Vec<Run>> {
        let rows = sqlx::query(RUNS_IN_FLIGHT).bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn ended_run_counts(&self, since: Millis) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT state, COUNT(*) AS n FROM runs WHERE ended_at IS NOT NULL AND ended_at >= $1 \
             GROUP BY state ORDER BY state",
        )
        .bind(since)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(|r| Ok((r.try_get("state")?, r.try_get("n")?))).collect()
    }

    async fn held_count(&self) -> Result<i64> {
        let row = sqlx::query(HELD_COUNT).fetch_one(self.pool()).await?;
        Ok(row.try_get("n")?)
    }

    async fn tests_ended_since(&self, since: Millis, limit: i64) -> Result<Vec<InferenceTest>> {
        let rows = sqlx::query(TESTS_ENDED).bind(since).bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(test_from_row).collect()
    }

    async fn ended_test_counts(&self, since: Millis) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT state, COUNT(*) AS n FROM tests WHERE ended_at IS NOT NULL AND ended_at >= $1 \
             GROUP BY state ORDER BY state",
        )
        .bind(since)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(|r| Ok((r.try_get("state")?, r.try_get("n")?))).collect()
    }

    async fn live_test_counts(&self) -> Result<Vec<(String, i64)>> {
        count_by_state(
            self.pool(),
            "SELECT state, COUNT(*) AS n FROM tests WHERE state IN ('queued', 'running') \
             GROUP BY state ORDER BY state",
        )
        .await
    }

    async fn report_post_since(&self, name: &str, now: Millis) -> Result<Millis> {
        sqlx::query(
            "INSERT INTO report_posts (name, last_fired) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(now)
        .execute(self.pool())
        .await?;
        let row = sqlx::query("SELECT last_fired FROM report_posts WHERE name = $1")
            .bind(name)
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get("last_fired")?)
    }

    async fn claim_report_post(&self, name: &str, from: Millis, to: Millis) -> Result<bool> {
        let moved =
            sqlx::query("UPDATE report_posts SET last_fired = $1 WHERE name = $2 AND last_fired = $3")
                .bind(to)
                .bind(name)
                .bind(from)
                .execute(self.pool())
                .await?;
        Ok(moved.rows_affected() > 0)
    }
}
