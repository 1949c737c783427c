//! Retention: finished runs and tests that ended long enough ago are forgotten, with every row
//! that belongs to them (stages, events, snapshots, tasks). Their directories are the service's.

use std::path::PathBuf;

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::rows::corrupt;
use super::sql::SqlStore;
use super::{Result, Store, StoreError};
use crate::model::Millis;

/// A finished run or test the store can forget, and the directory that held its files.
#[derive(Clone, Debug)]
pub struct Expired {
    pub id: Uuid,
    pub dir: PathBuf,
}

#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Up to `limit` runs that ended before `before` (stopped, completed or failed, no stage
    /// still live), oldest first; only those `node` ran when given.
    async fn expired_runs(&self, before: Millis, node: Option<&str>, limit: i64) -> Result<Vec<Expired>>;
    /// Up to `limit` tests that ended before `before` (no task still live), oldest first.
    async fn expired_tests(&self, before: Millis, limit: i64) -> Result<Vec<Expired>>;
    /// Deletes these runs with their stages, events and snapshots, in one transaction.
    async fn forget_runs(&self, ids: &[Uuid]) -> Result<()>;
    /// Deletes these tests with their tasks and events, in one transaction.
    async fn forget_tests(&self, ids: &[Uuid]) -> Result<()>;
    /// Gives the database's free pages back to the file system where it can do so cheaply
    /// (SQLite: truncates the write-ahead log).
    async fn compact(&self) -> Result<()>;
}

const EXPIRED_RUNS: &str = concat!(
    "SELECT id, run_dir AS dir FROM runs \
     WHERE state IN ('stopped', 'completed', 'failed') AND ended_at < $1 \
     AND (CAST($2 AS TEXT) IS NULL OR node = $2) \
     AND NOT EXISTS (SELECT 1 FROM stages WHERE stages.run_id = runs.id AND stages.state IN (",
    live_process_states!(),
    ")) ORDER BY ended_at LIMIT $3"
);

const EXPIRED_TESTS: &str = concat!(
    "SELECT id, test_dir AS dir FROM tests \
     WHERE state IN ('succeeded', 'regressed', 'failed', 'cancelled') AND ended_at < $1 \
     AND NOT EXISTS (SELECT 1 FROM test_tasks WHERE test_tasks.test_id = tests.id AND test_tasks.state IN (",
    live_process_states!(),
    ")) ORDER BY ended_at LIMIT $2"
);

fn expired_from_rows(rows: &[sqlx::any::AnyRow]) -> Result<Vec<Expired>> {
    rows.iter()
        .map(|row| {
            let id: String = row.try_get("id")?;
            let dir: String = row.try_get("dir")?;
            let id = Uuid::parse_str(&id).map_err(|e| corrupt(format!("id {id}: {e}")))?;
            Ok(Expired { id, dir: PathBuf::from(dir) })
        })
        .collect()
}

/// `DELETE FROM <table> WHERE <column> IN ($1, …, $n)`. Only the placeholders vary: the ids
/// are bound, never spliced.
fn delete_in(table: &str, column: &str, n: usize) -> String {
    let marks: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
    format!("DELETE FROM {table} WHERE {column} IN ({})", marks.join(", "))
}

impl SqlStore {
    /// Deletes the rows of `ids` from each (table, column), children first, in one transaction.
    async fn delete_all(&self, ids: &[Uuid], tables: &[(&str, &str)]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        let mut tx = self.pool().begin().await?;
        for (table, column) in tables {
            let sql = delete_in(table, column, ids.len());
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for id in &ids {
                query = query.bind(id.as_str());
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

#[async_trait]
impl RetentionStore for SqlStore {
    async fn expired_runs(&self, before: Millis, node: Option<&str>, limit: i64) -> Result<Vec<Expired>> {
        let rows =
            sqlx::query(EXPIRED_RUNS).bind(before).bind(node).bind(limit).fetch_all(self.pool()).await?;
        expired_from_rows(&rows)
    }

    async fn expired_tests(&self, before: Millis, limit: i64) -> Result<Vec<Expired>> {
        let rows = sqlx::query(EXPIRED_TESTS).bind(before).bind(limit).fetch_all(self.pool()).await?;
        expired_from_rows(&rows)
    }

    async fn forget_runs(&self, ids: &[Uuid]) -> Result<()> {
        // Stages first: they reference the run row.
        let tables = [
            ("stages", "run_id"),
            ("stage_attempts", "run_id"),
            ("events", "run_id"),
            ("snapshots", "run_id"),
            ("progress", "run_id"),
            ("checkpoints", "run_id"),
            ("metric_values", "run_id"),
            ("run_deps", "run_id"),
            ("sweep_members", "run_id"),
            ("sweep_exploits", "run_id"),
            ("runs", "id"),
        ];
        self.delete_all(ids, &tables).await
    }

    async fn forget_tests(&self, ids: &[Uuid]) -> Result<()> {
        self.delete_all(ids, &[("test_tasks", "test_id"), ("events", "run_id"), ("tests", "id")]).await
    }

    async fn compact(&self) -> Result<()> {
        if self.backend() == super::Backend::Sqlite {
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(self.pool())
                .await
                .map_err(StoreError::Database)?;
        }
        Ok(())
    }
}
