//! PostgreSQL, for a store shared beyond one machine. The daemon lock is a session-level
//! advisory lock held on a connection of its own, so it goes away with the daemon's session.

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Connection, Row};

use super::{DaemonLock, Result, StoreError};

/// Arbitrary but fixed: the advisory lock keys of "a lachesis daemon runs as node N" start here.
const DAEMON_LOCK_KEY: i64 = 0x6c61_6368_6573_6973; // "lachesis"

/// The `NOTIFY` channel that wakes every daemon on the database.
pub(super) const WAKE_CHANNEL: &str = "lachesis_wake";

/// Forwards `NOTIFY lachesis_wake` to `wake` until the receiver is gone; reconnects (sqlx's
/// listener does) when the connection drops.
pub async fn listen_for_wakes(url: &str, wake: impl Fn() -> bool) -> Result<()> {
    let target = crate::secrets::redact_url(url);
    let mut listener = sqlx::postgres::PgListener::connect(url)
        .await
        .map_err(|source| StoreError::Open { target: target.clone(), source })?;
    listener.listen(WAKE_CHANNEL).await?;
    loop {
        match listener.recv().await {
            Ok(_) => {
                if !wake() {
                    return Ok(());
                }
            }
            Err(err) => {
                tracing::warn!("wake-up listener on {target}: {err}; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }
}

/// The advisory lock key of one node id (FNV-1a, so it is the same in every daemon).
fn node_lock_key(node: &str) -> i64 {
    let hash =
        node.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    DAEMON_LOCK_KEY ^ hash as i64
}

/// Connects to (and migrates) the database at `url`.
pub(super) async fn open(url: &str) -> Result<AnyPool> {
    sqlx::any::install_default_drivers();
    let target = crate::secrets::redact_url(url);
    let options: AnyConnectOptions =
        url.parse().map_err(|source| StoreError::Open { target: target.clone(), source })?;
    let pool = AnyPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(std::time::Duration::from_secs(10))
        // No JIT compiling: every query here is a short index read, whose cost estimate (the
        // report's counts each listed run's correlated seeks) can still pass `jit_above_cost`,
        // and compiling one takes 100-200 ms, many times what it runs. Where the setting
        // exists (PostgreSQL 11 and later).
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                use sqlx::Executor;
                conn.execute(
                    "SELECT set_config('jit', 'off', false) WHERE EXISTS (SELECT 1 FROM pg_settings WHERE name = 'jit')",
                )
                .await
                .map(drop)
            })
        })
        .connect_with(options)
        .await
        .map_err(|source| StoreError::Open { target, source })?;
    let schema = super::migrations::Schema::Postgres;
    if !super::sql::schema_is_current(&pool, schema.latest()).await {
        // sqlx takes an advisory lock of its own around PostgreSQL migrations.
        schema.migrator().run(&pool).await?;
    }
    Ok(pool)
}

pub(super) async fn lock_daemon(pool: &AnyPool, node: &str) -> Result<DaemonLock> {
    // Detached from the pool: returning it would hand the lock to whoever borrows it next.
    let mut conn = pool.acquire().await?.detach();
    let row = sqlx::query("SELECT pg_try_advisory_lock($1) AS locked")
        .bind(node_lock_key(node))
        .fetch_one(&mut conn)
        .await?;
    if !row.try_get::<bool, _>("locked")? {
        let _ = conn.close().await;
        return Err(StoreError::Locked(format!(
            "another lachesis daemon is already running as node '{node}' on this PostgreSQL database"
        )));
    }
    Ok(DaemonLock { _held: Box::new(std::sync::Mutex::new(conn)) })
}

/// Wakes every daemon listening on the database.
pub(super) async fn announce(pool: &AnyPool) -> Result<()> {
    sqlx::query("SELECT pg_notify($1, '') AS sent").bind(WAKE_CHANNEL).execute(pool).await?;
    Ok(())
}
