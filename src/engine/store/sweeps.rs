//! Sweeps in the store: the sweep's row, its members (run `run_id` is member `k`), and the two
//! reads the daemon makes of them: how many members of each sweep with a `max_live` are in
//! flight (the claim), and which sweeps have members in flight (the early-termination decider).
//! A sweep's stop or end settles the runs waiting for it in the same transaction.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::dependencies::{NewDependency, insert_dependencies, settle_sweep_dependents};
use super::outbox::insert_notification;
use super::rows::{corrupt, from_json};
use super::sql::{IdRange, SqlStore, insert_pending_run};
use super::sweep_members::{MEMBER_COLUMNS, insert_sweep_rows, member_from_row};
use super::sweep_resumes::{insert_sweep_event, mark_stopped_members};
use super::{Backend, Result, Store};
use crate::model::metric_point::{MAX_SERIES_POINTS, series};
use crate::model::sweep::{Goal, SeriesSummary, SweepRecord, SweepState, SweepWinner};
use crate::model::{MetricPoint, Millis, Run, Stage, now_millis};
use crate::webhooks::Payload;

/// `SELECT <every sweep column> FROM sweeps <rest>`, as a `'static` string.
macro_rules! select_sweeps {
    ($rest:literal) => {
        concat!(
            "SELECT id, file, config, workflow, members, max_live, state, reason, winner_k, winner_run, winner_value, ",
            "created_at, updated_at, member_setup FROM sweeps ",
            $rest
        )
    };
}

/// A sweep with a `max_live` whose members may be claimed, and how many of them are in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepSlots {
    pub max_live: u32,
    pub in_flight: u32,
}

impl SweepSlots {
    /// Whether one more member may start.
    pub fn has_room(&self) -> bool {
        self.in_flight < self.max_live
    }
}

