//! Stage logs as surfaces show them: resolved by run and stage, read by `crate::logs` on
//! tokio's blocking pool, so a read of any log never holds the daemon's one thread.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Result, Service, ServiceError};
use crate::logs::{LogError, LogPage};

/// Lines a tail shows when the caller names no number.
pub const DEFAULT_TAIL_LINES: usize = 200;
/// The most lines one tail may ask for (the answer is bounded by bytes anyway).
pub const MAX_TAIL_LINES: usize = 100_000;

/// What part of a log to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogRequest {
    /// The last lines, at most [`crate::logs::MAX_ANSWER`] bytes of them.
    Tail { lines: usize },
    /// Bytes `offset..offset + limit`, `limit` at most [`crate::logs::MAX_ANSWER`].
    Range { offset: u64, limit: u64 },
    /// The same of the rotated file before the live one (`<log>.1`): the rest of a file a
    /// follower was reading when it rotated.
    Previous { offset: u64, limit: u64 },
}

impl Default for LogRequest {
    fn default() -> LogRequest {
        LogRequest::Tail { lines: DEFAULT_TAIL_LINES }
    }
}

/// One stage's part of a log read.
#[derive(Clone, Debug, Serialize)]
pub struct StageLog {
    pub stage: String,
    pub path: PathBuf,
    #[serde(flatten)]
    pub page: LogPage,
    /// Which file of the log was read: 0 the live one, N its rotated `<log>.N`.
    pub rotation: u32,
    /// The files the log has (the live one first, then each rotated one), to page into.
    pub files: Vec<crate::logs::LogFile>,
}

/// The file `rotation` of the log at `path`: itself for 0, else `<log>.N`.
fn log_file(path: &Path, rotation: u32) -> PathBuf {
    if rotation == 0 { path.to_path_buf() } else { crate::logs::rotated(path, rotation) }
}

/// Reads `request` of one log; the blocking work of [`Service::run_logs`].
pub fn read_log(path: &Path, request: LogRequest) -> std::result::Result<LogPage, LogError> {
    match request {
        LogRequest::Tail { lines } => {
            crate::logs::tail(path, lines.min(MAX_TAIL_LINES), crate::logs::MAX_ANSWER)
        }
        LogRequest::Range { offset, limit } => crate::logs::range(path, offset, limit),
        LogRequest::Previous { offset, limit } => {
            crate::logs::range(&crate::logs::rotated(path, 1), offset, limit)
        }
    }
}

/// Runs a log read on the blocking pool.
pub(super) async fn off_thread<T: Send + 'static>(
    read: impl FnOnce() -> std::result::Result<T, LogError> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(read)
        .await
        .map_err(|join| {
            ServiceError::Log(LogError {
                path: PathBuf::new(),
                source: std::io::Error::other(join.to_string()),
            })
        })?
        .map_err(ServiceError::Log)
}

impl Service {
    /// `request` of each stage's log (only `stage`'s when given), in stage order.
    pub async fn run_logs(
        &self,
        prefix: &str,
        stage: Option<&str>,
        request: LogRequest,
    ) -> Result<Vec<StageLog>> {
        self.run_logs_in(prefix, stage, 0, request).await
    }

    /// `run_logs` of one file of each log: `rotation` 0 is the live file, N its rotated `<log>.N`
    /// (up to [`crate::logs::limits::MAX_FILES`]). A file that does not exist reads as empty; each
    /// answer lists the files there are.
    pub async fn run_logs_in(
        &self,
        prefix: &str,
        stage: Option<&str>,
        rotation: u32,
        request: LogRequest,
    ) -> Result<Vec<StageLog>> {
        if rotation > crate::logs::limits::MAX_FILES {
            return Err(ServiceError::BadRotation { rotation, most: crate::logs::limits::MAX_FILES });
        }
        let run = self.resolve_run(prefix).await?;
        let stages = self.store.stages(run.id).await?;
        let chosen: Vec<(String, PathBuf)> = stages
            .iter()
            .filter(|s| stage.is_none_or(|name| s.name == name))
            .map(|s| (s.name.clone(), s.log_path.clone()))
            .collect();
        if let Some(name) = stage
            && chosen.is_empty()
        {
            return Err(ServiceError::UnknownStage {
                run: crate::model::short_id(&run.id),
                stage: crate::text::one_line(name),
                known: stages.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", "),
            });
        }
        off_thread(move || {
            chosen
                .into_iter()
                .map(|(stage, path)| {
                    let page = read_log(&log_file(&path, rotation), request)?;
                    Ok(StageLog { page, rotation, files: crate::logs::log_files(&path), stage, path })
                })
                .collect()
        })
        .await
    }
}
