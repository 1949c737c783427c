//! The store's conformance suites: every rule the service and the reconciler rely on, run
//! against SQLite and against the real PostgreSQL (a fresh database per suite).

mod attempts;
mod conformance;
mod nodes;
mod queue;
mod report;

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

pub(super) use crate::engine::service::fresh_postgres;

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
