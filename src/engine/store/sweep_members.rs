//! A sweep's members in the store: member k is run `run_id`, written with its sweep (grid and
//! random: every member at submission) or one at a time as a slot opens (bayes: with the values
//! suggested for it, in the same transaction as its run); hyperband's mark on the ones it
//! stopped; and the members read back, with their runs or as the model's `sweep::Member`.

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::events::insert_events;
use super::moves::Moved;
use super::rows::{corrupt, from_json, json, run_from_row};
use super::sql::{SqlStore, insert_pending_run};
use super::sweeps::{member_number, uuid_of};
use super::{Result, Store};
use crate::model::run::RunTrigger;
use crate::model::sweep::{Member, StoppedBy, SweepRecord, Tally};
use crate::model::{Run, Stage};

/// The member columns every read of members selects (`m` the member row, `r` its run).
pub(super) const MEMBER_COLUMNS: &str = "m.sweep_id, m.k, r.id AS run_id, r.version, r.state, r.attempt, r.reason, m.early_terminated, m.stopped_by_sweep, m.suggestion, r.started_at, r.ended_at, m.rerun_version";

/// A member from a row of `MEMBER_COLUMNS` (with `readings`, `low` and `high` when `tallied`).
pub(super) fn member_from_row(row: &sqlx::any::AnyRow, tallied: bool) -> Result<Member> {
    let state: String = row.try_get("state")?;
    let tally = if tallied {
        let readings: i64 = row.try_get("readings")?;
        Some(Tally {
            readings: u64::try_from(readings).unwrap_or(0),
            low: row.try_get("low")?,
            high: row.try_get("high")?,
        })
    } else {
        None
    };
    // Hyperband's mark stands over the sweep's stop, which may have met the member stopping.
    let stopped_by =
        match (row.try_get::<i64, _>("early_terminated")?, row.try_get::<i64, _>("stopped_by_sweep")?) {
            (0, 0) => None,
            (0, _) => Some(StoppedBy::SweepStop),
            _ => Some(StoppedBy::Hyperband),
        };
    Ok(Member {
        sweep: uuid_of(row, "sweep_id")?,
        k: member_number(row, "k")?,
        run: uuid_of(row, "run_id")?,
        version: row.try_get("version")?,
        state: state.parse().map_err(corrupt)?,
        attempt: row.try_get("attempt")?,
        reason: row.try_get("reason")?,
        stopped_by,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        suggestion: row
            .try_get::<Option<String>, _>("suggestion")?
            .map(|text| from_json(&text, "member suggestion"))
            .transpose()?,
        rerun_marked: row.try_get::<Option<i64>, _>("rerun_version")?.is_some(),
        tally,
    })
}

#[async_trait]
pub trait SweepMemberStore: Send + Sync {
    /// Stops member run `run` for its sweep's hyperband, saying `reason`, and marks the member
    /// early-terminated, in one transaction (a conflict when the run moved since it was read).
    async fn early_terminate(&self, run: &Run, reason: &str) -> Result<Run>;
    /// A sweep's members in order of k, each with its whole run as it is now (spec included).
    async fn sweep_member_runs(&self, id: Uuid) -> Result<Vec<(u64, Run)>>;
    /// A sweep's members in order of k, without their runs' specs (a leaderboard's, a decision's).
    async fn sweep_members(&self, id: Uuid) -> Result<Vec<Member>>;
    /// Writes member `k` of the live sweep `sweep` (a bayes sweep's next), with the values
    /// suggested for it: its `sweep_members` row, its run (pending) and stages, in one
    /// transaction. False, with nothing written, when member k exists already (a pass made it
    /// before: the (sweep, k) key holds it once) or the sweep is no longer live.
    async fn add_member(
        &self,
        sweep: Uuid,
        k: u64,
        suggestion: &serde_json::Value,
        run: &Run,
        stages: &[Stage],
    ) -> Result<bool>;
}

