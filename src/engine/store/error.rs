//! What a store operation can fail with.

use std::path::PathBuf;

use uuid::Uuid;

use crate::model::{IllegalTransition, RunState};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the store at {target}: {source}")]
    Open { target: String, source: sqlx::Error },
    #[error("cannot migrate the store: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Someone else moved the run first; re-read it and decide again.
    #[error("run {id} changed concurrently (expected {expected} at version {version})")]
    Conflict { id: Uuid, expected: RunState, version: i64 },
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// A stage's or task's move its table refuses: a daemon bug, and nothing is written.
    #[error(transparent)]
    IllegalProcess(#[from] crate::model::IllegalProcessMove),
    /// Someone else moved the test first; re-read it and decide again.
    #[error("test {id} changed concurrently")]
    TestConflict { id: Uuid },
    #[error("corrupt row in the store: {0}")]
    Corrupt(String),
    #[error("{0}")]
    Locked(String),
    /// The node's lease was reaped or replaced: it must register again before writing.
    #[error("node '{node}' lost its lease (its heartbeat expired and another node took over its work)")]
    LeaseLost { node: String },
    /// A write carried a fencing token the row no longer holds: another node took it over.
    #[error("run {id} is no longer held under fencing token {token}; the write was rejected")]
    Fenced { id: Uuid, token: i64 },
    #[error("cannot use {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    UnsupportedUrl(#[from] crate::settings::UnsupportedUrl),
    /// A submitted run's dependency can never be met (its run ended otherwise, or is gone).
    #[error("a dependency can never be met: {reason}")]
    Unmet { reason: String },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
