//! Dependencies in the store: edges (waiting run, run or sweep waited for, condition, name) and,
//! on each run, a count of the edges not met yet. A run is claimable only at 0 (the claim's
//! partial index holds no other), and the transaction that ends a run (or stops or ends a sweep)
//! settles every edge waiting for it: met edges count down, an edge that can never be met fails
//! its waiting run, and that cascades.

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::events::insert_event;
use super::rows::{corrupt, json};
use super::sql::SqlStore;
use super::{Backend, Result, StoreError};
use crate::model::dependency::{
    Awaited, AwaitedKind, Settled, When, settle, settle_sweep, sweep_unmet_reason, unmet_reason,
};
use crate::model::run::{self as transitions, RunTrigger};
use crate::model::sweep::SweepState;
use crate::model::{Dependency, EventKind, Run, RunParams, RunState, now_millis, short_id};

/// One edge of a run being submitted.
#[derive(Clone, Debug, PartialEq)]
pub struct NewDependency {
    /// What `after` is: a run, or a sweep.
    pub kind: AwaitedKind,
    /// The run or sweep waited for: an existing one, or one earlier in the same submission.
    pub after: Uuid,
    pub when: When,
    pub name: Option<String>,
}

impl NewDependency {
    /// An edge to the run `after`.
    pub fn on_run(after: Uuid, when: When, name: Option<String>) -> NewDependency {
        NewDependency { kind: AwaitedKind::Run, after, when, name }
    }

    /// An edge to the sweep `after`, met by its winner.
    pub fn on_sweep(after: Uuid, name: Option<String>) -> NewDependency {
        NewDependency { kind: AwaitedKind::Sweep, after, when: When::Ok, name }
    }
}

/// The columns of an edge as surfaces show it: the edge, the state of the run it waits for,
/// or of the sweep (each join on its table's key, only for the edges of its kind).
macro_rules! edge_columns {
    () => {
        "SELECT d.run_id, d.after_id, d.after_kind, d.cond, d.name, d.settled, r.state, s.state AS sweep_state \
         FROM run_deps d LEFT JOIN runs r ON r.id = d.after_id AND d.after_kind = 'run' \
         LEFT JOIN sweeps s ON s.id = d.after_id AND d.after_kind = 'sweep' "
    };
}

/// The most waiting runs one `open_dependencies` query binds (well under either backend's
/// limit on bound values).
pub const OPEN_CHUNK: usize = 500;

/// The open edges of `n` waiting runs: `run_id IN ($1, …, $n)`, on the primary key. Only the
/// placeholders vary: the ids are bound, never spliced.
pub(crate) fn open_dependencies_sql(n: usize) -> String {
    let marks: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
    format!(
        concat!(edge_columns!(), "WHERE d.run_id IN ({}) AND d.settled IS NULL ORDER BY d.run_id, d.pos"),
        marks.join(", ")
    )
}

/// One edge as surfaces show it, from a row of `run_deps` joined with what it waits for.
fn dependency_of(row: &sqlx::any::AnyRow) -> Result<Dependency> {
    let after: String = row.try_get("after_id")?;
    let kind: String = row.try_get("after_kind")?;
    let cond: String = row.try_get("cond")?;
    let settled: Option<String> = row.try_get("settled")?;
    let id = Uuid::parse_str(&after).map_err(|e| corrupt(format!("dependency {after}: {e}")))?;
    let awaited = match kind.parse().map_err(corrupt)? {
        AwaitedKind::Run => {
            let state: Option<String> = row.try_get("state")?;
            Awaited::Run { run: id, state: state.map(|s| s.parse()).transpose().map_err(corrupt)? }
        }
        AwaitedKind::Sweep => {
            let state: Option<String> = row.try_get("sweep_state")?;
            Awaited::Sweep { sweep: id, state: state.map(|s| s.parse()).transpose().map_err(corrupt)? }
        }
    };
    Ok(Dependency {
        awaited,
        when: cond.parse().map_err(corrupt)?,
        name: row.try_get("name")?,
        settled: match settled.as_deref() {
            None => Settled::Waiting,
            Some("met") => Settled::Met,
            Some("unmet") => Settled::Unmet,
            Some(other) => return Err(corrupt(format!("dependency settled as '{other}'"))),
        },
    })
}