#[async_trait]
pub trait SweepStore: Send + Sync {
    /// Writes the sweep and its member runs (pending, each with its stages and `submitted`
    /// event, member k being `members[k]`) in one transaction: all of it or nothing.
    async fn insert_sweep(&self, sweep: &SweepRecord, members: &[(Run, Vec<Stage>)]) -> Result<()>;
    /// Writes sweeps with their members, then runs with their edges (which may wait for those
    /// sweeps), in one transaction: a pipeline with sweep steps, all of it or nothing. The runs
    /// as written (with their count of open edges).
    async fn insert_sweeps_and_runs(
        &self,
        sweeps: &[(SweepRecord, Vec<(Run, Vec<Stage>)>)],
        runs: &[(Run, Vec<Stage>, Vec<NewDependency>)],
    ) -> Result<Vec<Run>>;
    async fn sweep(&self, id: Uuid) -> Result<Option<SweepRecord>>;
    /// Sweeps whose id starts with `prefix` (hex digits and dashes only), at most `limit`.
    async fn sweeps_by_prefix(&self, prefix: &str, limit: i64) -> Result<Vec<SweepRecord>>;
    /// Sweeps newest first, at most `limit`.
    async fn list_sweeps(&self, limit: i64) -> Result<Vec<SweepRecord>>;
    /// For each sweep whose members may not all start: a live one with a `max_live`, and one
    /// stopped or at its target (no room), its slots: two index reads (those sweeps; the runs in
    /// flight and their sweeps), flat however many members or ended sweeps the store holds.
    async fn sweep_slots(&self) -> Result<BTreeMap<Uuid, SweepSlots>>;
    /// The sweeps with a member in flight (from the runs in flight), each with how many.
    async fn sweeps_in_flight(&self) -> Result<BTreeMap<Uuid, u32>>;
    /// The sweeps in `state`, oldest first.
    async fn sweeps_in_state(&self, state: SweepState) -> Result<Vec<SweepRecord>>;
    /// Every member's series of metric `name` (members without a reading are absent), in one
    /// read: the members' range joined to the readings' key. Each series is as `run_metric_series`
    /// gives it (its first [`MAX_SERIES_POINTS`] readings, a resumed attempt's over the steps
    /// it rewound).
    async fn member_series(&self, sweep: Uuid, name: &str) -> Result<HashMap<Uuid, Vec<MetricPoint>>>;
    /// Every member's series of metric `name` at a glance by `goal` (members without a
    /// reading are absent), without reading the series: one read of each (member, attempt)'s
    /// count, last step and best value off the readings' key, with a seek for the best one's
    /// step and the last value; only a member with several attempts (a resume may have
    /// rewound over an earlier one's readings) has its series read, as `member_series` reads it.
    async fn member_summaries(
        &self,
        sweep: Uuid,
        name: &str,
        goal: Goal,
    ) -> Result<HashMap<Uuid, SeriesSummary>>;
    /// The sweeps that `runs` are members of.
    async fn sweeps_of_runs(&self, runs: &[Uuid]) -> Result<BTreeSet<Uuid>>;
    /// Whether a member of the sweep has not ended yet (the first one found ends the read).
    async fn sweep_has_open_member(&self, id: Uuid) -> Result<bool>;
    /// The sweeps a report over the window from `since` shows: those not done yet and those
    /// whose state moved in the window (a sweep moves to done once its last member ended),
    /// newest first, at most `limit`; and how many there are.
    async fn sweeps_for_report(&self, since: Millis, limit: i64) -> Result<(Vec<SweepRecord>, i64)>;
    /// Every member of `sweeps` (each given with its metric's name, if it has one) with its
    /// run's state and times and its readings of that metric as its series holds them (a
    /// resumed attempt's over the steps it rewound, as `metric_point::series` keeps them):
    /// counted, lowest and highest, in SQL. One query for up to [`TALLY_CHUNK`] sweeps.
    async fn member_tallies(
        &self,
        sweeps: &[(Uuid, Option<String>)],
    ) -> Result<Vec<crate::model::sweep::Member>>;
    /// How many members of each of `sweeps` are in each run state: one grouped query for up to
    /// [`TALLY_CHUNK`] sweeps.
    async fn member_states_of(&self, sweeps: &[Uuid]) -> Result<HashMap<Uuid, BTreeMap<String, u64>>>;
    /// Moves the sweep from `from` to `to` with `reason`, if it is still in `from`; false when it
    /// was not (someone else moved it). A move to `stopped` (or to `done`, here without a
    /// winner) settles the runs waiting for the sweep in the same transaction.
    async fn move_sweep(
        &self,
        id: Uuid,
        from: SweepState,
        to: SweepState,
        reason: Option<&str>,
    ) -> Result<bool>;
    /// Ends the sweep (`done`) from `from`, recording its winner (without one, `reason` says
    /// why), and settles the runs waiting for it in the same transaction: met by a winner,
    /// failed without one. None when the sweep was not in `from`; else how many edges it
    /// settled (their cascade's included).
    async fn end_sweep(
        &self,
        id: Uuid,
        from: SweepState,
        winner: Option<&SweepWinner>,
        reason: Option<&str>,
    ) -> Result<Option<u64>>;
}

fn sweep_from_row(row: &sqlx::any::AnyRow) -> Result<SweepRecord> {
    let id: String = row.try_get("id")?;
    let state: String = row.try_get("state")?;
    let config: String = row.try_get("config")?;
    let members: i64 = row.try_get("members")?;
    let max_live: Option<i64> = row.try_get("max_live")?;
    let winner_k: Option<i64> = row.try_get("winner_k")?;
    let winner_run: Option<String> = row.try_get("winner_run")?;
    let winner_value: Option<f64> = row.try_get("winner_value")?;
    let winner = match (winner_k, winner_run, winner_value) {
        (Some(k), Some(run), Some(value)) => Some(SweepWinner {
            k: u64::try_from(k).map_err(|_| corrupt(format!("sweep {id}: winner {k}")))?,
            run: Uuid::parse_str(&run).map_err(|e| corrupt(format!("sweep {id}: winner {run}: {e}")))?,
            value,
        }),
        (None, None, None) => None,
        _ => return Err(corrupt(format!("sweep {id}: a winner recorded in part"))),
    };
    Ok(SweepRecord {
        id: Uuid::parse_str(&id).map_err(|e| corrupt(format!("sweep id {id}: {e}")))?,
        file: row.try_get("file")?,
        config: from_json(&config, "sweep config")?,
        workflow: row.try_get("workflow")?,
        members: u64::try_from(members).map_err(|_| corrupt(format!("sweep {id}: {members} members")))?,
        max_live: max_live
            .map(u32::try_from)
            .transpose()
            .map_err(|_| corrupt(format!("sweep {id}: max_live {max_live:?}")))?,
        state: state.parse().map_err(corrupt)?,
        reason: row.try_get("reason")?,
        winner,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        member_setup: row
            .try_get::<Option<String>, _>("member_setup")?
            .map(|text| from_json(&text, "sweep member setup"))
            .transpose()?,
    })
}

