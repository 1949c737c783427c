//! The queries, once, in SQL that SQLite and PostgreSQL both accept (`$N` parameters,
//! `RETURNING`, integers for times).

use std::path::PathBuf;

use async_trait::async_trait;
use sqlx::{AnyPool, Row};
use uuid::Uuid;

use super::dependencies::{NewDependency, insert_dependencies};
use super::events::{EventRow, insert_event, insert_events};
use super::moves::{Moved, lose_live_stages};
use super::rows::{corrupt, event_from_row, exit_columns, from_json, json, run_from_row, stage_from_row};
use super::{Backend, DaemonLock, Result, RunMove, Store, StoreError, postgres, sqlite};
use crate::environments::Selection;
use crate::model::RunQuery;
use crate::model::run::{self as transitions, RunTrigger};
use crate::model::{
    CountedState, Event, EventKind, Millis, NewEvent, Run, RunParams, RunState, Stage, StateCounts,
    now_millis,
};

/// Where the daemon lock lives: a file beside an SQLite database (this one), or an advisory lock.
#[derive(Clone)]
pub(super) enum Locking {
    File(PathBuf),
    Advisory,
}

#[derive(Clone)]
pub struct SqlStore {
    pool: AnyPool,
    backend: Backend,
    locking: Locking,
    /// Set on a daemon's handle: the fencing token its writes must match.
    fence: Option<i64>,
}

/// `SELECT <every run column> FROM runs <rest>`, as a `'static` string: sqlx 0.9 takes dynamic
/// SQL only wrapped in `AssertSqlSafe`, and these never need to be dynamic.
macro_rules! select_runs {
    ($($rest:expr),+) => {
        concat!(select_runs_sql!(), $($rest),+)
    };
}

impl SqlStore {
    pub(super) fn new(pool: AnyPool, backend: Backend, locking: Locking) -> SqlStore {
        SqlStore { pool, backend, locking, fence: None }
    }

    pub(super) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub(super) fn fence(&self) -> Option<i64> {
        self.fence
    }

    pub(super) fn with_fence(&self, token: i64) -> SqlStore {
        SqlStore { fence: Some(token), ..self.clone() }
    }

    /// After a conditional write matched no row: `Fenced` if the run moved to another token,
    /// else a plain conflict.
    pub(super) async fn conflict_or_fenced(&self, run: &Run) -> StoreError {
        if let Some(token) = self.fence {
            let fence = sqlx::query("SELECT fence FROM runs WHERE id = $1")
                .bind(run.id.to_string())
                .fetch_optional(&self.pool)
                .await
                .ok()
                .flatten()
                .and_then(|row| row.try_get::<Option<i64>, _>("fence").ok().flatten());
            if fence != Some(token) {
                return StoreError::Fenced { id: run.id, token };
            }
        }
        StoreError::Conflict { id: run.id, expected: run.state, version: run.version }
    }

    /// Runs `update`, a write of `run` guarded by the run's id, state and version and this
    /// store's fence (bound here, last, in that order), in `tx`. When no row matched, the
    /// transaction is given up first (on SQLite it holds the one connection) and the error
    /// says whether the run changed or moved to another node's token.
    async fn guarded_update<'t>(
        &self,
        mut tx: sqlx::Transaction<'t, sqlx::Any>,
        update: sqlx::query::Query<'_, sqlx::Any, sqlx::any::AnyArguments>,
        run: &Run,
    ) -> Result<sqlx::Transaction<'t, sqlx::Any>> {
        let updated = update
            .bind(run.id.to_string())
            .bind(run.state.as_str())
            .bind(run.version)
            .bind(self.fence)
            .execute(&mut *tx)
            .await?;
        if updated.rows_affected() == 0 {
            drop(tx);
            return Err(self.conflict_or_fenced(run).await);
        }
        Ok(tx)
    }

    async fn query_runs(&self, sql: &'static str, binds: &[&str], limit: i64) -> Result<Vec<Run>> {
        let mut query = sqlx::query(sql);
        for bind in binds {
            query = query.bind(*bind);
        }
        let rows = query.bind(limit).fetch_all(&self.pool).await?;
        rows.iter().map(run_from_row).collect()
    }
}

