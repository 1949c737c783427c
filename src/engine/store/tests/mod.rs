//! The store's conformance suites: every rule the service and the reconciler rely on, run
//! against SQLite and against the real PostgreSQL (a fresh database per suite).

mod conformance;
mod nodes;
mod queue;
mod report;

use std::time::{Duration, Instant};

use sqlx::Connection;
use uuid::Uuid;

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

/// The server to create test databases on; `LACHESIS_TEST_POSTGRES` overrides.
fn postgres_admin_url() -> String {
    std::env::var("LACHESIS_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/postgres".into())
}

/// A fresh database for one test, or None (with a message) when PostgreSQL is not reachable
/// and the run does not require it (`LACHESIS_REQUIRE_POSTGRES=1` turns the skip into a failure).
pub(super) async fn fresh_postgres() -> Option<String> {
    let admin = postgres_admin_url();
    let mut conn = match sqlx::postgres::PgConnection::connect(&admin).await {
        Ok(conn) => conn,
        Err(err) => {
            assert!(
                std::env::var("LACHESIS_REQUIRE_POSTGRES").is_err(),
                "PostgreSQL at {admin} is required but unreachable: {err}"
            );
            eprintln!("skipped: PostgreSQL at {admin} is unreachable ({err})");
            return None;
        }
    };
    let name = format!("lachesis_test_{}", Uuid::new_v4().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await.unwrap();
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(base, _)| base);
    Some(format!("{base}/{name}"))
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