#[async_trait]
impl SweepMemberStore for SqlStore {
    async fn early_terminate(&self, run: &Run, reason: &str) -> Result<Run> {
        let to = crate::model::run::next(run.state, RunTrigger::Stop)?;
        let moved = Moved::new(run, RunTrigger::Stop, to, Some(reason), None, None);
        let mut tx = self.pool().begin().await?;
        let Some(event) = self.move_run(&mut tx, run, &moved).await? else {
            drop(tx);
            return Err(self.conflict_or_fenced(run).await);
        };
        insert_events(&mut tx, run.id, &[event]).await?;
        sqlx::query("UPDATE sweep_members SET early_terminated = 1 WHERE run_id = $1")
            .bind(run.id.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(moved.run)
    }

    async fn sweep_member_runs(&self, id: Uuid) -> Result<Vec<(u64, Run)>> {
        let rows = sqlx::query(concat!(
            "SELECT m.k, r.id, r.workflow, r.env_name, r.state, r.version, r.priority, r.attempt, r.created_at, ",
            "r.updated_at, r.started_at, r.ended_at, r.reason, r.run_dir, r.spec, r.params, r.node, r.fence, ",
            "r.not_before, r.held_at, r.deps_open, r.preemptions, r.preempted_work_ms FROM sweep_members m ",
            "JOIN runs r ON r.id = m.run_id ",
            "WHERE m.sweep_id = $1 ORDER BY m.k"
        ))
        .bind(id.to_string())
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(|row| Ok((member_number(row, "k")?, run_from_row(row)?))).collect()
    }

    async fn sweep_members(&self, id: Uuid) -> Result<Vec<Member>> {
        let sql = format!(
            "SELECT {MEMBER_COLUMNS} FROM sweep_members m JOIN runs r ON r.id = m.run_id \
             WHERE m.sweep_id = $1 ORDER BY m.k"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id.to_string()).fetch_all(self.pool()).await?;
        rows.iter().map(|row| member_from_row(row, false)).collect()
    }

    async fn add_member(
        &self,
        sweep: Uuid,
        k: u64,
        suggestion: &serde_json::Value,
        run: &Run,
        stages: &[Stage],
    ) -> Result<bool> {
        let mut tx = self.pool().begin().await?;
        if self.backend().locks_rows() {
            // The sweep's row is locked as a stop's move locks it: a stop committing meanwhile
            // either waits for this member (and stops it) or is seen here (and nothing is
            // written). SQLite's one writer serializes the two already.
            sqlx::query("SELECT id FROM sweeps WHERE id = $1 FOR UPDATE")
                .bind(sweep.to_string())
                .fetch_optional(&mut *tx)
                .await?;
        }
        // The member's row first: its key is what makes a retried pass write nothing.
        let added = sqlx::query(
            "INSERT INTO sweep_members (sweep_id, k, run_id, suggestion) \
             SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM sweeps WHERE id = $1 AND state = 'live') \
             ON CONFLICT (sweep_id, k) DO NOTHING",
        )
        .bind(sweep.to_string())
        .bind(k as i64)
        .bind(run.id.to_string())
        .bind(json(suggestion))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if added == 0 {
            return Ok(false);
        }
        insert_pending_run(&mut tx, run, stages).await?;
        crate::failpoint::Failpoint::SweepMemberUncommitted.hit();
        tx.commit().await?;
        Ok(true)
    }
}

/// Writes a sweep's row and its members (pending runs, each with its stages and `submitted`
/// event, member k being `members[k]`) in `tx`.
pub(super) async fn insert_sweep_rows(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    sweep: &SweepRecord,
    members: &[(Run, Vec<Stage>)],
) -> Result<()> {
    sqlx::query(
        "INSERT INTO sweeps (id, file, config, workflow, members, max_live, state, reason, created_at, updated_at, \
         member_setup) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(sweep.id.to_string())
    .bind(&sweep.file)
    .bind(json(&sweep.config))
    .bind(&sweep.workflow)
    .bind(sweep.members as i64)
    .bind(sweep.max_live.map(i64::from))
    .bind(sweep.state.as_str())
    .bind(sweep.reason.as_deref())
    .bind(sweep.created_at)
    .bind(sweep.updated_at)
    .bind(sweep.member_setup.as_ref().map(json))
    .execute(&mut **tx)
    .await?;
    for (k, (run, stages)) in members.iter().enumerate() {
        insert_pending_run(tx, run, stages).await?;
        sqlx::query("INSERT INTO sweep_members (sweep_id, k, run_id) VALUES ($1, $2, $3)")
            .bind(sweep.id.to_string())
            .bind(k as i64)
            .bind(run.id.to_string())
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}
