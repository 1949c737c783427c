//! Inference tests and their tasks in the store, with the same rules as runs: conditional transitions on
//! (state, version) with an event row in the same transaction.

use std::path::PathBuf;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use super::events::insert_event;
use super::rows::{corrupt, exit_columns, from_json, json, record_from_row};
use super::sql::{IdRange, SqlStore};
use super::{Backend, Result, StoreError};
use crate::model::{EventKind, NewEvent, now_millis};
use crate::model::{InferenceTest, StateCounts, TestState, TestTask, TestTrigger};

#[async_trait]
pub trait InferenceTestStore: Send + Sync {
    async fn insert_test(&self, test: &InferenceTest, tasks: &[TestTask]) -> Result<()>;
    async fn test(&self, id: Uuid) -> Result<Option<InferenceTest>>;
    async fn tests_by_prefix(&self, prefix: &str, limit: i64) -> Result<Vec<InferenceTest>>;
    /// Newest first.
    async fn list_tests(&self, limit: i64) -> Result<Vec<InferenceTest>>;
    /// Tests in `state`, oldest first.
    async fn tests_in(&self, state: TestState, limit: i64) -> Result<Vec<InferenceTest>>;
    async fn transition_test(
        &self,
        test: &InferenceTest,
        trigger: TestTrigger,
        reason: Option<&str>,
        results: Option<&serde_json::Value>,
    ) -> Result<InferenceTest>;
    async fn test_tasks(&self, test_id: Uuid) -> Result<Vec<TestTask>>;
    async fn update_task(&self, task: &TestTask, event: Option<&NewEvent>) -> Result<()>;
    /// How many tests are in each state.
    async fn test_counts(&self) -> Result<StateCounts<TestState>>;
}

macro_rules! select_tests {
    ($rest:literal) => {
        concat!(select_tests_sql!(), $rest)
    };
}

pub(super) fn test_from_row(row: &AnyRow) -> Result<InferenceTest> {
    let id: String = row.try_get("id")?;
    let state: String = row.try_get("state")?;
    let spec: String = row.try_get("spec")?;
    let results: Option<String> = row.try_get("results")?;
    let schedule: Option<String> = row.try_get("schedule_id")?;
    Ok(InferenceTest {
        id: Uuid::parse_str(&id).map_err(corrupt)?,
        state: state.parse().map_err(corrupt)?,
        version: row.try_get("version")?,
        schedule_id: schedule.map(|s| Uuid::parse_str(&s).map_err(corrupt)).transpose()?,
        env_name: row.try_get("env_name")?,
        spec: from_json(&spec, "test spec")?,
        created_at: row.try_get("created_at")?,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        reason: row.try_get("reason")?,
        results: results.map(|r| from_json(&r, "test results")).transpose()?,
        test_dir: PathBuf::from(row.try_get::<String, _>("test_dir")?),
        node: row.try_get("node")?,
        fence: row.try_get("fence")?,
    })
}

fn task_from_row(row: &AnyRow) -> Result<TestTask> {
    let test_id: String = row.try_get("test_id")?;
    Ok(TestTask {
        test_id: Uuid::parse_str(&test_id).map_err(corrupt)?,
        idx: row.try_get("idx")?,
        model: row.try_get("model")?,
        record: record_from_row(row)?,
        timed_out: row.try_get::<i64, _>("timed_out")? != 0,
    })
}

impl SqlStore {
    pub(super) async fn query_tests(
        &self,
        sql: &'static str,
        bind: Option<&str>,
        limit: i64,
    ) -> Result<Vec<InferenceTest>> {
        let mut query = sqlx::query(sql);
        if let Some(bind) = bind {
            query = query.bind(bind.to_string());
        }
        let rows = query.bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(test_from_row).collect()
    }
}

