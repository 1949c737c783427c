//! The morning report's reads and the cron post's memory. Every read is an index range with a
//! limit (runs and tests by end time, live ones by state), so a report costs what it shows,
//! however long the store's history. A listed run comes with what its row shows beside it (its
//! progress and last checkpoint) in the same query, one row per run: each of
//! them a correlated `ORDER BY … LIMIT 1` that SQLite and PostgreSQL both answer with one index
//! seek from the run, for the listed runs alone. What only some rows need (stages, a retried
//! run's first start, weights older than the last checkpoint) is read for those runs at once:
//! one query per kind and [`CHUNK`] runs.

use std::collections::HashMap;
use std::sync::LazyLock;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use super::inference_tests::test_from_row;
use super::rows::{corrupt, from_json, stage_from_row};
use super::sql::{SqlStore, count_by_state};
use super::{Backend, Result, Store};
use crate::model::{
    Checkpoint, CountedState, InferenceTest, Millis, ProgressPoint, RunParams, RunState, Stage, StateCounts,
    TestState,
};
use crate::workflow::Workflow;

/// The most runs one set query names; a longer list is read in chunks of it.
pub(super) const CHUNK: usize = 512;

/// A run as the report lists it: what its row shows of the run, and what is read beside it.
#[derive(Clone, Debug)]
pub struct ListedRun {
    pub id: Uuid,
    pub workflow: String,
    pub env_name: Option<String>,
    pub state: RunState,
    pub attempt: i64,
    pub reason: Option<String>,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub params: RunParams,
    /// Whether its workflow says where its step is (`progress:`); read for a run in flight only
    /// (an ended run's row shows its last step without a rate), false for the others.
    pub reports_progress: bool,
    pub preemptions: i64,
    pub preempted_work: i64,
    /// Its current attempt's progress: for a run in flight, what `ProgressStore::progress_ends`
    /// reads (its first change of step, its last with a total, its last); for one that ended,
    /// its last alone. Empty when it recorded none.
    pub progress: Vec<ProgressPoint>,
    /// Its last checkpoint (`CheckpointStore::last_checkpoint`).
    pub checkpoint: Option<Checkpoint>,
    /// The metrics its workflow names as its headline (`report:`), from its snapshot.
    pub report: Vec<String>,
}

#[async_trait]
pub trait ReportStore: Send + Sync {
    /// Up to `limit` runs that ended at or after `since`, the latest end first (`runs_by_end`),
    /// each with what is read beside it.
    async fn runs_ended_since(&self, since: Millis, limit: i64) -> Result<Vec<ListedRun>>;
    /// Up to `limit` runs in flight (starting, running, stopping, retrying), in queue order,
    /// each with what is read beside it.
    async fn runs_in_flight(&self, limit: i64) -> Result<Vec<ListedRun>>;
    /// How many runs ended at or after `since`, per terminal state, by state (counted on
    /// `runs_by_end` alone); a state no run ended in is left out.
    async fn ended_run_counts(&self, since: Millis) -> Result<StateCounts<RunState>>;
    /// How many pending runs are held.
    async fn held_count(&self) -> Result<i64>;
    /// Up to `limit` tests that ended at or after `since`, the latest end first (`tests_by_end`).
    async fn tests_ended_since(&self, since: Millis, limit: i64) -> Result<Vec<InferenceTest>>;
    /// How many tests ended at or after `since`, per terminal state, as `ended_run_counts`.
    async fn ended_test_counts(&self, since: Millis) -> Result<StateCounts<TestState>>;
    /// How many tests are queued or running, per state.
    async fn live_test_counts(&self) -> Result<StateCounts<TestState>>;
    /// When the cron post `name` last handled a due time; the first call records `now` (a new
    /// setting has missed nothing) and returns it.
    async fn report_post_since(&self, name: &str, now: Millis) -> Result<Millis>;
    /// Moves the cron post's last handled time from `from` to `to`; false (nothing written)
    /// when another daemon moved it first.
    async fn claim_report_post(&self, name: &str, from: Millis, to: Millis) -> Result<bool>;

    /// For each of `ids`: the weights of its last checkpoint that had some
    /// (`CheckpointStore::last_weights`).
    async fn last_weights_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, String>>;
    /// For each of `ids`: its stages, by index (`Store::stages`).
    async fn stages_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, Vec<Stage>>>;
    /// For each of `ids` that ever started: when its first attempt moved to `starting` (from its
    /// state events; a run's own `started_at` is its current attempt's).
    async fn first_starts_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, Millis>>;
}

