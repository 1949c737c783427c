//! Whether a store error means its storage is full, by the error's kind: SQLite's SQLITE_FULL,
//! PostgreSQL's `53100 disk_full`, or ENOSPC/EDQUOT from the filesystem. Never by its words.

use super::StoreError;

/// SQLite's primary result code for "database or disk is full" (extended codes keep it in the
/// low byte).
const SQLITE_FULL: i64 = 13;
/// PostgreSQL's SQLSTATE `disk_full`.
const PG_DISK_FULL: &str = "53100";

impl StoreError {
    /// Whether this error says the store's disk is full (the write can land once space returns).
    pub fn is_storage_full(&self) -> bool {
        match self {
            StoreError::Database(err) | StoreError::Open { source: err, .. } => sqlx_is_full(err),
            StoreError::Io { source, .. } => crate::launch::space::is_out_of_space(source),
            _ => false,
        }
    }
}

fn sqlx_is_full(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => db.code().is_some_and(|code| is_full_code(&code)),
        sqlx::Error::Io(io) => crate::launch::space::is_out_of_space(io),
        _ => false,
    }
}

/// A database error code that means the disk is full: SQLite's (as sqlx gives it, the
/// extended code in decimal) or PostgreSQL's SQLSTATE.
fn is_full_code(code: &str) -> bool {
    code == PG_DISK_FULL || code.parse::<i64>().is_ok_and(|c| c & 0xff == SQLITE_FULL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_is_told_by_the_code_not_the_words() {
        for (code, full) in [
            ("13", true),     // SQLITE_FULL
            ("53100", true),  // PostgreSQL disk_full
            ("5", false),     // SQLITE_BUSY: "database is locked"
            ("1", false),     // SQLITE_ERROR, whatever its message says
            ("261", false),   // SQLITE_BUSY_RECOVERY
            ("23505", false), // unique_violation
            ("53200", false), // out_of_memory
            ("", false),
        ] {
            assert_eq!(is_full_code(code), full, "{code}");
        }
    }

    #[test]
    fn filesystem_errors_are_full_by_their_errno() {
        let io =
            |errno| StoreError::Io { path: "/x".into(), source: std::io::Error::from_raw_os_error(errno) };
        assert!(io(libc::ENOSPC).is_storage_full());
        assert!(io(libc::EDQUOT).is_storage_full());
        assert!(!io(libc::EACCES).is_storage_full());
        // Words are not the kind: a message that says "full" is not a full disk.
        assert!(!StoreError::Locked("the queue is full".into()).is_storage_full());
        assert!(!StoreError::Corrupt("disk full".into()).is_storage_full());
        assert!(
            StoreError::Database(sqlx::Error::Io(std::io::Error::from_raw_os_error(libc::ENOSPC)))
                .is_storage_full()
        );
    }
}
