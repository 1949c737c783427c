//! A run's trained weights: the `tinker://…` path its checkpoints record, else the last one its
//! trainer's logs report. The reconciler resolves `{after.NAME.trained_weights}` with it when it
//! claims a waiting run; the service's results and report show it.

use std::path::{Path, PathBuf};

use crate::logs::LogError;
use crate::model::{Checkpoint, Stage};

/// The `tinker://…` weights path a trainer log reports, if any: the last one in the log's
/// final [`crate::logs::SCAN_WINDOW`] bytes, scanned backwards (a trainer reports its weights
/// as it ends), so the cost is the same for any size of log.
pub fn trained_weights(log: &Path) -> Result<Option<String>, LogError> {
    crate::logs::last_match(log, 0, crate::logs::SCAN_WINDOW, weights_in)
}

/// The weights path a log line names: from `tinker://` to the next space, without a trailing
/// `.`, `,` or `)`.
pub fn weights_in(line: &str) -> Option<String> {
    let start = line.find("tinker://")?;
    Some(line[start..].split_whitespace().next()?.trim_end_matches(['.', ',', ')']).to_string())
}

/// A run's trained weights: the last weights path among its checkpoints, else the last one its
/// stage logs report (read off the runtime's threads). An unreadable log has none to give, and
/// says so in the daemon's log.
pub async fn trained_weights_of(
    checkpoints: &[Checkpoint],
    stages: &[Stage],
) -> Result<Option<String>, LogError> {
    if let Some(recorded) = Checkpoint::last_weights(checkpoints) {
        return Ok(Some(recorded.to_string()));
    }
    let logs: Vec<PathBuf> = stages.iter().map(|s| s.log_path.clone()).collect();
    let read = tokio::task::spawn_blocking(move || {
        for log in &logs {
            match trained_weights(log) {
                Ok(Some(weights)) => return Some(weights),
                Ok(None) => {}
                Err(err) => tracing::warn!("results: {err}"),
            }
        }
        None
    });
    read.await
        .map_err(|join| LogError { path: PathBuf::new(), source: std::io::Error::other(join.to_string()) })
}
