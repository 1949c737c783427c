//! The morning report's reads and the cron post's memory. Every read is an index range with a
//! limit (runs and tests by end time, live ones by state), so a report costs what it shows,
//! however long the store's history. What a row shows beside its run (its progress, last
//! checkpoint, weights and metric row, its stages, its first start) is read for every listed run
//! at once: one query per kind and [`CHUNK`] runs, each run's row found by an index seek from the
//! run (a correlated `ORDER BY … LIMIT 1`, which SQLite and PostgreSQL both walk on the index).

use std::collections::HashMap;
use std::sync::LazyLock;

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::Result;
use super::checkpoints::checkpoint_from_row;
use super::inference_tests::test_from_row;
use super::metric_values::{LAST_ROW_READINGS, last_rows};
use super::progress::point_from_row;
use super::rows::{corrupt, run_from_row, stage_from_row};
use super::sql::{SqlStore, count_by_state};
use crate::model::{
    Checkpoint, InferenceTest, MetricRow, Millis, ProgressPoint, Run, RunState, Stage, TestState,
};

/// The most runs one set query names; a longer list is read in chunks of it.
pub(super) const CHUNK: usize = 512;

#[async_trait]
pub trait ReportStore: Send + Sync {
    /// Up to `limit` runs that ended at or after `since`, the latest end first (`runs_by_end`).
    async fn runs_ended_since(&self, since: Millis, limit: i64) -> Result<Vec<Run>>;
    /// Up to `limit` runs in flight (starting, running, stopping, retrying), in queue order.
    async fn runs_in_flight(&self, limit: i64) -> Result<Vec<Run>>;
    /// How many runs ended at or after `since`, per terminal state, by state (counted on
    /// `runs_by_end` alone); a state no run ended in is left out.
    async fn ended_run_counts(&self, since: Millis) -> Result<Vec<(String, i64)>>;
    /// How many pending runs are held.
    async fn held_count(&self) -> Result<i64>;
    /// Up to `limit` tests that ended at or after `since`, the latest end first (`tests_by_end`).
    async fn tests_ended_since(&self, since: Millis, limit: i64) -> Result<Vec<InferenceTest>>;
    /// How many tests ended at or after `since`, per terminal state, as `ended_run_counts`.
    async fn ended_test_counts(&self, since: Millis) -> Result<Vec<(String, i64)>>;
    /// How many tests are queued or running, per state.
    async fn live_test_counts(&self) -> Result<Vec<(String, i64)>>;
    /// When the cron post `name` last handled a due time; the first call records `now` (a new
    /// setting has missed nothing) and returns it.
    async fn report_post_since(&self, name: &str, now: Millis) -> Result<Millis>;
    /// Moves the cron post's last handled time from `from` to `to`; false (nothing written)
    /// when another daemon moved it first.
    async fn claim_report_post(&self, name: &str, from: Millis, to: Millis) -> Result<bool>;

    /// For each of `ids`: what `ProgressStore::progress_ends` reads of its current attempt
    /// (its first change of step, its last with a total, its last). A run with none is absent.
    async fn progress_ends_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, Vec<ProgressPoint>>>;
    /// For each of `ids`: its last checkpoint (`CheckpointStore::last_checkpoint`).
    async fn last_checkpoints_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, Checkpoint>>;
    /// For each of `ids`: the weights of its last checkpoint that had some
    /// (`CheckpointStore::last_weights`).
    async fn last_weights_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, String>>;
    /// For each of `ids`: its last metric row that holds a metric (`MetricStore::last_metric_row`).
    async fn last_metric_rows_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, MetricRow>>;
    /// For each of `ids`: its stages, by index (`Store::stages`).
    async fn stages_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, Vec<Stage>>>;
    /// For each of `ids` that ever started: when its first attempt moved to `starting` (from its
    /// state events; a run's own `started_at` is its current attempt's).
    async fn first_starts_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, Millis>>;
}

pub(super) const RUNS_ENDED: &str = concat!(
    select_runs_sql!(),
    "WHERE ended_at IS NOT NULL AND ended_at >= $1 ORDER BY ended_at DESC LIMIT $2"
);
/// `SELECT COUNT(CASE WHEN state = 'a' THEN 1 END), … FROM <table> WHERE <ended in the window>`:
/// one count per terminal state, read off the end-time index alone (it holds the state). A
/// `GROUP BY state` would let SQLite walk the state index instead, a row per run of the store.
fn ended_counts_sql(table: &str, states: &[&'static str]) -> String {
    let counts: Vec<String> =
        states.iter().map(|state| format!("COUNT(CASE WHEN state = '{state}' THEN 1 END)")).collect();
    format!("SELECT {} FROM {table} WHERE ended_at IS NOT NULL AND ended_at >= $1", counts.join(", "))
}

fn terminal_run_states() -> Vec<&'static str> {
    RunState::ALL.iter().filter(|s| s.is_terminal()).map(|s| s.as_str()).collect()
}

