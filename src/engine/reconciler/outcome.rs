//! Which store errors hold a write for later rather than give it up (`held.rs` keeps them).

use crate::engine::store::{Fault, StoreError};

/// Whether a write that failed with `err` is held and tried again rather than given up: any
/// fault of the store (its disk full, the database away or busy, a lasting refusal), since what
/// it records is a fact, and dropping it would leave a run waiting on news that never comes. A
/// refused move (a conflict, a fenced write) is decided again instead.
pub fn holds(err: &StoreError) -> bool {
    err.fault().is_some()
}

/// The words a held write's warning gives for `err`: its fault's kind, and the error itself
/// unless the kind says it all.
pub fn why_held(err: &StoreError) -> String {
    match err.fault() {
        Some(Fault::Full) => "disk full".to_string(),
        Some(fault) => format!("{} ({err})", fault.meaning()),
        None => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RunState as S;
    use uuid::Uuid;

    #[test]
    fn a_write_the_store_refused_is_held_and_a_refused_move_is_not() {
        let io =
            |errno| StoreError::Io { path: "/h".into(), source: std::io::Error::from_raw_os_error(errno) };
        let id = Uuid::nil();
        // The error, whether it is held, and the words its warning gives.
        let table: Vec<(StoreError, bool, &str)> = vec![
            (io(libc::ENOSPC), true, "disk full"),
            (
                StoreError::Locked("the database is locked".into()),
                true,
                "the database is away (the database is locked)",
            ),
            (
                StoreError::Database(sqlx::Error::PoolTimedOut),
                true,
                "the database is away (database error: pool timed out while waiting for an open connection)",
            ),
            (
                io(libc::EROFS),
                true,
                "the store refuses writes until someone acts (cannot use /h: Read-only file system (os error 30))",
            ),
            // A conflict is decided again, not retried as is.
            (
                StoreError::Conflict { id, expected: S::Running, version: 3 },
                false,
                "run 00000000-0000-0000-0000-000000000000 changed concurrently (expected running at version 3)",
            ),
            (
                StoreError::Fenced { id, token: 1 },
                false,
                "run 00000000-0000-0000-0000-000000000000 is no longer held under fencing token 1; the write was rejected",
            ),
            (StoreError::Corrupt("x".into()), false, "corrupt row in the store: x"),
        ];
        for (err, held, why) in table {
            assert_eq!(holds(&err), held, "{err}");
            assert_eq!(why_held(&err), why);
        }
    }
}