#[async_trait]
pub trait DependencyStore: Send + Sync {
    /// The run's dependencies in the order given, each with the state of the run (or sweep) it
    /// waits for.
    async fn dependencies(&self, run_id: Uuid) -> Result<Vec<Dependency>>;
    /// The edges not met yet of each of `run_ids` (the waiting runs of a listed page), each
    /// with the state of the run it waits for, by waiting run and in the order given: one
    /// query per [`OPEN_CHUNK`] runs, on the edges' primary key.
    async fn open_dependencies(&self, run_ids: &[Uuid]) -> Result<Vec<(Uuid, Dependency)>>;
    /// Writes a claimed run's params with its dependencies' values, and `note` as its event,
    /// while the run is in the state and version it was read at (and holds this store's fence).
    async fn record_after_values(&self, run: &Run, params: &RunParams, note: &str) -> Result<Run>;
}

#[async_trait]
impl DependencyStore for SqlStore {
    async fn dependencies(&self, run_id: Uuid) -> Result<Vec<Dependency>> {
        let rows = sqlx::query(concat!(edge_columns!(), "WHERE d.run_id = $1 ORDER BY d.pos"))
            .bind(run_id.to_string())
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(dependency_of).collect()
    }

    async fn open_dependencies(&self, run_ids: &[Uuid]) -> Result<Vec<(Uuid, Dependency)>> {
        let mut open = Vec::new();
        for chunk in run_ids.chunks(OPEN_CHUNK) {
            let sql = open_dependencies_sql(chunk.len());
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(id.to_string());
            }
            for row in query.fetch_all(self.pool()).await? {
                let waiting: String = row.try_get("run_id")?;
                let waiting = Uuid::parse_str(&waiting)
                    .map_err(|e| corrupt(format!("dependency of {waiting}: {e}")))?;
                open.push((waiting, dependency_of(&row)?));
            }
        }
        Ok(open)
    }

    async fn record_after_values(&self, run: &Run, params: &RunParams, note: &str) -> Result<Run> {
        let now = now_millis();
        let mut tx = self.pool().begin().await?;
        let updated = sqlx::query(
            "UPDATE runs SET params = $1, version = version + 1, updated_at = $2 WHERE id = $3 AND state = $4 \
             AND version = $5 AND (CAST($6 AS BIGINT) IS NULL OR fence = $6)",
        )
        .bind(json(params))
        .bind(now)
        .bind(run.id.to_string())
        .bind(run.state.as_str())
        .bind(run.version)
        .bind(self.fence())
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() == 0 {
            drop(tx);
            return Err(self.conflict_or_fenced(run).await);
        }
        insert_event(&mut *tx, run.id, EventKind::Note, None, None, note).await?;
        tx.commit().await?;
        Ok(Run { params: params.clone(), version: run.version + 1, updated_at: now, ..run.clone() })
    }
}

