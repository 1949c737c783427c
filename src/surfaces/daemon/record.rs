//! `$LACHESIS_HOME/daemon.json`: who the home's running daemon is. Written by the daemon once it
//! holds the store's daemon lock, removed when it exits; `daemon stop` and `daemon status` read
//! it. The process is named by its identity (pid, start time, boot), so a record left by a
//! daemon that was killed never makes anyone signal the process that reuses its pid.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::launch::process::{Liveness, liveness};
use crate::model::{Millis, ProcessIdentity};

/// A record larger than this is not one a daemon wrote.
const MAX_SIZE: u64 = 64 * 1024;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonRecord {
    pub process: ProcessIdentity,
    pub started_at: Millis,
    /// The daemon's lachesis version (the CLI asking may be another).
    pub version: String,
    /// The store, its URL's credentials and query redacted.
    pub store: String,
    /// The daemon's log file; None when it logs to its stderr.
    pub log: Option<PathBuf>,
    pub node: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a daemon record: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

pub fn path(home: &Path) -> PathBuf {
    home.join("daemon.json")
}

impl DaemonRecord {
    /// This process's record.
    pub fn of_this_process(
        store: String,
        log: Option<PathBuf>,
        node: String,
    ) -> std::io::Result<DaemonRecord> {
        Ok(DaemonRecord {
            process: crate::launch::process::identity_of(std::process::id() as i32)?,
            started_at: crate::model::now_millis(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            store,
            log,
            node,
        })
    }

    pub fn write(&self, home: &Path) -> std::io::Result<()> {
        crate::launch::status::write_atomic(&path(home), self, crate::launch::status::Durability::Cached)
    }

    /// The record in `home`, if any (whether its daemon still runs is `running`'s question).
    pub fn read(home: &Path) -> Result<Option<DaemonRecord>, RecordError> {
        let path = path(home);
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(RecordError::Read { path, source }),
        };
        let mut text = Vec::new();
        file.take(MAX_SIZE)
            .read_to_end(&mut text)
            .map_err(|source| RecordError::Read { path: path.clone(), source })?;
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|e| RecordError::Invalid { path, reason: e.to_string() })
    }

    /// Whether the recorded process is still the daemon that wrote this (not gone, not a
    /// stranger with its pid).
    pub fn running(&self) -> bool {
        liveness(&self.process) == Liveness::Alive
    }

    /// Removes the record in `home` if it is this one (a newer daemon's stays).
    pub fn remove_if_ours(&self, home: &Path) {
        if DaemonRecord::read(home).ok().flatten().is_some_and(|r| r.process == self.process) {
            let _ = std::fs::remove_file(path(home));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_names_this_process_as_running() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(DaemonRecord::read(home.path()).unwrap(), None);
        let record =
            DaemonRecord::of_this_process("sqlite:///h/lachesis.db".into(), None, "n".into()).unwrap();
        record.write(home.path()).unwrap();
        let read = DaemonRecord::read(home.path()).unwrap().unwrap();
        assert_eq!(read, record);
        assert!(read.running());
        let stranger = DaemonRecord {
            process: ProcessIdentity { start_time: record.process.start_time + 1, ..record.process.clone() },
            ..record.clone()
        };
        assert!(!stranger.running(), "a reused pid is not the daemon");
        stranger.remove_if_ours(home.path());
        assert!(path(home.path()).exists(), "another daemon's record stays");
        record.remove_if_ours(home.path());
        assert!(!path(home.path()).exists());
    }

    #[test]
    fn a_foreign_file_is_refused_in_one_line() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(path(home.path()), b"{\"pid\": 1}").unwrap();
        let err = DaemonRecord::read(home.path()).unwrap_err().to_string();
        assert!(err.contains("is not a daemon record") && !err.contains('\n'), "{err}");
    }
}