/// The ids that start with a prefix, as a range in byte order: `from <= id < below`. The one
/// id-prefix lookup of every table (runs, tests, sweeps, webhook deliveries): ids are UUIDs,
/// hex and dashes, all below `~`, so a range on the id's unique index finds them (SQLite's LIKE
/// is case-insensitive and cannot use it); on PostgreSQL the range is written with the
/// byte-order operators `~>=~`/`~<~`, whatever the database's collation (which may ignore
/// dashes). A prefix of anything but hex and dashes matches no id.
pub(super) struct IdRange {
    pub(super) from: String,
    pub(super) below: String,
}

impl IdRange {
    pub(super) fn of(prefix: &str) -> Option<IdRange> {
        if prefix.is_empty() || !prefix.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return None;
        }
        let from = prefix.to_ascii_lowercase();
        let below = format!("{from}~");
        Some(IdRange { from, below })
    }
}

/// Whether the store already has migration `latest`: one indexed read, where
/// running the migrator would read and checksum every applied migration on each command.
pub(super) async fn schema_is_current(pool: &AnyPool, latest: i64) -> bool {
    // A fresh store has no `_sqlx_migrations` table yet: the error says "not current".
    sqlx::query("SELECT MAX(version) AS version FROM _sqlx_migrations WHERE success")
        .fetch_one(pool)
        .await
        .ok()
        .and_then(|row| row.try_get::<Option<i64>, _>("version").ok().flatten())
        .is_some_and(|applied| applied >= latest)
}

impl SqlStore {
    /// A stage's row. `Fenced` if the run is no longer this store's.
    async fn write_stage(&self, conn: &mut sqlx::AnyConnection, stage: &Stage) -> Result<()> {
        let (code, signal) = exit_columns(stage.record.exit);
        let updated = sqlx::query(
            "UPDATE stages SET state = $1, shim = $2, process = $3, started_at = $4, ready_at = $5, ended_at = $6, \
             exit_code = $7, exit_signal = $8, slurm_job = $12 WHERE run_id = $9 AND idx = $10 \
             AND (CAST($11 AS BIGINT) IS NULL OR EXISTS (SELECT 1 FROM runs WHERE runs.id = $9 AND runs.fence = $11))",
        )
        .bind(stage.record.state.as_str())
        .bind(stage.record.shim.as_ref().map(json))
        .bind(stage.record.process.as_ref().map(json))
        .bind(stage.record.started_at)
        .bind(stage.ready_at)
        .bind(stage.record.ended_at)
        .bind(code)
        .bind(signal)
        .bind(stage.run_id.to_string())
        .bind(stage.idx)
        .bind(self.fence)
        .bind(stage.slurm_job.map(|job| job as i64))
        .execute(&mut *conn)
        .await?;
        if let (0, Some(token)) = (updated.rows_affected(), self.fence) {
            return Err(StoreError::Fenced { id: stage.run_id, token });
        }
        Ok(())
    }
}

/// The counts of a `SELECT state, COUNT(*) AS n … GROUP BY state`; a state name no state has
/// is a corrupt row.
pub(super) async fn count_by_state<S: CountedState>(
    pool: &AnyPool,
    sql: &'static str,
) -> Result<StateCounts<S>> {
    let rows = sqlx::query(sql).fetch_all(pool).await?;
    let named = rows.iter().map(|r| Ok((r.try_get::<String, _>("state")?, r.try_get::<i64, _>("n")?)));
    StateCounts::from_names(named.collect::<Result<Vec<_>>>()?).map_err(corrupt)
}

/// One pending run's rows: the run, its stages and its `submitted` event.
pub(super) async fn insert_pending_run(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    run: &Run,
    stages: &[Stage],
) -> Result<()> {
    sqlx::query(
            "INSERT INTO runs (id, workflow, env_name, state, version, priority, attempt, created_at, updated_at, \
             started_at, ended_at, reason, run_dir, spec, params, held_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
        )
        .bind(run.id.to_string())
        .bind(&run.workflow)
        .bind(run.env_name.as_deref())
        .bind(run.state.as_str())
        .bind(run.version)
        .bind(run.priority)
        .bind(run.attempt)
        .bind(run.created_at)
        .bind(run.updated_at)
        .bind(run.started_at)
        .bind(run.ended_at)
        .bind(run.reason.as_deref())
        .bind(run.run_dir.to_string_lossy().into_owned())
        .bind(json(&run.spec))
        .bind(json(&run.params))
        .bind(run.held_at)
        .execute(&mut **tx)
        .await?;
    for stage in stages {
        sqlx::query("INSERT INTO stages (run_id, idx, name, state, log_path) VALUES ($1, $2, $3, $4, $5)")
            .bind(stage.run_id.to_string())
            .bind(stage.idx)
            .bind(&stage.name)
            .bind(stage.record.state.as_str())
            .bind(stage.log_path.to_string_lossy().into_owned())
            .execute(&mut **tx)
            .await?;
    }
    let held = if run.held_at.is_some() { ", held" } else { "" };
    let message = format!("submitted (workflow {}, priority {}{held})", run.workflow, run.priority);
    insert_event(&mut **tx, run.id, EventKind::Note, None, None, &message).await?;
    Ok(())
}