/// Which listed runs a query reads.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Listing {
    /// Those that ended at or after `$1`, the latest end first, at most `$2`.
    Ended,
    /// Those in flight, in queue order, at most `$1`.
    InFlight,
}

/// The listed runs of `listing` with what is read beside each, on `backend`. The runs are an
/// index range with a limit, in the index's order, so each correlated read runs for a listed
/// row alone (never for the window's every run).
fn listed_runs_sql(backend: Backend, listing: Listing) -> String {
    let point = packed(backend, &["q.step", "q.total", "q.at"]);
    let progress = |end: &str, filter: &str, order: &str| {
        format!(
            "(SELECT {point} FROM progress q WHERE q.run_id = r.id AND q.attempt = r.attempt{filter} \
             ORDER BY q.at {order} LIMIT 1) AS progress_{end}"
        )
    };
    let mut columns: Vec<String> = [
        "r.id",
        "r.workflow",
        "r.env_name",
        "r.state",
        "r.attempt",
        "r.reason",
        "r.started_at",
        "r.ended_at",
        "r.params",
        "r.preemptions",
        "r.preempted_work_ms",
    ]
    .map(str::to_string)
    .to_vec();
    // Its headline metrics' names, and whether the workflow reports a step at all.
    columns.push("r.spec".into());
    if listing == Listing::InFlight {
        // The ends a rate needs.
        columns.push(progress("first", "", "ASC"));
        columns.push(progress("total", " AND q.total IS NOT NULL", "DESC"));
    }
    columns.push(progress("last", "", "DESC"));
    columns.push(format!(
        "(SELECT {} FROM checkpoints d WHERE d.run_id = r.id \
         ORDER BY d.at DESC, d.attempt DESC, d.step DESC LIMIT 1) AS checkpoint",
        packed(backend, &["d.attempt", "d.step", "d.path", "d.weights", "d.at"])
    ));
    let filter = match listing {
        Listing::Ended => {
            "WHERE r.ended_at IS NOT NULL AND r.ended_at >= $1 ORDER BY r.ended_at DESC LIMIT $2"
        }
        Listing::InFlight => concat!("WHERE r.state IN (", in_flight_states!(), ") ORDER BY r.seq LIMIT $1"),
    };
    format!("SELECT {} FROM runs r {filter}", columns.join(", "))
}

/// A row a correlated read found, as one value (a scalar subquery gives one column): its
/// columns as a JSON array, so a row costs one index seek, not one per column.
fn packed(backend: Backend, columns: &[&str]) -> String {
    let columns = columns.join(", ");
    match backend {
        Backend::Sqlite => format!("json_array({columns})"),
        Backend::Postgres => format!("CAST(json_build_array({columns}) AS TEXT)"),
    }
}

/// The queries of `listed_runs_sql`, built once: by backend, then listing.
static LISTED_RUNS: LazyLock<[[String; 2]; 2]> = LazyLock::new(|| {
    [Backend::Sqlite, Backend::Postgres]
        .map(|backend| [Listing::Ended, Listing::InFlight].map(|listing| listed_runs_sql(backend, listing)))
});

pub(super) fn listed_runs_query(backend: Backend, listing: Listing) -> &'static str {
    let by_backend = &LISTED_RUNS[usize::from(backend == Backend::Postgres)];
    &by_backend[usize::from(listing == Listing::InFlight)]
}

/// The packed row (`packed`) in `column`, as `T` (a tuple of its columns); none when the read
/// found no row.
fn unpacked<T: serde::de::DeserializeOwned>(row: &AnyRow, column: &str) -> Result<Option<T>> {
    row.try_get::<Option<String>, _>(column)?.map(|text| from_json(&text, column)).transpose()
}

