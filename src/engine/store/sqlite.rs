//! The embedded default: one SQLite file in WAL mode, so the daemon and CLI processes can read
//! while one writes, with a busy timeout so concurrent writers wait instead of failing.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};

use super::{DaemonLock, Result, StoreError};

const PRAGMAS: &str = "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
     PRAGMA busy_timeout = 15000; PRAGMA foreign_keys = ON;";

/// Opens (creating and migrating if needed) the database file at `path`.
pub(super) async fn open(path: &Path) -> Result<AnyPool> {
    sqlx::any::install_default_drivers();
    let io_err = |source| StoreError::Io { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err)?;
    }
    private_files(path).map_err(io_err)?;
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let target = path.display().to_string();
    let options: AnyConnectOptions =
        url.parse().map_err(|source| StoreError::Open { target: target.clone(), source })?;
    let pool = AnyPoolOptions::new()
        .max_connections(1)
        // An embedded file has no far end to hang up: the ping sqlx makes before each acquire
        // would only be one more round trip to its worker thread for every statement.
        .test_before_acquire(false)
        .after_connect(|conn, _meta| {
            Box::pin(async move { conn.execute(sqlx::raw_sql(PRAGMAS)).await.map(drop) })
        })
        // On a full disk SQLite may roll a transaction back itself; sqlx's ROLLBACK then fails
        // and it still counts the connection as in a transaction, so every later "commit" would
        // only release a savepoint of it. Such a connection is closed, not reused.
        .after_release(|conn, _meta| {
            use sqlx::Connection;
            Box::pin(async move { Ok(!conn.is_in_transaction()) })
        })
        .connect_with(options)
        .await
        .map_err(|source| StoreError::Open { target, source })?;

    let schema = super::migrations::Schema::Sqlite;
    if super::sql::schema_is_current(&pool, schema.latest()).await {
        return Ok(pool);
    }
    // sqlx does not serialise migrations on SQLite: two processes opening a fresh home at once
    // would both try to create the tables. A file lock makes them take turns.
    let migrate_lock = sibling(path, "migrate.lock");
    let file = OpenOptions::new().create(true).append(true).open(&migrate_lock).map_err(io_err)?;
    flock(&file, FlockOperation::LockExclusive).map_err(|e| io_err(e.into()))?;
    schema.migrator().run(&pool).await?;
    drop(file);

    Ok(pool)
}

/// Creates the database file 0600 before SQLite opens it (SQLite gives its -wal and -shm files
/// the database's mode), and makes 0600 any of the three an older version left readable.
fn private_files(db: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    OpenOptions::new().create(true).append(true).mode(0o600).open(db)?;
    for file in [db.to_path_buf(), sibling_raw(db, "-wal"), sibling_raw(db, "-shm")] {
        if let Ok(meta) = std::fs::metadata(&file)
            && meta.permissions().mode() & 0o077 != 0
        {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

pub(super) fn sibling_raw(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// The daemon lock file of the database at `db`.
fn lock_path(db: &Path) -> PathBuf {
    sibling(db, "daemon.lock")
}

fn sibling(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{suffix}"));
    db.with_file_name(name)
}

/// An exclusive `flock` on a file beside the database, released by the kernel when the daemon
/// dies, holding the owner's pid for the message a second daemon prints. While it is held, the
/// WAL is checkpointed off the daemon's commits (`checkpoint`).
pub(super) async fn lock_daemon(db: &Path, pool: &AnyPool) -> Result<DaemonLock> {
    let file = lock_file(&lock_path(db))?;
    let wal_checkpointer = super::wal::start_wal_checkpoints(db, pool).await?;
    Ok(DaemonLock { _held: Box::new((file, wal_checkpointer)) })
}

fn lock_file(lock_path: &Path) -> Result<File> {
    let io_err = |source| StoreError::Io { path: lock_path.to_path_buf(), source };
    let mut file: File = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(lock_path)
        .map_err(io_err)?;
    if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        let holder = holder.trim();
        let who = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
        return Err(StoreError::Locked(format!(
            "another lachesis daemon is already running on {}{who}",
            lock_path.with_extension("").display()
        )));
    }
    file.set_len(0).map_err(io_err)?;
    file.rewind().map_err(io_err)?;
    write!(file, "{}", std::process::id()).map_err(io_err)?;
    Ok(file)
}