#[async_trait]
impl Store for SqlStore {
    fn backend(&self) -> Backend {
        self.backend
    }

    fn fenced(&self, token: i64) -> std::sync::Arc<dyn Store> {
        std::sync::Arc::new(self.with_fence(token))
    }

    async fn insert_run(&self, run: &Run, stages: &[Stage]) -> Result<()> {
        self.insert_runs(&[(run.clone(), stages.to_vec())]).await
    }

    async fn insert_runs(&self, runs: &[(Run, Vec<Stage>)]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        for (run, stages) in runs {
            insert_pending_run(&mut tx, run, stages).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn insert_runs_after(&self, runs: &[(Run, Vec<Stage>, Vec<NewDependency>)]) -> Result<Vec<Run>> {
        let mut tx = self.pool.begin().await?;
        let mut inserted = Vec::with_capacity(runs.len());
        for (run, stages, deps) in runs {
            insert_pending_run(&mut tx, run, stages).await?;
            let deps_open = insert_dependencies(&mut tx, self.backend, run.id, deps).await?;
            inserted.push(Run { deps_open, ..run.clone() });
        }
        tx.commit().await?;
        Ok(inserted)
    }

    async fn run(&self, id: Uuid) -> Result<Option<Run>> {
        let row = sqlx::query(select_runs!("WHERE id = $1"))
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn runs_by_prefix(&self, prefix: &str, limit: i64) -> Result<Vec<Run>> {
        let Some(range) = IdRange::of(prefix) else { return Ok(Vec::new()) };
        // On PostgreSQL the range's operators are those of the `text_pattern_ops` index, which
        // also gives the order: the plan is that index whatever the collation or statistics
        // (with `LIKE … ORDER BY seq LIMIT`, stale statistics walk the primary key through
        // every run: 2.7x slower at 100,000 runs).
        let sql = match self.backend {
            Backend::Sqlite => select_runs!("WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3"),
            Backend::Postgres => {
                select_runs!("WHERE id ~>=~ $1 AND id ~<~ $2 ORDER BY id USING ~<~ LIMIT $3")
            }
        };
        self.query_runs(sql, &[&range.from, &range.below], limit).await
    }

    async fn list_runs(&self, filter: &RunQuery) -> Result<Vec<Run>> {
        let limit = filter.limit.unwrap_or(i64::MAX);
        match filter.state {
            Some(RunState::Pending) => self.pending_runs(limit, 0).await,
            Some(state) => {
                self.query_runs(
                    select_runs!("WHERE state = $1 ORDER BY seq DESC LIMIT $2"),
                    &[state.as_str()],
                    limit,
                )
                .await
            }
            None => self.query_runs(select_runs!("ORDER BY seq DESC LIMIT $1"), &[], limit).await,
        }
    }

    async fn run_counts(&self) -> Result<StateCounts<RunState>> {
        count_by_state(&self.pool, "SELECT state, COUNT(*) AS n FROM runs GROUP BY state ORDER BY state")
            .await
    }

    async fn live_run_counts(&self) -> Result<StateCounts<RunState>> {
        count_by_state(
            &self.pool,
            concat!(
                "SELECT state, COUNT(*) AS n FROM runs WHERE state IN ('pending', ",
                in_flight_states!(),
                ") GROUP BY state ORDER BY state"
            ),
        )
        .await
    }

    async fn active_runs(&self) -> Result<Vec<Run>> {
        let rows = sqlx::query(select_runs!(
            "WHERE state IN (",
            in_flight_states!(),
            ") AND (CAST($1 AS BIGINT) IS NULL OR fence = $1) ORDER BY seq"
        ))
        .bind(self.fence)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn supervised_runs(&self) -> Result<Vec<Run>> {
        let rows = sqlx::query(select_runs!(
            "WHERE ",
            supervised_runs_sql!(),
            " AND (CAST($1 AS BIGINT) IS NULL OR fence = $1) ORDER BY seq"
        ))
        .bind(self.fence)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn pending_runs(&self, limit: i64, offset: i64) -> Result<Vec<Run>> {
        let rows = sqlx::query(select_runs!(
            "WHERE state = 'pending' ORDER BY priority DESC, seq LIMIT $1 OFFSET $2"
        ))
        .bind(limit)
        .bind(offset)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn transition(
        &self,
        run: &Run,
        trigger: RunTrigger,
        reason: Option<&str>,
        params: Option<&RunParams>,
    ) -> Result<Run> {
        self.transition_ending_at(run, trigger, reason, params, None).await
    }

    async fn transition_ended(
        &self,
        run: &Run,
        trigger: RunTrigger,
        reason: Option<&str>,
        ended_at: Millis,
    ) -> Result<Run> {
        self.transition_ending_at(run, trigger, reason, None, Some(ended_at)).await
    }
    async fn requeue(&self, run: &Run, trigger: RunTrigger, reason: &str, not_before: Millis) -> Result<Run> {
        self.requeue_with(run, trigger, reason, not_before, None, None).await
    }

    async fn requeue_resuming(
        &self,
        run: &Run,
        trigger: RunTrigger,
        reason: &str,
        not_before: Millis,
        params: &RunParams,
        note: &str,
    ) -> Result<Run> {
        self.requeue_with(run, trigger, reason, not_before, Some((params, note)), None).await
    }

    async fn release_run(&self, run: &Run) -> Result<bool> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let released = sqlx::query("UPDATE runs SET fence = NULL WHERE id = $1 AND fence = $2")
            .bind(run.id.to_string())
            .bind(self.fence)
            .execute(&mut *tx)
            .await?;
        if released.rows_affected() == 0 {
            return Ok(false);
        }
        lose_live_stages(&mut tx, run.id, now).await?;
        let message = "node lost: the stages it was still stopping are given up";
        insert_event(&mut *tx, run.id, EventKind::Note, None, None, message).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn stages(&self, run_id: Uuid) -> Result<Vec<Stage>> {
        let rows = sqlx::query(
            "SELECT run_id, idx, name, state, shim, process, started_at, ready_at, ended_at, exit_code, exit_signal, \
             log_path, slurm_job FROM stages WHERE run_id = $1 ORDER BY idx",
        )
        .bind(run_id.to_string())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(stage_from_row).collect()
    }

    async fn update_stage(&self, stage: &Stage, event: Option<&NewEvent>) -> Result<()> {
        let Some(event) = event else {
            // One statement needs no transaction: two round trips less on SQLite.
            return self.write_stage(&mut *self.pool.acquire().await?, stage).await;
        };
        let mut tx = self.pool.begin().await?;
        self.write_stage(&mut tx, stage).await?;
        insert_events(&mut tx, stage.run_id, &[event.into()]).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn record_stage(
        &self,
        stage: &Stage,
        events: &[NewEvent],
        then: Option<RunMove<'_>>,
    ) -> Result<Option<Run>> {
        // A move this path doesn't make (a requeue, or one the run's state forbids) is left to
        // the caller, who re-reads the run: the stage still lands.
        let moved = then.and_then(|m| match transitions::next(m.run.state, m.trigger) {
            Ok(to) if to != RunState::Pending => {
                Some((m.run, Moved::new(m.run, m.trigger, to, m.reason, None, m.ended_at)))
            }
            _ => None,
        });
        let mut tx = self.pool.begin().await?;
        self.write_stage(&mut tx, stage).await?;
        let mut rows: Vec<EventRow> = events.iter().map(EventRow::from).collect();
        let state_event = match &moved {
            Some((run, moved)) => self.move_run(&mut tx, run, moved).await?,
            None => None,
        };
        let landed = state_event.is_some();
        rows.extend(state_event);
        insert_events(&mut tx, stage.run_id, &rows).await?;
        tx.commit().await?;
        Ok(moved.filter(|_| landed).map(|(_, moved)| moved.run))
    }

    async fn add_event(&self, run_id: Uuid, event: &NewEvent) -> Result<()> {
        insert_event(&self.pool, run_id, event.kind, None, event.stage.as_deref(), &event.message).await
    }

    async fn events(&self, run_id: Uuid, after: i64) -> Result<Vec<Event>> {
        let rows = sqlx::query(
            "SELECT id, run_id, at, kind, from_state, to_state, stage, message FROM events \
             WHERE run_id = $1 AND id > $2 ORDER BY id",
        )
        .bind(run_id.to_string())
        .bind(after)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn last_event_id(&self) -> Result<i64> {
        let row =
            sqlx::query("SELECT COALESCE(MAX(id), 0) AS last FROM events").fetch_one(&self.pool).await?;
        Ok(row.try_get("last")?)
    }

    async fn selection(&self) -> Result<Option<Selection>> {
        let row = sqlx::query(
            "SELECT env_name, env_file, kind, source, class_name, config_class, fields, config, updated_at \
             FROM selection WHERE id = 1",
        )
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let fields: String = row.try_get("fields")?;
        let config: String = row.try_get("config")?;
        let (fell_back, fields) = from_json::<(Option<String>, _)>(&fields, "selection fields")?;
        let kind: String = row.try_get("kind")?;
        let source: Option<String> = row.try_get("source")?;
        Ok(Some(Selection {
            env_name: row.try_get("env_name")?,
            env_file: PathBuf::from(row.try_get::<String, _>("env_file")?),
            kind: crate::environments::EnvKind::parse(&kind).ok_or_else(|| {
                StoreError::Corrupt(format!("selection kind '{}'", crate::text::one_line(&kind)))
            })?,
            source: source.as_deref().map(|s| from_json(s, "selection source")).transpose()?,
            class_name: row.try_get("class_name")?,
            config_class: row.try_get("config_class")?,
            fell_back,
            fields,
            config: from_json(&config, "selection config")?,
            updated_at: row.try_get("updated_at")?,
        }))
    }

    async fn put_selection(&self, selection: &Selection) -> Result<()> {
        sqlx::query(
            "INSERT INTO selection (id, env_name, env_file, kind, source, class_name, config_class, fields, config, updated_at) \
             VALUES (1, $1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO UPDATE SET env_name = excluded.env_name, \
             env_file = excluded.env_file, kind = excluded.kind, source = excluded.source, \
             class_name = excluded.class_name, config_class = excluded.config_class, \
             fields = excluded.fields, config = excluded.config, updated_at = excluded.updated_at",
        )
        .bind(&selection.env_name)
        .bind(selection.env_file.to_string_lossy().into_owned())
        .bind(selection.kind.as_str())
        .bind(selection.source.as_ref().map(json))
        .bind(&selection.class_name)
        .bind(&selection.config_class)
        .bind(json(&(&selection.fell_back, &selection.fields)))
        .bind(json(&selection.config))
        .bind(selection.updated_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn snapshot(&self, run_id: Uuid) -> Result<Option<(i64, serde_json::Value)>> {
        let row = sqlx::query("SELECT taken_at, data FROM snapshots WHERE run_id = $1")
            .bind(run_id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let data: String = row.try_get("data")?;
        Ok(Some((row.try_get("taken_at")?, from_json(&data, "snapshot")?)))
    }

    async fn put_snapshot(&self, run_id: Uuid, taken_at: i64, data: &serde_json::Value) -> Result<()> {
        sqlx::query(
            "INSERT INTO snapshots (run_id, taken_at, data) VALUES ($1, $2, $3) \
             ON CONFLICT (run_id) DO UPDATE SET taken_at = excluded.taken_at, data = excluded.data",
        )
        .bind(run_id.to_string())
        .bind(taken_at)
        .bind(json(data))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn announce(&self) -> Result<()> {
        match self.backend {
            Backend::Postgres => postgres::announce(&self.pool).await,
            Backend::Sqlite => Ok(()),
        }
    }

    async fn lock_daemon(&self, node: &str) -> Result<DaemonLock> {
        match &self.locking {
            Locking::File(db) => sqlite::lock_daemon(db, &self.pool).await,
            Locking::Advisory => postgres::lock_daemon(&self.pool, node).await,
        }
    }
}

impl SqlStore {
    /// `requeue`, with the next attempt's params and an event saying what it resumes from
    /// written in the same transaction; `preempted` counts a preemption that lost that many ms.
    pub(super) async fn requeue_with(
        &self,
        run: &Run,
        trigger: RunTrigger,
        reason: &str,
        not_before: Millis,
        resume: Option<(&RunParams, &str)>,
        preempted: Option<Millis>,
    ) -> Result<Run> {
        let (tx, queued) =
            self.requeue_uncommitted(run, trigger, reason, not_before, resume, preempted).await?;
        tx.commit().await?;
        Ok(queued)
    }

    /// `requeue_with`'s writes in a transaction left open, for a caller that writes more with
    /// them (a PBT exploit marks itself applied).
    pub(super) async fn requeue_uncommitted(
        &self,
        run: &Run,
        trigger: RunTrigger,
        reason: &str,
        not_before: Millis,
        resume: Option<(&RunParams, &str)>,
        preempted: Option<Millis>,
    ) -> Result<(sqlx::Transaction<'static, sqlx::Any>, Run)> {
        let to = transitions::next(run.state, trigger)?;

        if to != RunState::Pending {
            return Err(StoreError::Illegal(transitions::IllegalTransition { from: run.state, trigger }));
        }
        let now = now_millis();
        let tx = self.pool.begin().await?;
        let params = resume.map_or(&run.params, |(params, _)| params);
        let (count, lost): (i64, Millis) = preempted.map_or((0, 0), |lost| (1, lost.max(0)));
        let update = sqlx::query(
            "UPDATE runs SET state = 'pending', version = version + 1, updated_at = $1, started_at = NULL, \
             ended_at = NULL, reason = $2, attempt = attempt + 1, node = NULL, fence = NULL, not_before = $3, \
             params = $4, deps_open = 0, preemptions = preemptions + $5, preempted_work_ms = preempted_work_ms + $6 \
             WHERE id = $7 AND state = $8 AND version = $9 AND (CAST($10 AS BIGINT) IS NULL OR fence = $10)",
        )
        .bind(now)
        .bind(reason)
        .bind(not_before)
        .bind(json(params))
        .bind(count)
        .bind(lost);
        let mut tx = self.guarded_update(tx, update, run).await?;
        // The ending attempt's stages are kept as they ended, for the run's page.
        sqlx::query(
            "INSERT INTO stage_attempts (run_id, attempt, idx, name, state, shim, process, started_at, ready_at, \
             ended_at, exit_code, exit_signal, log_path, slurm_job) SELECT run_id, CAST($2 AS BIGINT), idx, name, \
             state, shim, process, started_at, ready_at, ended_at, exit_code, exit_signal, log_path, slurm_job \
             FROM stages WHERE run_id = $1 ON CONFLICT DO NOTHING",
        )
        .bind(run.id.to_string())
        .bind(run.attempt)
        .execute(&mut *tx)
        .await?;
        // The next attempt starts from scratch; what the last one did stays in the events and
        // in `stage_attempts`.
        sqlx::query(
            "UPDATE stages SET state = 'pending', shim = NULL, process = NULL, started_at = NULL, ready_at = NULL, \
             ended_at = NULL, exit_code = NULL, exit_signal = NULL, slurm_job = NULL WHERE run_id = $1",
        )
        .bind(run.id.to_string())
        .execute(&mut *tx)
        .await?;
        let message = format!("{trigger}: {reason}");
        insert_event(&mut *tx, run.id, EventKind::State, Some((run.state, to)), None, &message).await?;
        if let Some((_, note)) = resume {
            insert_event(&mut *tx, run.id, EventKind::Note, None, None, note).await?;
        }
        let queued = Run {
            state: to,
            version: run.version + 1,
            updated_at: now,
            started_at: None,
            ended_at: None,
            reason: Some(reason.to_string()),
            attempt: run.attempt + 1,
            node: None,
            fence: None,
            not_before: Some(not_before),
            params: params.clone(),
            deps_open: 0,
            preemptions: run.preemptions + count,
            preempted_work: run.preempted_work + lost,
            ..run.clone()
        };
        Ok((tx, queued))
    }
}