fn listed_run_from_row(row: &AnyRow, listing: Listing) -> Result<ListedRun> {
    let id: String = row.try_get("id")?;
    let state: String = row.try_get("state")?;
    let params: String = row.try_get("params")?;
    let attempt: i64 = row.try_get("attempt")?;
    let point = |column: &str| -> Result<Option<ProgressPoint>> {
        let found: Option<(i64, Option<i64>, Millis)> = unpacked(row, column)?;
        Ok(found.map(|(step, total, at)| ProgressPoint { attempt, step, total, at }))
    };
    let mut progress = Vec::with_capacity(3);
    let spec: String = row.try_get("spec")?;
    let spec = from_json::<Workflow>(&spec, "workflow snapshot")?;
    // An ended run's row shows its last step without a rate.
    let reports_progress = listing == Listing::InFlight && spec.progress.is_some();
    if listing == Listing::InFlight {
        progress.extend(point("progress_first")?);
        progress.extend(point("progress_total")?);
    }
    progress.extend(point("progress_last")?);
    let checkpoint =
        unpacked(row, "checkpoint")?.map(
            |(attempt, step, path, weights, at): (i64, i64, Option<String>, Option<String>, Millis)| {
                Checkpoint { attempt, step, path, weights, at }
            },
        );
    Ok(ListedRun {
        id: Uuid::parse_str(&id).map_err(|e| corrupt(format!("run id {id}: {e}")))?,
        workflow: row.try_get("workflow")?,
        env_name: row.try_get("env_name")?,
        state: state.parse().map_err(corrupt)?,
        attempt,
        reason: row.try_get("reason")?,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        params: from_json(&params, "run params")?,
        reports_progress,
        preemptions: row.try_get("preemptions")?,
        preempted_work: row.try_get("preempted_work_ms")?,
        progress,
        checkpoint,
        report: spec.report,
    })
}

/// `SELECT COUNT(CASE WHEN state = 'a' THEN 1 END), … FROM <table> WHERE <ended in the window>`:
/// one count per terminal state, read off the end-time index alone (it holds the state). A
/// `GROUP BY state` would let SQLite walk the state index instead, a row per run of the store.
fn ended_counts_sql<S: CountedState>(table: &str, states: &[S]) -> String {
    let counts: Vec<String> = states
        .iter()
        .map(|state| format!("COUNT(CASE WHEN state = '{}' THEN 1 END)", state.name()))
        .collect();
    format!("SELECT {} FROM {table} WHERE ended_at IS NOT NULL AND ended_at >= $1", counts.join(", "))
}

fn terminal_run_states() -> Vec<RunState> {
    RunState::ALL.into_iter().filter(|s| s.is_terminal()).collect()
}

fn terminal_test_states() -> Vec<TestState> {
    TestState::ALL.into_iter().filter(|s| s.is_terminal()).collect()
}

pub(super) static ENDED_RUN_COUNTS: LazyLock<String> =
    LazyLock::new(|| ended_counts_sql("runs", &terminal_run_states()));
static ENDED_TEST_COUNTS: LazyLock<String> =
    LazyLock::new(|| ended_counts_sql("tests", &terminal_test_states()));

/// The counts of `ended_counts_sql`'s one row, by state, those of no run left out.
async fn ended_counts<S: CountedState>(
    store: &SqlStore,
    sql: &str,
    states: &[S],
    since: Millis,
) -> Result<StateCounts<S>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(since).fetch_one(store.pool()).await?;
    let mut counts = StateCounts::default();
    for (i, state) in states.iter().enumerate() {
        counts.add(*state, row.try_get(i)?);
    }
    Ok(counts)
}
/// Only a pending run is held (a hold goes with the move out of the queue), so the partial index
/// `runs_held` answers alone: the held few, never a walk of every pending run.
pub(super) const HELD_COUNT: &str = "SELECT COUNT(*) AS n FROM runs WHERE held_at IS NOT NULL";
/// The same on PostgreSQL: without statistics (a store filled faster than autovacuum analyses
/// it, or a server without autovacuum) it guesses `IS NOT NULL` true of nearly every run and
/// reads the whole table; the state (true of every held run) makes it guess few, and take the
/// partial index. SQLite would walk the state's index for it, every pending run.
const HELD_COUNT_POSTGRES: &str =
    "SELECT COUNT(*) AS n FROM runs WHERE held_at IS NOT NULL AND state = 'pending'";
const TESTS_ENDED: &str = concat!(
    select_tests_sql!(),
    "WHERE ended_at IS NOT NULL AND ended_at >= $1 ORDER BY ended_at DESC LIMIT $2"
);

