//! What kind of failure a store error is, by its kind, never by its words: SQLite's result
//! code, PostgreSQL's SQLSTATE, the errno from the filesystem or the socket. The reconciler
//! holds a write that failed with a fault and says which one (see `reconciler/held.rs`).

use serde::{Deserialize, Serialize};

use super::StoreError;

/// Why the store cannot take a write now. A write that meets any of them is held and tried
/// again, since what it records is a fact; the kind says whether waiting is enough.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fault {
    /// The disk under the store is full: the write lands once space returns.
    Full,
    /// The database cannot be reached or is busy (refused or dropped connections, no free
    /// connection, a lock held elsewhere, a server shutting down): the write lands once it
    /// answers again.
    Away,
    /// The store refuses the write for a reason that does not pass by itself (read-only,
    /// permission denied, a missing table, a damaged file): someone must act.
    Lasting,
}

impl Fault {
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::Full => "full",
            Fault::Away => "away",
            Fault::Lasting => "lasting",
        }
    }

    /// What it means, in words for a warning or a health report.
    pub fn meaning(self) -> &'static str {
        match self {
            Fault::Full => "the store's disk is full",
            Fault::Away => "the database is away",
            Fault::Lasting => "the store refuses writes until someone acts",
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// SQLite's primary result codes (extended codes keep them in the low byte).
mod sqlite {
    pub const ERROR: i64 = 1; // "no such table", and other statement errors
    pub const PERM: i64 = 3;
    pub const BUSY: i64 = 5;
    pub const LOCKED: i64 = 6;
    pub const NOMEM: i64 = 7;
    pub const READONLY: i64 = 8;
    pub const INTERRUPT: i64 = 9;
    pub const IOERR: i64 = 10;
    pub const CORRUPT: i64 = 11;
    pub const FULL: i64 = 13;
    pub const CANTOPEN: i64 = 14;
    pub const PROTOCOL: i64 = 15;
    pub const SCHEMA: i64 = 17;
    pub const AUTH: i64 = 23;
    pub const NOTADB: i64 = 26;
}

impl StoreError {
    /// The fault behind this error, or None for an error that is a decision (a conflict, a
    /// fenced or illegal move, a corrupt row, an unmet dependency), which waiting never changes.
    pub fn fault(&self) -> Option<Fault> {
        match self {
            StoreError::Database(err) | StoreError::Open { source: err, .. } => Some(sqlx_fault(err)),
            StoreError::Io { source, .. } => Some(io_fault(source)),
            StoreError::Locked(_) => Some(Fault::Away),
            StoreError::Migrate(_)
            | StoreError::Conflict { .. }
            | StoreError::Illegal(_)
            | StoreError::IllegalProcess(_)
            | StoreError::TestConflict { .. }
            | StoreError::Corrupt(_)
            | StoreError::LeaseLost { .. }
            | StoreError::Fenced { .. }
            | StoreError::UnsupportedUrl(_)
            | StoreError::Unmet { .. } => None,
        }
    }

    /// Whether this error says the store's disk is full (the write can land once space returns).
    pub fn is_storage_full(&self) -> bool {
        self.fault() == Some(Fault::Full)
    }
}

fn sqlx_fault(err: &sqlx::Error) -> Fault {
    use sqlx::Error as E;
    match err {
        E::Database(db) => {
            let code = db.code().unwrap_or_default();
            if db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>().is_some() {
                postgres_fault(&code)
            } else {
                code.parse::<i64>().map_or(Fault::Lasting, sqlite_fault)
            }
        }
        E::Io(io) => io_fault(io),
        // Reaching the server: a socket that broke, no free connection in time, a worker gone.
        E::Tls(_) | E::Protocol(_) | E::PoolTimedOut | E::PoolClosed | E::WorkerCrashed | E::BeginFailed => {
            Fault::Away
        }
        // What the store asked of the database no longer fits it (a dropped column, a bad
        // setting): waiting never changes that.
        _ => Fault::Lasting,
    }
}

/// An SQLite result code (as sqlx gives it: the extended code, in decimal).
fn sqlite_fault(code: i64) -> Fault {
    match code & 0xff {
        sqlite::FULL => Fault::Full,
        sqlite::BUSY
        | sqlite::LOCKED
        | sqlite::NOMEM
        | sqlite::INTERRUPT
        | sqlite::PROTOCOL
        | sqlite::SCHEMA => Fault::Away,
        sqlite::ERROR
        | sqlite::PERM
        | sqlite::READONLY
        | sqlite::IOERR
        | sqlite::CORRUPT
        | sqlite::CANTOPEN
        | sqlite::AUTH
        | sqlite::NOTADB => Fault::Lasting,
        _ => Fault::Lasting,
    }
}

/// A PostgreSQL SQLSTATE.
fn postgres_fault(sqlstate: &str) -> Fault {
    match sqlstate {
        "53100" => Fault::Full, // disk_full
        // database_dropped is a shutdown that never ends.
        "57P04" => Fault::Lasting,
        // The server refuses for now: resources (memory, connections), shutting down or
        // starting, a statement timeout, a lock or a serialization conflict.
        "57014" | "55P03" => Fault::Away,
        _ if ["08", "53", "57", "40"].iter().any(|class| sqlstate.starts_with(class)) => Fault::Away,
        // read_only_sql_transaction, insufficient_privilege, undefined_table, an unknown
        // database, authorization, the server's own I/O, and the rest.
        _ => Fault::Lasting,
    }
}

/// An errno from the filesystem (SQLite, the claims ledger) or a socket (PostgreSQL).
fn io_fault(err: &std::io::Error) -> Fault {
    use std::io::ErrorKind as K;
    if crate::launch::space::is_out_of_space(err) {
        return Fault::Full;
    }
    match err.kind() {
        K::ConnectionRefused
        | K::ConnectionReset
        | K::ConnectionAborted
        | K::NotConnected
        | K::BrokenPipe
        | K::TimedOut
        | K::Interrupted
        | K::WouldBlock
        | K::UnexpectedEof
        | K::HostUnreachable
        | K::NetworkUnreachable
        | K::NetworkDown
        | K::AddrNotAvailable
        | K::ResourceBusy
        | K::OutOfMemory => Fault::Away,
        // Permission denied, a read-only filesystem, a missing file, an I/O error.
        _ => Fault::Lasting,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_codes_are_told_by_their_primary_code() {
        for (code, fault) in [
            (13, Fault::Full),      // SQLITE_FULL
            (5, Fault::Away),       // SQLITE_BUSY: "database is locked"
            (261, Fault::Away),     // SQLITE_BUSY_RECOVERY
            (517, Fault::Away),     // SQLITE_BUSY_SNAPSHOT
            (6, Fault::Away),       // SQLITE_LOCKED
            (17, Fault::Away),      // SQLITE_SCHEMA
            (8, Fault::Lasting),    // SQLITE_READONLY: a read-only file
            (1032, Fault::Lasting), // SQLITE_READONLY_DBMOVED
            (1, Fault::Lasting),    // SQLITE_ERROR: "no such table", whatever it says
            (3, Fault::Lasting),    // SQLITE_PERM
            (14, Fault::Lasting),   // SQLITE_CANTOPEN
            (10, Fault::Lasting),   // SQLITE_IOERR
            (11, Fault::Lasting),   // SQLITE_CORRUPT
            (26, Fault::Lasting),   // SQLITE_NOTADB
            (2067, Fault::Lasting), // SQLITE_CONSTRAINT_UNIQUE
            (0x30d, Fault::Full),   // an extended code of SQLITE_FULL's
        ] {
            assert_eq!(sqlite_fault(code), fault, "{code}");
        }
    }

    #[test]
    fn postgres_sqlstates_are_told_by_code_and_class() {
        for (code, fault) in [
            ("53100", Fault::Full),    // disk_full
            ("53200", Fault::Away),    // out_of_memory
            ("53300", Fault::Away),    // too_many_connections
            ("08006", Fault::Away),    // connection_failure
            ("08001", Fault::Away),    // sqlclient_unable_to_establish_sqlconnection
            ("57P01", Fault::Away),    // admin_shutdown
            ("57P03", Fault::Away),    // cannot_connect_now
            ("57014", Fault::Away),    // query_canceled (statement timeout)
            ("40001", Fault::Away),    // serialization_failure
            ("40P01", Fault::Away),    // deadlock_detected
            ("55P03", Fault::Away),    // lock_not_available
            ("57P04", Fault::Lasting), // database_dropped
            ("25006", Fault::Lasting), // read_only_sql_transaction
            ("42501", Fault::Lasting), // insufficient_privilege
            ("42P01", Fault::Lasting), // undefined_table
            ("3D000", Fault::Lasting), // invalid_catalog_name
            ("28P01", Fault::Lasting), // invalid_password
            ("58030", Fault::Lasting), // io_error
            ("23505", Fault::Lasting), // unique_violation
            ("", Fault::Lasting),
        ] {
            assert_eq!(postgres_fault(code), fault, "{code}");
        }
    }

    #[test]
    fn errnos_are_told_by_their_kind() {
        let io = |errno| std::io::Error::from_raw_os_error(errno);
        for (errno, fault) in [
            (libc::ENOSPC, Fault::Full),
            (libc::EDQUOT, Fault::Full),
            (libc::ECONNREFUSED, Fault::Away),
            (libc::ECONNRESET, Fault::Away),
            (libc::EPIPE, Fault::Away),
            (libc::ETIMEDOUT, Fault::Away),
            (libc::EHOSTUNREACH, Fault::Away),
            (libc::EACCES, Fault::Lasting),
            (libc::EPERM, Fault::Lasting),
            (libc::EROFS, Fault::Lasting),
            (libc::ENOENT, Fault::Lasting),
            (libc::EIO, Fault::Lasting),
        ] {
            assert_eq!(io_fault(&io(errno)), fault, "errno {errno}");
        }
    }

    #[test]
    fn each_store_error_has_its_fault_or_none() {
        let io =
            |errno| StoreError::Io { path: "/x".into(), source: std::io::Error::from_raw_os_error(errno) };
        let sqlx_io = |errno| StoreError::Database(sqlx::Error::Io(std::io::Error::from_raw_os_error(errno)));
        let id = uuid::Uuid::nil();
        let table: Vec<(StoreError, Option<Fault>)> = vec![
            (io(libc::ENOSPC), Some(Fault::Full)),
            (io(libc::EACCES), Some(Fault::Lasting)),
            (sqlx_io(libc::ENOSPC), Some(Fault::Full)),
            (sqlx_io(libc::ECONNREFUSED), Some(Fault::Away)),
            (StoreError::Database(sqlx::Error::PoolTimedOut), Some(Fault::Away)),
            (StoreError::Database(sqlx::Error::PoolClosed), Some(Fault::Away)),
            (StoreError::Database(sqlx::Error::Protocol("eof".into())), Some(Fault::Away)),
            (StoreError::Database(sqlx::Error::ColumnNotFound("x".into())), Some(Fault::Lasting)),
            (StoreError::Database(sqlx::Error::RowNotFound), Some(Fault::Lasting)),
            (StoreError::Locked("the database is locked".into()), Some(Fault::Away)),
            // Words are not the kind: a message that says "full" is not a full disk.
            (StoreError::Locked("the queue is full".into()), Some(Fault::Away)),
            (StoreError::Corrupt("disk full".into()), None),
            (StoreError::Conflict { id, expected: crate::model::RunState::Running, version: 3 }, None),
            (StoreError::TestConflict { id }, None),
            (StoreError::Fenced { id, token: 1 }, None),
            (StoreError::LeaseLost { node: "n".into() }, None),
            (StoreError::Unmet { reason: "r".into() }, None),
        ];
        for (err, fault) in table {
            assert_eq!(err.fault(), fault, "{err}");
            assert_eq!(err.is_storage_full(), fault == Some(Fault::Full), "{err}");
        }
    }

    /// The codes as a real SQLite gives them through sqlx: a missing table and a read-only
    /// connection are lasting, a write lock held elsewhere past the busy timeout is away.
    #[tokio::test]
    async fn a_real_sqlite_store_gives_each_kind() {
        use sqlx::Connection;
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("f.db").display());
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("CREATE TABLE t (x INTEGER)").execute(&mut conn).await.unwrap();
        let fault = |r: Result<sqlx::sqlite::SqliteQueryResult, sqlx::Error>| {
            StoreError::from(r.unwrap_err()).fault()
        };
        let missing = sqlx::query("INSERT INTO gone VALUES (1)").execute(&mut conn).await;
        assert_eq!(fault(missing), Some(Fault::Lasting));
        let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("PRAGMA busy_timeout = 0").execute(&mut other).await.unwrap();
        sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await.unwrap();
        let busy = sqlx::query("INSERT INTO t VALUES (1)").execute(&mut other).await;
        assert_eq!(fault(busy), Some(Fault::Away));
        sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
        sqlx::query("PRAGMA query_only = 1").execute(&mut conn).await.unwrap();
        let read_only = sqlx::query("INSERT INTO t VALUES (1)").execute(&mut conn).await;
        assert_eq!(fault(read_only), Some(Fault::Lasting));
    }
}
