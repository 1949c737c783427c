//! Failure notices for runs a dependency failed. Such a run fails inside another run's end
//! (`dependencies::settle_dependents`), in whatever process made that end (a daemon, or a
//! `run stop` of a pending run in a CLI): the daemon finds them afterwards in the event log,
//! where that move is the only `pending → failed`, and takes each run's notice once, by an event
//! written under the run's row lock, so two daemons sharing PostgreSQL never both post it.

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::events::insert_event;
use super::rows::{corrupt, run_from_row};
use super::sql::SqlStore;
use super::{Result, Store};
use crate::model::{EventKind, Run, RunState};

/// The event that says a run's failure notice was taken (and by whom follows it).
const NOTICE_TAKEN: &str = "failure notice handed to webhooks";

#[async_trait]
pub trait NoticeStore: Send + Sync {
    /// Runs failed by a dependency, by their `pending → failed` event: (event id, run), event
    /// ids above `after` and at most `upto`, oldest first, at most `limit` (a range of the
    /// events' key).
    async fn dependency_failures(&self, after: i64, upto: i64, limit: i64) -> Result<Vec<(i64, Uuid)>>;
    /// The failed run `id` with its notice taken now, or None when it was taken before (or the
    /// run is gone, or not failed).
    async fn take_failure_notice(&self, id: Uuid) -> Result<Option<Run>>;
}

#[async_trait]
impl NoticeStore for SqlStore {
    async fn dependency_failures(&self, after: i64, upto: i64, limit: i64) -> Result<Vec<(i64, Uuid)>> {
        let rows = sqlx::query(
            "SELECT id, run_id FROM events WHERE id > $1 AND id <= $2 AND kind = 'state' \
             AND from_state = 'pending' AND to_state = 'failed' ORDER BY id LIMIT $3",
        )
        .bind(after)
        .bind(upto)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| {
                let run: String = row.try_get("run_id")?;
                let run = Uuid::parse_str(&run).map_err(|e| corrupt(format!("run id {run}: {e}")))?;
                Ok((row.try_get("id")?, run))
            })
            .collect()
    }

    async fn take_failure_notice(&self, id: Uuid) -> Result<Option<Run>> {
        let read = match self.backend().locks_rows() {
            true => concat!(select_runs_sql!(), "WHERE id = $1 FOR UPDATE"),
            false => concat!(select_runs_sql!(), "WHERE id = $1"),
        };
        let mut tx = self.pool().begin().await?;
        let Some(row) = sqlx::query(read).bind(id.to_string()).fetch_optional(&mut *tx).await? else {
            return Ok(None);
        };
        let run = run_from_row(&row)?;
        let taken =
            sqlx::query("SELECT 1 AS taken FROM events WHERE run_id = $1 AND kind = 'note' AND message = $2")
                .bind(id.to_string())
                .bind(NOTICE_TAKEN)
                .fetch_optional(&mut *tx)
                .await?;
        if run.state != RunState::Failed || taken.is_some() {
            return Ok(None);
        }
        insert_event(&mut *tx, id, EventKind::Note, None, None, NOTICE_TAKEN).await?;
        tx.commit().await?;
        Ok(Some(run))
    }
}