pub(super) fn uuid_of(row: &sqlx::any::AnyRow, column: &str) -> Result<Uuid> {
    let text: String = row.try_get(column)?;
    Uuid::parse_str(&text).map_err(|e| corrupt(format!("{column} {text}: {e}")))
}

/// A member number (`k`, a donor's) from `column`: stored as an integer, never negative.
pub(super) fn member_number(row: &sqlx::any::AnyRow, column: &str) -> Result<u64> {
    let value: i64 = row.try_get(column)?;
    u64::try_from(value).map_err(|_| corrupt(format!("sweep member {column} {value}")))
}

/// The most sweeps one tally query names; more are read in chunks of it.
pub const TALLY_CHUNK: usize = 100;

/// The members of the sweeps `$1, $3, …` with their readings of metric `$2, $4, …` (the one
/// named beside each sweep): a reading counts when no later attempt of its run read a step at
/// or below it (the series rule: a resumed attempt replaces what it rewound over). Each
/// member's readings are its run's key range, and the rule one seek into it per reading.
pub(super) fn tallies_sql(sweeps: usize) -> String {
    let names: Vec<String> =
        (0..sweeps).map(|i| format!("WHEN ${} THEN CAST(${} AS TEXT)", 2 * i + 1, 2 * i + 2)).collect();
    let ids: Vec<String> = (0..sweeps).map(|i| format!("${}", 2 * i + 1)).collect();
    format!(
        "SELECT {MEMBER_COLUMNS}, COUNT(v.value) AS readings, MIN(v.value) AS low, MAX(v.value) AS high \
         FROM sweep_members m JOIN runs r ON r.id = m.run_id \
         LEFT JOIN metric_values v ON v.run_id = m.run_id AND v.name = (CASE m.sweep_id {} END) \
         AND NOT EXISTS (SELECT 1 FROM metric_values w WHERE w.run_id = v.run_id AND w.name = v.name \
         AND w.attempt > v.attempt AND w.step <= v.step) \
         WHERE m.sweep_id IN ({}) \
         GROUP BY m.sweep_id, m.k, r.id, r.version, r.state, r.attempt, r.reason, m.early_terminated, m.stopped_by_sweep, m.suggestion, r.started_at, r.ended_at, m.rerun_version",
        names.join(" "),
        ids.join(", ")
    )
}

/// Each member's readings of a metric at a glance: `{order}` is ASC (minimize) or DESC.
/// Scalar reads per member off the readings' key (its count and attempts; the step of its best
/// reading, the first to reach it, in one pass; its last step), then a seek for each of the two
/// values: SQLite answers them in a third of the time of a join grouped by member.
const MEMBER_GLANCES: &str = "WITH a AS MATERIALIZED (SELECT m.run_id, \
       (SELECT COUNT(*) FROM metric_values v WHERE v.run_id = m.run_id AND v.name = $2) AS n, \
       (SELECT MIN(v.attempt) FROM metric_values v WHERE v.run_id = m.run_id AND v.name = $2) AS first_attempt, \
       (SELECT MAX(v.attempt) FROM metric_values v WHERE v.run_id = m.run_id AND v.name = $2) AS last_attempt, \
       (SELECT v.step FROM metric_values v WHERE v.run_id = m.run_id AND v.name = $2 \
        ORDER BY v.value {order}, v.attempt, v.step LIMIT 1) AS best_step, \
       (SELECT v.step FROM metric_values v WHERE v.run_id = m.run_id AND v.name = $2 \
        ORDER BY v.attempt DESC, v.step DESC LIMIT 1) AS last_step \
     FROM sweep_members m WHERE m.sweep_id = $1) \
     SELECT a.run_id, a.n, a.first_attempt, a.last_attempt, a.best_step, a.last_step, \
       (SELECT x.value FROM metric_values x WHERE x.run_id = a.run_id AND x.name = $2 \
        AND x.attempt = a.last_attempt AND x.step = a.best_step) AS best, \
       (SELECT x.value FROM metric_values x WHERE x.run_id = a.run_id AND x.name = $2 \
        AND x.attempt = a.last_attempt AND x.step = a.last_step) AS last \
     FROM a WHERE a.n > 0";

