//! The store's conformance suites: every rule the service and the reconciler rely on, run
//! against SQLite and against the real PostgreSQL, one test per scenario and backend, each on a
//! fresh store, so that one failure hides no other.

use std::sync::Arc;

/// One `#[tokio::test]` per scenario and backend, each on a fresh store: `sqlite::NAME` and
/// `postgres::NAME` beside the scenarios. A scenario takes `&dyn Store`, or `Arc<dyn Store>` when
/// it shares the store with tasks of its own.
macro_rules! on_both_backends {
    ($($scenario:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $scenario() {
                    let (_dir, store) = $crate::engine::store::tests::sqlite_store().await;
                    super::$scenario($crate::engine::store::tests::Given::given(&store)).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $scenario() {
                    let Some(store) = $crate::engine::store::tests::postgres_store().await else {
                        return;
                    };
                    super::$scenario($crate::engine::store::tests::Given::given(&store)).await;
                }
            )+
        }
    };
}

mod attempts;
mod conformance;
mod dependencies;
mod metrics;
mod nodes;
mod old_stores;
mod outbox;
mod preemptions;
mod prefixes;
mod queue;
mod report;
mod sweep_exploits;
mod sweep_resumes;
mod sweeps;
mod typed_units;

use std::time::{Duration, Instant};

/// How SQLite would run `sql` on `store`: each step's `detail` (`SEARCH runs USING INDEX …`), for
/// the tests that hold a query to its index. Its parameters stay unbound: a plan is not a run.
pub(super) async fn sqlite_plan(store: &super::sql::SqlStore, sql: &str) -> Vec<String> {
    use sqlx::Row;
    sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
        .fetch_all(store.pool())
        .await
        .unwrap()
        .iter()
        .map(|row| row.try_get::<String, _>("detail").unwrap())
        .collect()
}

pub(super) use crate::engine::store::fresh_postgres;

/// A fresh SQLite store, in a directory that lives as long as the returned guard.
async fn sqlite_store() -> (tempfile::TempDir, Arc<dyn super::Store>) {
    let dir = tempfile::tempdir().unwrap();
    let location = crate::settings::StoreLocation::Sqlite(dir.path().join("lachesis.db"));
    let store = super::open(&location).await.unwrap();
    (dir, Arc::new(store))
}

/// A store on a fresh database of the test server; None when it is unreachable and not required.
async fn postgres_store() -> Option<Arc<dyn super::Store>> {
    let url = fresh_postgres().await?;
    let store = super::open(&crate::settings::StoreLocation::Postgres(url)).await.unwrap();
    Some(Arc::new(store))
}

/// What a scenario takes from the store its test opened.
trait Given<'a> {
    fn given(store: &'a Arc<dyn super::Store>) -> Self;
}

impl<'a> Given<'a> for &'a dyn super::Store {
    fn given(store: &'a Arc<dyn super::Store>) -> Self {
        &**store
    }
}

impl Given<'_> for Arc<dyn super::Store> {
    fn given(store: &Arc<dyn super::Store>) -> Self {
        Arc::clone(store)
    }
}

/// Polls `check` until it returns Some, or panics with `what` after `timeout`.
async fn wait_for<T>(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The names inside an SQL list such as `'a', 'b'`.
fn sql_list(list: &str) -> Vec<String> {
    list.split(',').map(|name| name.trim().trim_matches('\'').to_string()).collect()
}

#[test]
fn the_sql_state_lists_are_the_models() {
    use crate::model::{ProcessState, RunState};
    let in_flight: Vec<String> =
        RunState::ALL.iter().filter(|s| s.is_in_flight()).map(|s| s.as_str().to_string()).collect();
    assert_eq!(sql_list(in_flight_states!()), in_flight);
    let live: Vec<String> =
        ProcessState::ALL.iter().filter(|s| s.is_live()).map(|s| s.as_str().to_string()).collect();
    assert_eq!(sql_list(live_process_states!()), live);
}
