//! Schedules in the store: their rows, the compare-and-set that fires one (with the test it
//! queues, in one transaction), and a schedule's tests.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use super::Result;
use super::inference_tests::insert_test_in;
use super::rows::{corrupt, from_json, json};
use super::sql::SqlStore;
use crate::model::{InferenceTest, Schedule, TestTask};

#[async_trait]
pub trait ScheduleStore: Send + Sync {
    async fn insert_schedule(&self, schedule: &Schedule) -> Result<()>;
    async fn schedules(&self) -> Result<Vec<Schedule>>;
    /// Writes `paused`, `last_fired` and `webhooks`.
    async fn update_schedule(&self, schedule: &Schedule) -> Result<()>;
    /// Moves the schedule's `last_fired` from what `schedule` holds to `fired_at` and queues
    /// `test` with it, in one transaction; false (nothing written) if another daemon fired it
    /// first.
    async fn fire_schedule(
        &self,
        schedule: &Schedule,
        fired_at: i64,
        test: Option<(&InferenceTest, &[TestTask])>,
    ) -> Result<bool>;
    async fn delete_schedule(&self, id: Uuid) -> Result<()>;
    /// A schedule's tests, newest first.
    async fn schedule_tests(&self, schedule: Uuid, limit: i64) -> Result<Vec<InferenceTest>>;
}

fn schedule_from_row(row: &AnyRow) -> Result<Schedule> {
    let id: String = row.try_get("id")?;
    let spec: String = row.try_get("spec")?;
    let webhooks: String = row.try_get("webhooks")?;
    let policy: String = row.try_get("policy")?;
    Ok(Schedule {
        id: Uuid::parse_str(&id).map_err(corrupt)?,
        name: row.try_get("name")?,
        cron: row.try_get("cron")?,
        tz: row.try_get("tz")?,
        spec: from_json(&spec, "schedule spec")?,
        webhooks: from_json(&webhooks, "schedule webhooks")?,
        policy: from_json(&policy, "schedule policy")?,
        paused: row.try_get::<i64, _>("paused")? != 0,
        last_fired: row.try_get("last_fired")?,
        created_at: row.try_get("created_at")?,
    })
}

#[async_trait]
impl ScheduleStore for SqlStore {
    async fn insert_schedule(&self, schedule: &Schedule) -> Result<()> {
        sqlx::query(
            "INSERT INTO schedules (id, name, cron, tz, spec, webhooks, policy, paused, last_fired, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(schedule.id.to_string())
        .bind(&schedule.name)
        .bind(&schedule.cron)
        .bind(schedule.tz.as_deref())
        .bind(json(&schedule.spec))
        .bind(json(&schedule.webhooks))
        .bind(json(&schedule.policy))
        .bind(schedule.paused as i64)
        .bind(schedule.last_fired)
        .bind(schedule.created_at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn schedules(&self) -> Result<Vec<Schedule>> {
        let rows = sqlx::query(
            "SELECT id, name, cron, tz, spec, webhooks, policy, paused, last_fired, created_at FROM schedules ORDER BY name",
        )
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(schedule_from_row).collect()
    }

    async fn update_schedule(&self, schedule: &Schedule) -> Result<()> {
        sqlx::query("UPDATE schedules SET paused = $1, last_fired = $2, webhooks = $3 WHERE id = $4")
            .bind(schedule.paused as i64)
            .bind(schedule.last_fired)
            .bind(json(&schedule.webhooks))
            .bind(schedule.id.to_string())
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn fire_schedule(
        &self,
        schedule: &Schedule,
        fired_at: i64,
        test: Option<(&InferenceTest, &[TestTask])>,
    ) -> Result<bool> {
        let mut tx = self.pool().begin().await?;
        // Compare-and-set on the last firing: of several daemons ticking together, one fires.
        let moved = sqlx::query("UPDATE schedules SET last_fired = $1 WHERE id = $2 AND last_fired = $3")
            .bind(fired_at)
            .bind(schedule.id.to_string())
            .bind(schedule.last_fired)
            .execute(&mut *tx)
            .await?;
        if moved.rows_affected() == 0 {
            return Ok(false);
        }
        if let Some((test, tasks)) = test {
            insert_test_in(&mut tx, test, tasks).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn delete_schedule(&self, id: Uuid) -> Result<()> {
        sqlx::query("DELETE FROM schedules WHERE id = $1").bind(id.to_string()).execute(self.pool()).await?;
        Ok(())
    }

    async fn schedule_tests(&self, schedule: Uuid, limit: i64) -> Result<Vec<InferenceTest>> {
        let id = schedule.to_string();
        self.query_tests(
            concat!(select_tests_sql!(), "WHERE schedule_id = $1 ORDER BY seq DESC LIMIT $2"),
            Some(&id),
            limit,
        )
        .await
    }
}