/// The members in flight of each sweep that has one: from the runs in flight (an index range
/// on their state) to their sweep (the members' index by run).
const IN_FLIGHT_BY_SWEEP: &str = concat!(
    "SELECT m.sweep_id, COUNT(*) AS n FROM runs r JOIN sweep_members m ON m.run_id = r.id WHERE r.state IN (",
    in_flight_states!(),
    ") GROUP BY m.sweep_id"
);

impl SqlStore {
    async fn in_flight_by_sweep(&self) -> Result<BTreeMap<Uuid, u32>> {
        let rows = sqlx::query(IN_FLIGHT_BY_SWEEP).fetch_all(self.pool()).await?;
        rows.iter()
            .map(|row| {
                let n: i64 = row.try_get("n")?;
                Ok((uuid_of(row, "sweep_id")?, u32::try_from(n).unwrap_or(u32::MAX)))
            })
            .collect()
    }
}

#[async_trait]
impl SweepStore for SqlStore {
    async fn insert_sweep(&self, sweep: &SweepRecord, members: &[(Run, Vec<Stage>)]) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        insert_sweep_rows(&mut tx, sweep, members).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn insert_sweeps_and_runs(
        &self,
        sweeps: &[(SweepRecord, Vec<(Run, Vec<Stage>)>)],
        runs: &[(Run, Vec<Stage>, Vec<NewDependency>)],
    ) -> Result<Vec<Run>> {
        let mut tx = self.pool().begin().await?;
        for (sweep, members) in sweeps {
            insert_sweep_rows(&mut tx, sweep, members).await?;
        }
        let mut inserted = Vec::with_capacity(runs.len());
        for (run, stages, deps) in runs {
            insert_pending_run(&mut tx, run, stages).await?;
            let deps_open = insert_dependencies(&mut tx, self.backend(), run.id, deps).await?;
            inserted.push(Run { deps_open, ..run.clone() });
        }
        tx.commit().await?;
        Ok(inserted)
    }

    async fn sweep(&self, id: Uuid) -> Result<Option<SweepRecord>> {
        let row = sqlx::query(select_sweeps!("WHERE id = $1"))
            .bind(id.to_string())
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(sweep_from_row).transpose()
    }

    async fn sweeps_by_prefix(&self, prefix: &str, limit: i64) -> Result<Vec<SweepRecord>> {
        let Some(range) = IdRange::of(prefix) else { return Ok(Vec::new()) };
        let sql = match self.backend() {
            Backend::Sqlite => select_sweeps!("WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3"),
            Backend::Postgres => select_sweeps!("WHERE id ~>=~ $1 AND id ~<~ $2 ORDER BY id LIMIT $3"),
        };
        let rows =
            sqlx::query(sql).bind(range.from).bind(range.below).bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(sweep_from_row).collect()
    }

    async fn list_sweeps(&self, limit: i64) -> Result<Vec<SweepRecord>> {
        let rows = sqlx::query(select_sweeps!("ORDER BY seq DESC LIMIT $1"))
            .bind(limit)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(sweep_from_row).collect()
    }

    async fn sweep_slots(&self) -> Result<BTreeMap<Uuid, SweepSlots>> {
        // A sweep that is stopped or at its target has no room at all: a member a stop has not
        // cancelled yet is never claimed meanwhile.
        let limited = sqlx::query(
            "SELECT id, max_live, state FROM sweeps WHERE state IN ('target', 'stopped') \
             OR (state = 'live' AND max_live IS NOT NULL)",
        )
        .fetch_all(self.pool())
        .await?;
        if limited.is_empty() {
            return Ok(BTreeMap::new());
        }
        let in_flight = self.in_flight_by_sweep().await?;
        limited
            .iter()
            .map(|row| {
                let id = uuid_of(row, "id")?;
                let state: String = row.try_get("state")?;
                let max_live: Option<i64> = row.try_get("max_live")?;
                let max_live = match state.as_str() {
                    "live" => u32::try_from(max_live.unwrap_or(0))
                        .map_err(|_| corrupt(format!("sweep {id}: max_live {max_live:?}")))?,
                    _ => 0,
                };
                Ok((id, SweepSlots { max_live, in_flight: in_flight.get(&id).copied().unwrap_or(0) }))
            })
            .collect()
    }