/// Writes `run`'s edges in `tx` (its row is already there) and its count of open ones. An edge
/// whose run (or sweep) already ended is settled now: met, or refused (`Unmet`) when it never
/// can be. What it waits for is read under a share lock on PostgreSQL, so an end committing
/// meanwhile either sees this edge or is seen by it.
pub(super) async fn insert_dependencies(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    backend: Backend,
    run: Uuid,
    deps: &[NewDependency],
) -> Result<i64> {
    let (read_run, read_sweep) = match backend.locks_rows() {
        true => (
            "SELECT state FROM runs WHERE id = $1 FOR SHARE",
            "SELECT state, winner_run, reason FROM sweeps WHERE id = $1 FOR SHARE",
        ),
        false => (
            "SELECT state FROM runs WHERE id = $1",
            "SELECT state, winner_run, reason FROM sweeps WHERE id = $1",
        ),
    };
    let mut open = 0;
    for (pos, dep) in deps.iter().enumerate() {
        let read = match dep.kind {
            AwaitedKind::Run => read_run,
            AwaitedKind::Sweep => read_sweep,
        };
        let row = sqlx::query(read).bind(dep.after.to_string()).fetch_optional(&mut **tx).await?;
        let Some(row) = row else {
            return Err(StoreError::Unmet {
                reason: format!("{} {} does not exist", dep.kind.as_str(), dep.after),
            });
        };
        let state: String = row.try_get("state")?;
        let (settled, reason) = match dep.kind {
            AwaitedKind::Run => {
                let state: RunState = state.parse().map_err(corrupt)?;
                (settle(dep.when, state), unmet_reason(&dep.after, dep.when, state))
            }
            AwaitedKind::Sweep => {
                let state: SweepState = state.parse().map_err(corrupt)?;
                let winner: Option<String> = row.try_get("winner_run")?;
                let why: Option<String> = row.try_get("reason")?;
                (settle_sweep(state, winner.is_some()), sweep_unmet_reason(&dep.after, state, why.as_deref()))
            }
        };
        let settled = match settled {
            Settled::Waiting => {
                open += 1;
                None
            }
            Settled::Met => Some("met"),
            Settled::Unmet => return Err(StoreError::Unmet { reason }),
        };
        sqlx::query(
            "INSERT INTO run_deps (run_id, pos, after_id, after_kind, cond, name, settled) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(run.to_string())
        .bind(pos as i64)
        .bind(dep.after.to_string())
        .bind(dep.kind.as_str())
        .bind(dep.when.as_str())
        .bind(dep.name.as_deref())
        .bind(settled)
        .execute(&mut **tx)
        .await?;
    }
    if open > 0 {
        sqlx::query("UPDATE runs SET deps_open = $1 WHERE id = $2")
            .bind(open)
            .bind(run.to_string())
            .execute(&mut **tx)
            .await?;
    }
    Ok(open)
}

/// What ended, for the edges waiting for it.
enum Ended {
    /// A run, in its terminal state.
    Run(Uuid, RunState),
    /// A sweep, stopped or done (with a winner or not; `why` its reason).
    Sweep { id: Uuid, state: SweepState, has_winner: bool, why: Option<String> },
}

impl Ended {
    fn key(&self) -> (Uuid, AwaitedKind) {
        match self {
            Ended::Run(id, _) => (*id, AwaitedKind::Run),
            Ended::Sweep { id, .. } => (*id, AwaitedKind::Sweep),
        }
    }

    /// What this end means for an edge with condition `when`, by the pure rules.
    fn settles(&self, when: When) -> Settled {
        match self {
            Ended::Run(_, state) => settle(when, *state),
            Ended::Sweep { state, has_winner, .. } => settle_sweep(*state, *has_winner),
        }
    }

    /// Why an edge with condition `when` can never be met by this end.
    fn unmet_reason(&self, when: When) -> String {
        match self {
            Ended::Run(id, state) => unmet_reason(id, when, *state),
            Ended::Sweep { id, state, why, .. } => sweep_unmet_reason(id, *state, why.as_deref()),
        }
    }

    /// "1a2b3c4d completed", "sweep 1a2b3c4d done": the end, in a met edge's event.
    fn label(&self) -> String {
        match self {
            Ended::Run(id, state) => format!("{} {state}", short_id(id)),
            Ended::Sweep { id, state, .. } => format!("sweep {} {state}", short_id(id)),
        }
    }
}

/// Settles, in `tx`, every edge that waits for `ended` (which just reached the terminal
/// `state`): a met edge counts its run down; an unmet one fails its run, still pending, with the
/// reason, and that run's own edges are settled the same way. Each run fails at most once, so
/// the walk ends with the graph. On PostgreSQL a run that became claimable wakes every daemon
/// when the transaction commits.
pub(super) async fn settle_dependents(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    backend: Backend,
    ended: Uuid,
    state: RunState,
) -> Result<u64> {
    settle_from(tx, backend, Ended::Run(ended, state)).await
}

/// Settles, in `tx`, every edge that waits for the sweep `sweep`, which was just stopped or
/// ended (`done`, with a winner or without one, `why` its reason), as `settle_dependents` does
/// for a run's end: the runs an unmet edge fails cascade the same way. How many edges it
/// settled, its cascade's included.
pub(super) async fn settle_sweep_dependents(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    backend: Backend,
    sweep: Uuid,
    state: SweepState,
    has_winner: bool,
    why: Option<&str>,
) -> Result<u64> {
    let ended = Ended::Sweep { id: sweep, state, has_winner, why: why.map(str::to_string) };
    settle_from(tx, backend, ended).await
}

/// The walk both ends start: how many edges it settled.
async fn settle_from(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    backend: Backend,
    first: Ended,
) -> Result<u64> {
    let mut ends = vec![first];
    let mut woke = false;
    let mut settled_edges = 0;
    while let Some(end) = ends.pop() {
        let (after, kind) = end.key();
        let rows = sqlx::query(
            "SELECT run_id, pos, cond FROM run_deps WHERE after_id = $1 AND after_kind = $2 AND settled IS NULL",
        )
        .bind(after.to_string())
        .bind(kind.as_str())
        .fetch_all(&mut **tx)
        .await?;
        for row in &rows {
            let waiting: String = row.try_get("run_id")?;
            let pos: i64 = row.try_get("pos")?;
            let when: When = row.try_get::<String, _>("cond")?.parse().map_err(corrupt)?;
            let settled = end.settles(when);
            if settled == Settled::Waiting {
                continue;
            }
            settled_edges += 1;
            sqlx::query("UPDATE run_deps SET settled = $1 WHERE run_id = $2 AND pos = $3")
                .bind(settled.as_str())
                .bind(&waiting)
                .bind(pos)
                .execute(&mut **tx)
                .await?;
            let waiting_id =
                Uuid::parse_str(&waiting).map_err(|e| corrupt(format!("run id {waiting}: {e}")))?;
            if settled == Settled::Met {
                let counted = sqlx::query(
                    "UPDATE runs SET deps_open = deps_open - 1 WHERE id = $1 AND deps_open > 0 AND state = 'pending' \
                     RETURNING deps_open",
                )
                .bind(&waiting)
                .fetch_optional(&mut **tx)
                .await?;
                if let Some(left) = counted {
                    let left: i64 = left.try_get("deps_open")?;
                    woke |= left == 0;
                    let message = format!("dependency {}: met ({left} left)", end.label());
                    insert_event(&mut **tx, waiting_id, EventKind::Note, None, None, &message).await?;
                }
                continue;
            }
            let to = transitions::next(RunState::Pending, RunTrigger::Unmet)?;
            let reason = end.unmet_reason(when);
            let now = now_millis();
            let failed = sqlx::query(
                "UPDATE runs SET state = $1, version = version + 1, updated_at = $2, ended_at = $2, reason = $3, \
                 held_at = NULL WHERE id = $4 AND state = 'pending'",
            )
            .bind(to.as_str())
            .bind(now)
            .bind(&reason)
            .bind(&waiting)
            .execute(&mut **tx)
            .await?;
            // A run no longer pending ended (or started) on its own: its own end settled it.
            if failed.rows_affected() == 1 {
                let message = format!("{}: {reason}", RunTrigger::Unmet);
                let states = Some((RunState::Pending, to));
                insert_event(&mut **tx, waiting_id, EventKind::State, states, None, &message).await?;
                notify_failed(tx, waiting_id).await?;
                ends.push(Ended::Run(waiting_id, to));
            }
        }
    }
    if woke && backend == Backend::Postgres {
        sqlx::query("SELECT pg_notify($1, '') AS sent")
            .bind(super::postgres::WAKE_CHANNEL)
            .execute(&mut **tx)
            .await?;
    }
    Ok(settled_edges)
}

/// Writes, in `tx`, the notification of run `id`, which a dependency just failed.
async fn notify_failed(tx: &mut sqlx::Transaction<'static, sqlx::Any>, id: Uuid) -> Result<()> {
    let row = sqlx::query(concat!(select_runs_sql!(), "WHERE id = $1"))
        .bind(id.to_string())
        .fetch_one(&mut **tx)
        .await?;
    let run = super::rows::run_from_row(&row)?;
    match crate::webhooks::Payload::of_run(&run) {
        Some(note) => super::outbox::insert_notification(tx, &id.to_string(), &note, None).await,
        None => Ok(()),
    }
}
