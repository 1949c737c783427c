//! The daemon's WAL checkpoints, off its commit path. SQLite copies the WAL back into the
//! database inside whichever commit passes 1,000 WAL pages, with an fsync: on a store of
//! 100,000 finished runs that put a few milliseconds into one stage exit in fifty. The daemon's
//! connection therefore never checkpoints; its own connection here does, on a timer, while the
//! daemon's commits go on (a passive checkpoint blocks no writer).

use std::path::Path;
use std::time::{Duration, SystemTime};

use sqlx::{AnyConnection, AnyPool, Connection};

use super::{Result, StoreError};

/// How often the WAL is looked at; a drain of 500 runs/s writes about 8 MB of it in this time.
const EVERY: Duration = Duration::from_millis(250);

/// Checkpoints the WAL until dropped (with the daemon lock that holds it).
pub(super) struct WalCheckpointer {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WalCheckpointer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Turns the checkpoints of `pool`'s connection off and starts checkpointing `db` on a
/// connection of its own. A connection the pool opens later (after one was closed mid-
/// transaction) checkpoints inline again, as every command's does: slower, never wrong.
pub(super) async fn start_wal_checkpoints(db: &Path, pool: &AnyPool) -> Result<WalCheckpointer> {
    let target = db.display().to_string();
    let mut conn = AnyConnection::connect(&format!("sqlite://{target}?mode=rw"))
        .await
        .map_err(|source| StoreError::Open { target, source })?;
    sqlx::query("PRAGMA wal_autocheckpoint = 0").execute(pool).await?;
    let wal = super::sqlite::sibling_raw(db, "-wal");
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The WAL as of the last checkpoint: an idle daemon only looks at the file.
        let mut seen: Option<(u64, SystemTime)> = None;
        // Said once, not four times a second (a full disk fails every attempt).
        let mut failing: Option<String> = None;
        loop {
            tick.tick().await;
            let now = std::fs::metadata(&wal).ok().and_then(|m| Some((m.len(), m.modified().ok()?)));
            if now.is_none() || now == seen {
                continue;
            }
            match sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&mut conn).await {
                Ok(_) => (seen, failing) = (now, None),
                Err(err) if failing.as_deref() != Some(&err.to_string()) => {
                    tracing::warn!(wal = %wal.display(), "cannot checkpoint the store: {err}");
                    failing = Some(err.to_string());
                }
                Err(_) => {}
            }
        }
    });
    Ok(WalCheckpointer { task })
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[tokio::test]
    async fn the_daemon_commits_and_another_connection_checkpoints_the_wal() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("lachesis.db");
        let pool = super::super::sqlite::open(&db).await.unwrap();
        let _wal_checkpointer = start_wal_checkpoints(&db, &pool).await.unwrap();
        let inline: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint").fetch_one(&pool).await.unwrap();
        assert_eq!(inline, 0, "the daemon's own commits must not checkpoint");

        // Each write appends its pages to the WAL until a checkpoint has copied them back;
        // after that, writing starts over at the WAL's beginning and the file stops growing.
        sqlx::query("CREATE TABLE filler (data BLOB)").execute(&pool).await.unwrap();
        let wal = super::super::sqlite::sibling_raw(&db, "-wal");
        let wal_len = || std::fs::metadata(&wal).unwrap().len();
        // Generous: on 2 cores loaded by the rest of the suite, the checkpointer's turn can be
        // seconds late (it is what this waits for, not a speed).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let before = wal_len();
            sqlx::query("INSERT INTO filler VALUES (zeroblob(100000))").execute(&pool).await.unwrap();
            if wal_len() == before {
                break;
            }
            assert!(Instant::now() < deadline, "nothing checkpointed: the WAL grew to {} bytes", wal_len());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