    async fn sweeps_in_flight(&self) -> Result<BTreeMap<Uuid, u32>> {
        self.in_flight_by_sweep().await
    }

    async fn sweeps_in_state(&self, state: SweepState) -> Result<Vec<SweepRecord>> {
        let rows = sqlx::query(select_sweeps!("WHERE state = $1 ORDER BY seq"))
            .bind(state.as_str())
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(sweep_from_row).collect()
    }

    async fn member_series(&self, sweep: Uuid, name: &str) -> Result<HashMap<Uuid, Vec<MetricPoint>>> {
        let rows = sqlx::query(
            "SELECT v.run_id, v.attempt, v.step, v.value FROM sweep_members m \
             JOIN metric_values v ON v.run_id = m.run_id AND v.name = $2 \
             WHERE m.sweep_id = $1 ORDER BY m.k, v.attempt, v.step",
        )
        .bind(sweep.to_string())
        .bind(name)
        .fetch_all(self.pool())
        .await?;
        let mut readings: HashMap<Uuid, Vec<MetricPoint>> = HashMap::new();
        for row in &rows {
            let points = readings.entry(uuid_of(row, "run_id")?).or_default();
            if points.len() < MAX_SERIES_POINTS {
                let attempt: i64 = row.try_get("attempt")?;
                points.push(MetricPoint {
                    attempt: u32::try_from(attempt).map_err(|_| corrupt(format!("attempt {attempt}")))?,
                    step: row.try_get("step")?,
                    value: row.try_get("value")?,
                });
            }
        }
        Ok(readings.into_iter().map(|(run, points)| (run, series(points))).collect())
    }