fn terminal_test_states() -> Vec<&'static str> {
    TestState::ALL.iter().filter(|s| s.is_terminal()).map(|s| s.as_str()).collect()
}

pub(super) static ENDED_RUN_COUNTS: LazyLock<String> =
    LazyLock::new(|| ended_counts_sql("runs", &terminal_run_states()));
static ENDED_TEST_COUNTS: LazyLock<String> =
    LazyLock::new(|| ended_counts_sql("tests", &terminal_test_states()));

/// The counts of `ended_counts_sql`'s one row, by state, those of no run left out.
async fn ended_counts(
    store: &SqlStore,
    sql: &str,
    states: &[&'static str],
    since: Millis,
) -> Result<Vec<(String, i64)>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(since).fetch_one(store.pool()).await?;
    let mut counts = Vec::new();
    for (i, state) in states.iter().enumerate() {
        let n: i64 = row.try_get(i)?;
        if n > 0 {
            counts.push((state.to_string(), n));
        }
    }
    counts.sort();
    Ok(counts)
}
/// Only a pending run is held (a hold goes with the move out of the queue), so the partial index
/// `runs_held` answers alone: the held few, never a walk of every pending run.
pub(super) const HELD_COUNT: &str = "SELECT COUNT(*) AS n FROM runs WHERE held_at IS NOT NULL";
const RUNS_IN_FLIGHT: &str =
    concat!(select_runs_sql!(), "WHERE state IN (", in_flight_states!(), ") ORDER BY seq LIMIT $1");
const TESTS_ENDED: &str = concat!(
    select_tests_sql!(),
    "WHERE ended_at IS NOT NULL AND ended_at >= $1 ORDER BY ended_at DESC LIMIT $2"
);