/// `$1, $2, …, $n`.
fn marks(n: usize) -> String {
    (1..=n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

/// The query `sql` over the listed runs `ids` (its `{ids}` their placeholders), a chunk at a
/// time. A chunk is padded to a power of two with its first id again, so a query has a
/// handful of shapes and its prepared statements are reused.
async fn for_listed(store: &SqlStore, sql: &str, ids: &[Uuid]) -> Result<Vec<AnyRow>> {
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

fn run_id_of(row: &AnyRow) -> Result<Uuid> {
    let id: String = row.try_get("run_id")?;
    Uuid::parse_str(&id).map_err(corrupt)
}

const LAST_WEIGHTS: &str = "SELECT r.id AS run_id, \
     (SELECT d.weights FROM checkpoints d WHERE d.run_id = r.id AND d.weights IS NOT NULL \
      ORDER BY d.at DESC, d.attempt DESC, d.step DESC LIMIT 1) AS weights \
     FROM runs r WHERE r.id IN ({ids})";

const STAGES_OF: &str = "SELECT run_id, idx, name, state, shim, process, started_at, ready_at, ended_at, \
     exit_code, exit_signal, log_path, slurm_job FROM stages WHERE run_id IN ({ids}) ORDER BY run_id, idx";
/// The same on PostgreSQL, from each run (its id unique, so a few rows whatever the statistics)
/// to its stages on their key: without statistics the list's guess is a third of the table,
/// and it reads all of it. `OFFSET 0` keeps the per-run read from being made a join.
const STAGES_OF_POSTGRES: &str = "SELECT s.run_id, s.idx, s.name, s.state, s.shim, s.process, s.started_at, \
     s.ready_at, s.ended_at, s.exit_code, s.exit_signal, s.log_path, s.slurm_job FROM runs r \
     JOIN LATERAL (SELECT * FROM stages t WHERE t.run_id = r.id OFFSET 0) s ON TRUE \
     WHERE r.id IN ({ids}) ORDER BY s.run_id, s.idx";

/// A run's state events come in order of their key: its first move to `starting` is a few rows
/// into its events (`events_by_run`).
const FIRST_STARTS: &str = "SELECT r.id AS run_id, \
     (SELECT e.at FROM events e WHERE e.run_id = r.id AND e.kind = 'state' AND e.to_state = 'starting' \
      ORDER BY e.id LIMIT 1) AS at \
     FROM runs r WHERE r.id IN ({ids})";

/// Every query over listed run ids, for the tests that hold them to their indexes.
#[cfg(test)]
pub(super) fn listed_queries() -> Vec<String> {
    [LAST_WEIGHTS, STAGES_OF, FIRST_STARTS].map(|sql| sql.replace("{ids}", &marks(3))).to_vec()
}

#[async_trait]
impl ReportStore for SqlStore {
    async fn runs_ended_since(&self, since: Millis, limit: i64) -> Result<Vec<ListedRun>> {
        let sql = listed_runs_query(self.backend(), Listing::Ended);
        let rows =
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(since).bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(|row| listed_run_from_row(row, Listing::Ended)).collect()
    }

    async fn runs_in_flight(&self, limit: i64) -> Result<Vec<ListedRun>> {
        let sql = listed_runs_query(self.backend(), Listing::InFlight);
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(|row| listed_run_from_row(row, Listing::InFlight)).collect()
    }

    async fn ended_run_counts(&self, since: Millis) -> Result<StateCounts<RunState>> {
        ended_counts(self, &ENDED_RUN_COUNTS, &terminal_run_states(), since).await
    }

    async fn held_count(&self) -> Result<i64> {
        let sql = match self.backend() {
            Backend::Sqlite => HELD_COUNT,
            Backend::Postgres => HELD_COUNT_POSTGRES,
        };
        let row = sqlx::query(sql).fetch_one(self.pool()).await?;
        Ok(row.try_get("n")?)
    }

    async fn tests_ended_since(&self, since: Millis, limit: i64) -> Result<Vec<InferenceTest>> {
        let rows = sqlx::query(TESTS_ENDED).bind(since).bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(test_from_row).collect()
    }

    async fn ended_test_counts(&self, since: Millis) -> Result<StateCounts<TestState>> {
        ended_counts(self, &ENDED_TEST_COUNTS, &terminal_test_states(), since).await
    }

    async fn live_test_counts(&self) -> Result<StateCounts<TestState>> {
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

    async fn last_weights_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, String>> {
        let mut found = HashMap::new();
        for row in for_listed(self, LAST_WEIGHTS, ids).await? {
            if let Some(weights) = row.try_get::<Option<String>, _>("weights")? {
                found.insert(run_id_of(&row)?, weights);
            }
        }
        Ok(found)
    }

    async fn stages_of(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, Vec<Stage>>> {
        let mut stages: HashMap<Uuid, Vec<Stage>> = HashMap::new();
        let sql = match self.backend() {
            Backend::Sqlite => STAGES_OF,
            Backend::Postgres => STAGES_OF_POSTGRES,
        };
        for row in for_listed(self, sql, ids).await? {
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