    async fn member_summaries(
        &self,
        sweep: Uuid,
        name: &str,
        goal: Goal,
    ) -> Result<HashMap<Uuid, SeriesSummary>> {
        // Only ASC or DESC is put in: nothing from the caller is spliced.
        let sql = MEMBER_GLANCES.replace(
            "{order}",
            match goal {
                Goal::Minimize => "ASC",
                Goal::Maximize => "DESC",
            },
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(sweep.to_string())
            .bind(name)
            .fetch_all(self.pool())
            .await?;
        let mut summaries: HashMap<Uuid, SeriesSummary> = HashMap::with_capacity(rows.len());
        let mut resumed = BTreeSet::new();
        for row in &rows {
            let run = uuid_of(row, "run_id")?;
            let (first, last): (i64, i64) = (row.try_get("first_attempt")?, row.try_get("last_attempt")?);
            if first != last {
                // A resume may have rewound over an earlier attempt's readings: read the series.
                resumed.insert(run);
                continue;
            }
            let attempt = u32::try_from(last).map_err(|_| corrupt(format!("attempt {last}")))?;
            let count: i64 = row.try_get("n")?;
            let point = |step: i64, value: f64| MetricPoint { attempt, step, value };
            summaries.insert(
                run,
                SeriesSummary {
                    count: usize::try_from(count).unwrap_or(usize::MAX).min(MAX_SERIES_POINTS),
                    best: point(row.try_get("best_step")?, row.try_get("best")?),
                    last: point(row.try_get("last_step")?, row.try_get("last")?),
                },
            );
        }
        if resumed.is_empty() {
            return Ok(summaries);
        }
        let resumed: Vec<Uuid> = resumed.into_iter().collect();
        for chunk in resumed.chunks(super::dependencies::OPEN_CHUNK) {
            let marks: Vec<String> = (2..chunk.len() + 2).map(|i| format!("${i}")).collect();
            // Only the placeholders vary: the ids are bound, never spliced.
            let sql = format!(
                "SELECT run_id, attempt, step, value FROM metric_values WHERE name = $1 AND run_id IN ({}) \
                 ORDER BY run_id, attempt, step",
                marks.join(", ")
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(name);
            for id in chunk {
                query = query.bind(id.to_string());
            }
            let mut readings: HashMap<Uuid, Vec<MetricPoint>> = HashMap::new();
            for row in query.fetch_all(self.pool()).await? {
                let points = readings.entry(uuid_of(&row, "run_id")?).or_default();
                if points.len() < MAX_SERIES_POINTS {
                    let attempt: i64 = row.try_get("attempt")?;
                    points.push(MetricPoint {
                        attempt: u32::try_from(attempt).map_err(|_| corrupt(format!("attempt {attempt}")))?,
                        step: row.try_get("step")?,
                        value: row.try_get("value")?,
                    });
                }
            }
            for run in chunk {
                let points = series(readings.remove(run).unwrap_or_default());
                match SeriesSummary::of(&points, goal) {
                    Some(summary) => summaries.insert(*run, summary),
                    None => summaries.remove(run),
                };
            }
        }
        Ok(summaries)
    }

    async fn sweeps_of_runs(&self, runs: &[Uuid]) -> Result<BTreeSet<Uuid>> {
        let mut sweeps = BTreeSet::new();
        for chunk in runs.chunks(super::dependencies::OPEN_CHUNK) {
            let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            // Only the placeholders vary: the ids are bound, never spliced.
            let sql =
                format!("SELECT DISTINCT sweep_id FROM sweep_members WHERE run_id IN ({})", marks.join(", "));
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(id.to_string());
            }
            for row in query.fetch_all(self.pool()).await? {
                sweeps.insert(uuid_of(&row, "sweep_id")?);
            }
        }
        Ok(sweeps)
    }

    async fn sweep_has_open_member(&self, id: Uuid) -> Result<bool> {
        let open = sqlx::query(
            "SELECT 1 AS one FROM sweep_members m JOIN runs r ON r.id = m.run_id WHERE m.sweep_id = $1 \
             AND r.state NOT IN ('completed', 'failed', 'stopped') LIMIT 1",
        )
        .bind(id.to_string())
        .fetch_optional(self.pool())
        .await?;
        Ok(open.is_some())
    }

    async fn sweeps_for_report(&self, since: Millis, limit: i64) -> Result<(Vec<SweepRecord>, i64)> {
        // The sweeps not done are an index range on their state; the done ones are read off the
        // same index and kept by their last move (a store keeps far fewer sweeps than runs).
        const ACTIVE: &str = "state <> 'done' OR updated_at >= $1";
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            select_sweeps!("WHERE {ACTIVE} ORDER BY seq DESC LIMIT $2"),
            ACTIVE = ACTIVE
        )))
        .bind(since)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        let sweeps = rows.iter().map(sweep_from_row).collect::<Result<Vec<_>>>()?;
        let total: i64 = if (sweeps.len() as i64) < limit {
            sweeps.len() as i64
        } else {
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM sweeps WHERE {ACTIVE}")))
                .bind(since)
                .fetch_one(self.pool())
                .await?
        };
        Ok((sweeps, total))
    }

    async fn member_tallies(
        &self,
        sweeps: &[(Uuid, Option<String>)],
    ) -> Result<Vec<crate::model::sweep::Member>> {
        let mut tallies = Vec::new();
        for chunk in sweeps.chunks(TALLY_CHUNK) {
            // Only the placeholders vary: the ids and names are bound, never spliced.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(tallies_sql(chunk.len())));
            for (id, metric) in chunk {
                query = query.bind(id.to_string()).bind(metric.clone());
            }
            for row in query.fetch_all(self.pool()).await? {
                tallies.push(member_from_row(&row, true)?);
            }
        }
        tallies.sort_by_key(|t| (t.sweep, t.k));
        Ok(tallies)
    }

    async fn member_states_of(&self, sweeps: &[Uuid]) -> Result<HashMap<Uuid, BTreeMap<String, u64>>> {
        let mut states: HashMap<Uuid, BTreeMap<String, u64>> = HashMap::new();
        for chunk in sweeps.chunks(TALLY_CHUNK) {
            let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT m.sweep_id, r.state, COUNT(*) AS n FROM sweep_members m JOIN runs r ON r.id = m.run_id \
                 WHERE m.sweep_id IN ({}) GROUP BY m.sweep_id, r.state",
                marks.join(", ")
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(id.to_string());
            }
            for row in query.fetch_all(self.pool()).await? {
                let n: i64 = row.try_get("n")?;
                let state: String = row.try_get("state")?;
                states
                    .entry(uuid_of(&row, "sweep_id")?)
                    .or_default()
                    .insert(state, u64::try_from(n).unwrap_or(0));
            }
        }
        Ok(states)
    }

    async fn move_sweep(
        &self,
        id: Uuid,
        from: SweepState,
        to: SweepState,
        reason: Option<&str>,
    ) -> Result<bool> {
        Ok(self.shift_sweep(id, from, to, reason, None).await?.is_some())
    }

    async fn end_sweep(
        &self,
        id: Uuid,
        from: SweepState,
        winner: Option<&SweepWinner>,
        reason: Option<&str>,
    ) -> Result<Option<u64>> {
        self.shift_sweep(id, from, SweepState::Done, reason, winner).await
    }
}

