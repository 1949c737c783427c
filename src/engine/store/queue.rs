//! Reads of a deep queue that cost what they show: a pending run's place counted on the queue
//! index, a page of the queue after a run (keyset by priority and submission), a page of runs.

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::Result;
use super::rows::run_from_row;
use super::sql::SqlStore;
use crate::model::{Run, RunPage};

#[async_trait]
pub trait QueueStore: Send + Sync {
    /// A pending run's place in the claim order (1 is claimed next), counting only the runs
    /// ahead of it on the `(state, priority, seq)` index; `None` when it is not pending.
    async fn queue_position(&self, id: Uuid) -> Result<Option<i64>>;
    /// Up to `limit` pending runs in claim order, from the head or after the pending run `after`.
    async fn queue_page(&self, after: Option<Uuid>, limit: i64) -> Result<Vec<Run>>;
    /// One page of the runs table, newest first.
    async fn runs_page(&self, page: &RunPage<'_>) -> Result<Vec<Run>>;
}

const POSITION: &str = "SELECT COUNT(*) AS n FROM runs me JOIN runs r ON r.state = 'pending' \
     AND (r.priority > me.priority OR (r.priority = me.priority AND r.seq <= me.seq)) \
     WHERE me.id = $1 AND me.state = 'pending'";

const QUEUE_HEAD: &str =
    concat!(select_runs_sql!(), "WHERE state = 'pending' ORDER BY priority DESC, seq LIMIT $1");
// The cursor run's key is read in the query: a cursor that left the queue yields an empty page.
const QUEUE_AFTER: &str = concat!(
    select_runs_sql!(),
    "WHERE state = 'pending' AND EXISTS (SELECT 1 FROM runs me WHERE me.id = $1 AND me.state = 'pending' ",
    "AND (runs.priority < me.priority OR (runs.priority = me.priority AND runs.seq > me.seq))) ",
    "ORDER BY priority DESC, seq LIMIT $2"
);

const PAGE_ALL: &str = concat!(select_runs_sql!(), "ORDER BY seq DESC LIMIT $1 OFFSET $2");
const PAGE_STATE: &str = concat!(select_runs_sql!(), "WHERE state = $3 ORDER BY seq DESC LIMIT $1 OFFSET $2");
const PAGE_WORKFLOW: &str =
    concat!(select_runs_sql!(), "WHERE workflow = $3 ORDER BY seq DESC LIMIT $1 OFFSET $2");
const PAGE_BOTH: &str =
    concat!(select_runs_sql!(), "WHERE state = $3 AND workflow = $4 ORDER BY seq DESC LIMIT $1 OFFSET $2");

#[async_trait]
impl QueueStore for SqlStore {
    async fn queue_position(&self, id: Uuid) -> Result<Option<i64>> {
        let row = sqlx::query(POSITION).bind(id.to_string()).fetch_one(self.pool()).await?;
        let ahead: i64 = row.try_get("n")?;
        // The count includes the run itself: zero means it was not pending.
        Ok((ahead > 0).then_some(ahead))
    }

    async fn queue_page(&self, after: Option<Uuid>, limit: i64) -> Result<Vec<Run>> {
        let rows = match after {
            None => sqlx::query(QUEUE_HEAD).bind(limit).fetch_all(self.pool()).await?,
            Some(id) => {
                sqlx::query(QUEUE_AFTER).bind(id.to_string()).bind(limit).fetch_all(self.pool()).await?
            }
        };
        rows.iter().map(run_from_row).collect()
    }

    async fn runs_page(&self, page: &RunPage<'_>) -> Result<Vec<Run>> {
        let sql = match (page.state, page.workflow) {
            (None, None) => PAGE_ALL,
            (Some(_), None) => PAGE_STATE,
            (None, Some(_)) => PAGE_WORKFLOW,
            (Some(_), Some(_)) => PAGE_BOTH,
        };
        let mut query = sqlx::query(sql).bind(page.limit).bind(page.offset);
        if let Some(state) = page.state {
            query = query.bind(state.as_str());
        }
        if let Some(workflow) = page.workflow {
            query = query.bind(workflow.to_string());
        }
        let rows = query.fetch_all(self.pool()).await?;
        rows.iter().map(run_from_row).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page of one workflow's runs walks the `(workflow, seq)` index from its newest run: it
    /// reads the page, not the other workflows' runs, and sorts nothing apart.
    #[tokio::test]
    async fn a_page_of_one_workflow_reads_its_index() {
        let dir = tempfile::tempdir().unwrap();
        let location = crate::settings::StoreLocation::Sqlite(dir.path().join("lachesis.db"));
        let store = crate::engine::store::open(&location).await.unwrap();
        let details = crate::engine::store::tests::sqlite_plan(&store, PAGE_WORKFLOW).await;
        assert!(details.iter().any(|d| d.contains("USING INDEX runs_by_workflow_seq")), "{details:?}");
        assert!(!details.iter().any(|d| d.contains("TEMP B-TREE")), "sorted apart: {details:?}");
    }
}