/// Writes a queued test, its tasks and its event inside `tx`.
pub(super) async fn insert_test_in(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    test: &InferenceTest,
    tasks: &[TestTask],
) -> Result<()> {
    sqlx::query(
            "INSERT INTO tests (id, state, version, schedule_id, env_name, spec, created_at, started_at, ended_at, \
             reason, results, test_dir) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(test.id.to_string())
        .bind(test.state.as_str())
        .bind(test.version)
        .bind(test.schedule_id.map(|s| s.to_string()))
        .bind(&test.env_name)
        .bind(json(&test.spec))
        .bind(test.created_at)
        .bind(test.started_at)
        .bind(test.ended_at)
        .bind(test.reason.as_deref())
        .bind(test.results.as_ref().map(json))
        .bind(test.test_dir.to_string_lossy().into_owned())
        .execute(&mut **tx)
        .await?;
    for task in tasks {
        sqlx::query(
            "INSERT INTO test_tasks (test_id, idx, model, state, timed_out) VALUES ($1, $2, $3, $4, 0)",
        )
        .bind(task.test_id.to_string())
        .bind(task.idx)
        .bind(&task.model)
        .bind(task.record.state.as_str())
        .execute(&mut **tx)
        .await?;
    }
    let message =
        format!("queued: inference test of {} against {}", test.env_name, test.spec.models.join(", "));
    insert_event(&mut **tx, test.id, EventKind::Note, None, None, &message).await?;
    Ok(())
}

#[async_trait]
impl InferenceTestStore for SqlStore {
    async fn insert_test(&self, test: &InferenceTest, tasks: &[TestTask]) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        insert_test_in(&mut tx, test, tasks).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn test(&self, id: Uuid) -> Result<Option<InferenceTest>> {
        let row = sqlx::query(select_tests!("WHERE id = $1"))
            .bind(id.to_string())
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(test_from_row).transpose()
    }

    async fn tests_by_prefix(&self, prefix: &str, limit: i64) -> Result<Vec<InferenceTest>> {
        let Some(range) = IdRange::of(prefix) else { return Ok(Vec::new()) };
        let sql = match super::Store::backend(self) {
            Backend::Sqlite => select_tests!("WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3"),
            Backend::Postgres => select_tests!("WHERE id ~>=~ $1 AND id ~<~ $2 ORDER BY id LIMIT $3"),
        };
        let rows =
            sqlx::query(sql).bind(range.from).bind(range.below).bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(test_from_row).collect()
    }

    async fn list_tests(&self, limit: i64) -> Result<Vec<InferenceTest>> {
        self.query_tests(select_tests!("ORDER BY seq DESC LIMIT $1"), None, limit).await
    }

    async fn tests_in(&self, state: TestState, limit: i64) -> Result<Vec<InferenceTest>> {
        self.query_tests(select_tests!("WHERE state = $1 ORDER BY seq LIMIT $2"), Some(state.as_str()), limit)
            .await
    }

    async fn transition_test(
        &self,
        test: &InferenceTest,
        trigger: TestTrigger,
        reason: Option<&str>,
        results: Option<&serde_json::Value>,
    ) -> Result<InferenceTest> {
        let to = crate::model::inference_test::next(test.state, trigger)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let now = now_millis();
        let started_at = if to == TestState::Running { Some(now) } else { test.started_at };
        let ended_at = if to.is_terminal() { Some(now) } else { test.ended_at };
        let reason = reason.map(str::to_string).or_else(|| test.reason.clone());
        let results = results.cloned().or_else(|| test.results.clone());
        let mut tx = self.pool().begin().await?;
        let updated = sqlx::query(
            "UPDATE tests SET state = $1, version = version + 1, started_at = $2, ended_at = $3, reason = $4, \
             results = $5 WHERE id = $6 AND state = $7 AND version = $8 \
             AND (CAST($9 AS BIGINT) IS NULL OR fence = $9)",
        )
        .bind(to.as_str())
        .bind(started_at)
        .bind(ended_at)
        .bind(reason.as_deref())
        .bind(results.as_ref().map(json))
        .bind(test.id.to_string())
        .bind(test.state.as_str())
        .bind(test.version)
        .bind(self.fence())
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() == 0 {
            return Err(StoreError::TestConflict { id: test.id });
        }
        let message = match &reason {
            Some(reason) => format!("{} -> {to}: {reason}", test.state),
            None => format!("{} -> {to}", test.state),
        };
        insert_event(&mut *tx, test.id, EventKind::Note, None, None, &message).await?;
        let moved = InferenceTest {
            state: to,
            version: test.version + 1,
            started_at,
            ended_at,
            reason,
            results,
            ..test.clone()
        };
        notify_schedule(&mut tx, &moved).await?;
        tx.commit().await?;
        Ok(moved)
    }

    async fn test_tasks(&self, test_id: Uuid) -> Result<Vec<TestTask>> {
        let rows = sqlx::query(
            "SELECT test_id, idx, model, state, shim, process, started_at, ended_at, exit_code, exit_signal, timed_out \
             FROM test_tasks WHERE test_id = $1 ORDER BY idx",
        )
        .bind(test_id.to_string())
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(task_from_row).collect()
    }

    async fn update_task(&self, task: &TestTask, event: Option<&NewEvent>) -> Result<()> {
        let (code, signal) = exit_columns(task.record.exit);
        let mut tx = self.pool().begin().await?;
        let updated = sqlx::query(
            "UPDATE test_tasks SET state = $1, shim = $2, process = $3, started_at = $4, ended_at = $5, exit_code = $6, \
             exit_signal = $7, timed_out = $8 WHERE test_id = $9 AND idx = $10 \
             AND (CAST($11 AS BIGINT) IS NULL OR EXISTS (SELECT 1 FROM tests WHERE tests.id = $9 AND tests.fence = $11))",
        )
        .bind(task.record.state.as_str())
        .bind(task.record.shim.as_ref().map(json))
        .bind(task.record.process.as_ref().map(json))
        .bind(task.record.started_at)
        .bind(task.record.ended_at)
        .bind(code)
        .bind(signal)
        .bind(task.timed_out as i64)
        .bind(task.test_id.to_string())
        .bind(task.idx)
        .bind(self.fence())
        .execute(&mut *tx)
        .await?;
        if let (0, Some(token)) = (updated.rows_affected(), self.fence()) {
            return Err(StoreError::Fenced { id: task.test_id, token });
        }
        if let Some(event) = event {
            insert_event(&mut *tx, task.test_id, event.kind, None, event.stage.as_deref(), &event.message)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn test_counts(&self) -> Result<StateCounts<TestState>> {
        super::sql::count_by_state(
            self.pool(),
            "SELECT state, COUNT(*) AS n FROM tests GROUP BY state ORDER BY state",
        )
        .await
    }
}

/// Writes, in `tx`, what a scheduled test's webhooks are told of its end (nothing for a test
/// that has not ended, or has no schedule, or whose schedule has no webhook).
async fn notify_schedule(tx: &mut sqlx::AnyConnection, test: &InferenceTest) -> Result<()> {
    let Some(schedule) = test.schedule_id.filter(|_| test.state.is_terminal()) else { return Ok(()) };
    let Some(row) = sqlx::query("SELECT name, webhooks FROM schedules WHERE id = $1")
        .bind(schedule.to_string())
        .fetch_optional(&mut *tx)
        .await?
    else {
        return Ok(());
    };
    let name: String = row.try_get("name")?;
    let webhooks: Vec<String> = from_json(&row.try_get::<String, _>("webhooks")?, "schedule webhooks")?;
    for note in crate::webhooks::Payload::of_test(test, &name) {
        super::outbox::insert_notification(tx, &test.id.to_string(), &note, Some(&webhooks)).await?;
    }
    Ok(())
}