impl SqlStore {
    /// The one sweep move: a compare-and-set from `from` to `to` (with the winner, for an end),
    /// and, when the move ends what runs wait for, their settlement, in one transaction. None
    /// when the sweep was not in `from`; else how many edges were settled.
    async fn shift_sweep(
        &self,
        id: Uuid,
        from: SweepState,
        to: SweepState,
        reason: Option<&str>,
        winner: Option<&SweepWinner>,
    ) -> Result<Option<u64>> {
        if !from.may_become(to) {
            return Ok(None);
        }
        let mut tx = self.pool().begin().await?;
        let now = now_millis();
        // Two statements, so that no NULL is ever bound for the winner's value: sqlx's Any
        // driver binds a NULL double as a PostgreSQL float4, and a statement prepared so then
        // refuses a float8.
        let moved = match winner {
            Some(winner) => {
                sqlx::query(
                    "UPDATE sweeps SET state = $1, reason = COALESCE($2, reason), updated_at = $3, winner_k = $4, \
                     winner_run = $5, winner_value = $6 WHERE id = $7 AND state = $8 RETURNING reason, workflow",
                )
                .bind(to.as_str())
                .bind(reason)
                .bind(now)
                .bind(winner.k as i64)
                .bind(winner.run.to_string())
                .bind(winner.value)
                .bind(id.to_string())
                .bind(from.as_str())
                .fetch_optional(&mut *tx)
                .await?
            }
            None => {
                sqlx::query(
                    "UPDATE sweeps SET state = $1, reason = COALESCE($2, reason), updated_at = $3 \
                     WHERE id = $4 AND state = $5 RETURNING reason, workflow",
                )
                .bind(to.as_str())
                .bind(reason)
                .bind(now)
                .bind(id.to_string())
                .bind(from.as_str())
                .fetch_optional(&mut *tx)
                .await?
            }
        };
        let Some(moved) = moved else { return Ok(None) };
        let why: Option<String> = moved.try_get("reason")?;
        if to == SweepState::Stopped {
            // What its stop ends is what a resume re-runs: marked with the move.
            mark_stopped_members(&mut tx, id).await?;
        }
        insert_sweep_event(&mut tx, id, from, to, why.as_deref().unwrap_or(to.as_str())).await?;
        if matches!(to, SweepState::Stopped | SweepState::Done) {
            let workflow: String = moved.try_get("workflow")?;
            let note = Payload::of_sweep(id, &workflow, to.as_str(), why.as_deref(), winner);
            insert_notification(&mut tx, &id.to_string(), &note, None).await?;
        }
        let settled = match to {
            // A stop, or an end: what waits for the sweep learns it now. (A stopped sweep's
            // edges were settled by its stop; its end finds none open.)
            SweepState::Stopped | SweepState::Done => {
                settle_sweep_dependents(&mut tx, self.backend(), id, to, winner.is_some(), why.as_deref())
                    .await?
            }
            SweepState::Live | SweepState::Target => 0,
        };
        tx.commit().await?;
        Ok(Some(settled))
    }
}
