//! Scratch PostgreSQL databases for tests and benchmarks (compiled only for them, `testing`):
//! one fresh database per test on the test server, so that no test sees another's rows.

use uuid::Uuid;

/// The server tests and benches make scratch databases on; `LACHESIS_TEST_POSTGRES` overrides.
fn postgres_admin_url() -> String {
    std::env::var("LACHESIS_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/postgres".into())
}

/// A fresh database for one test, or None (with a message) when PostgreSQL is not reachable
/// and the run does not require it (`LACHESIS_REQUIRE_POSTGRES=1` turns the skip into a failure).
pub async fn fresh_postgres() -> Option<String> {
    use sqlx::Connection;
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