/// `$1, $2, …, $n`.
fn marks(n: usize) -> String {
    (1..=n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

/// The listed-runs query `sql` (its `{ids}` the run ids' placeholders) over `ids`, a chunk at
/// a time. A chunk is padded to a power of two with its first id again, so a query has a
/// handful of shapes and its prepared statements are reused.
async fn for_listed(store: &SqlStore, sql: &str, ids: &[Uuid]) -> Result<Vec<sqlx::any::AnyRow>> {
    let mut rows = Vec::new();
    for chunk in ids.chunks(CHUNK) {
        let n = chunk.len().next_power_of_two();
        let text = sql.replace("{ids}", &marks(n));
        let mut query = sqlx::query(sqlx::AssertSqlSafe(text));
        for i in 0..n {
            query = query.bind(chunk.get(i).unwrap_or(&chunk[0]).to_string());
        }
        rows.extend(query.fetch_all(store.pool()).await?);
    }
    Ok(rows)
}

fn run_id_of(row: &sqlx::any::AnyRow) -> Result<Uuid> {
    let id: String = row.try_get("run_id")?;
    Uuid::parse_str(&id).map_err(corrupt)
}

/// One end of a run's current attempt, as `progress_ends` orders them: `end` is 0 for the
/// first change, 1 for the last with a total, 2 for the last.
const PROGRESS_END: &str = "SELECT r.id AS run_id, CAST({end} AS BIGINT) AS end_no, p.attempt, p.step, p.total, p.at \
     FROM runs r JOIN progress p ON p.run_id = r.id AND p.attempt = r.attempt AND p.at = \
     (SELECT q.at FROM progress q WHERE q.run_id = r.id AND q.attempt = r.attempt {filter} ORDER BY q.at {order} LIMIT 1) \
     WHERE r.id IN ({ids})";

/// The checkpoint whose key is the run's last (`ORDER BY at DESC, attempt DESC, step DESC`).
const LAST_CHECKPOINTS: &str = "SELECT r.id AS run_id, c.attempt, c.step, c.path, c.weights, c.at \
     FROM runs r JOIN checkpoints c ON c.run_id = r.id AND c.source_key = \
     (SELECT d.source_key FROM checkpoints d WHERE d.run_id = r.id \
      ORDER BY d.at DESC, d.attempt DESC, d.step DESC LIMIT 1) \
     WHERE r.id IN ({ids})";

const LAST_WEIGHTS: &str = "SELECT r.id AS run_id, \
     (SELECT d.weights FROM checkpoints d WHERE d.run_id = r.id AND d.weights IS NOT NULL \
      ORDER BY d.at DESC, d.attempt DESC, d.step DESC LIMIT 1) AS weights \
     FROM runs r WHERE r.id IN ({ids})";

const STAGES_OF: &str = "SELECT run_id, idx, name, state, shim, process, started_at, ready_at, ended_at, \
     exit_code, exit_signal, log_path, slurm_job FROM stages WHERE run_id IN ({ids}) ORDER BY run_id, idx";

/// A run's state events come in order of their key: its first move to `starting` is a few rows
/// into its events (`events_by_run`).
const FIRST_STARTS: &str = "SELECT r.id AS run_id, \
     (SELECT e.at FROM events e WHERE e.run_id = r.id AND e.kind = 'state' AND e.to_state = 'starting' \
      ORDER BY e.id LIMIT 1) AS at \
     FROM runs r WHERE r.id IN ({ids})";

/// Every listed-runs query, for the tests that hold them to their indexes.
#[cfg(test)]
pub(super) fn listed_queries() -> Vec<String> {
    [
        progress_ends_sql().as_str(),
        LAST_CHECKPOINTS,
        LAST_WEIGHTS,
        LAST_ROW_READINGS.as_str(),
        STAGES_OF,
        FIRST_STARTS,
    ]
    .map(|sql| sql.replace("{ids}", &marks(3)))
    .to_vec()
}

/// The three ends of `PROGRESS_END`, as one query.
fn progress_ends_sql() -> String {
    [("0", "", "ASC"), ("1", "AND q.total IS NOT NULL", "DESC"), ("2", "", "DESC")]
        .map(|(end, filter, order)| {
            PROGRESS_END.replace("{end}", end).replace("{filter}", filter).replace("{order}", order)
        })
        .join(" UNION ALL ")
}

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
        ended_counts(self, &ENDED_RUN_COUNTS, &terminal_run_states(), since).await
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
        ended_counts(self, &ENDED_TEST_COUNTS, &terminal_test_states(), since).await
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

    async fn progress_ends_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, Vec<ProgressPoint>>> {
        let mut ends: HashMap<Uuid, [Option<ProgressPoint>; 3]> = HashMap::new();
        for row in for_listed(self, &progress_ends_sql(), ids).await? {
            let end: i64 = row.try_get("end_no")?;
            let slot = &mut ends.entry(run_id_of(&row)?).or_default()[end.clamp(0, 2) as usize];
            // Two changes recorded in the same millisecond: either is the attempt's end.
            if slot.is_none() {
                *slot = Some(point_from_row(&row)?);
            }
        }
        Ok(ends.into_iter().map(|(id, points)| (id, points.into_iter().flatten().collect())).collect())
    }

    async fn last_checkpoints_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, Checkpoint>> {
        let rows = for_listed(self, LAST_CHECKPOINTS, ids).await?;
        rows.iter().map(|row| Ok((run_id_of(row)?, checkpoint_from_row(row)?))).collect()
    }

    async fn last_weights_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, String>> {
        let mut found = HashMap::new();
        for row in for_listed(self, LAST_WEIGHTS, ids).await? {
            if let Some(weights) = row.try_get::<Option<String>, _>("weights")? {
                found.insert(run_id_of(&row)?, weights);
            }
        }
        Ok(found)
    }

    async fn last_metric_rows_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, MetricRow>> {
        last_rows(&for_listed(self, &LAST_ROW_READINGS, ids).await?)
    }

    async fn stages_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, Vec<Stage>>> {
        let mut stages: HashMap<Uuid, Vec<Stage>> = HashMap::new();
        for row in for_listed(self, STAGES_OF, ids).await? {
            let stage = stage_from_row(&row)?;
            stages.entry(stage.run_id).or_default().push(stage);
        }
        Ok(stages)
    }

    async fn first_starts_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, Millis>> {
        let mut found = HashMap::new();
        for row in for_listed(self, FIRST_STARTS, ids).await? {
            if let Some(at) = row.try_get::<Option<i64>, _>("at")? {
                found.insert(run_id_of(&row)?, at);
            }
        }
        Ok(found)
    }
}
