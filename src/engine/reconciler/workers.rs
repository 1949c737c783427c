//! The loop's workers: a stage or task started under a shim, and a process found at restart,
//! each watched by a task of its own that reports its start and its end as messages.

use std::sync::Arc;
use std::time::Duration;

use super::Reconciler;
use super::messages::{Msg, Owner, ProcessEnd};
use crate::launch::process::ExitWatch;
use crate::launch::status::StageFiles;

/// How long a shim that reported its stage's exit gets to write its exit file and exit, before
/// the daemon acts on the report alone.
const SHIM_EXIT_GRACE: Duration = Duration::from_secs(2);

impl Reconciler {
    /// Starts a process under a shim; its start and its end are reported as messages.
    pub(super) fn launch(&self, owner: Owner, plan: crate::workflow::StagePlan, files: StageFiles) {
        let shims = Arc::clone(&self.shims);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            match shims.spawn_stage(&plan, &files).await {
                Ok(mut spawned) => {
                    let _ = tx.send(Msg::Spawned { owner, result: Ok(spawned.started.clone()) });
                    // The shim's report needs no disk; without one, its exit file is the word.
                    let end = match spawned.exit_report().await {
                        Some(finished) => {
                            // It exits once its exit file is written; only a full disk holds it.
                            let _ = tokio::time::timeout(SHIM_EXIT_GRACE, spawned.exited()).await;
                            ProcessEnd::Finished(finished)
                        }
                        None => {
                            spawned.exited().await;
                            read_end(&files, "its shim exited without recording a status")
                        }
                    };
                    let _ = tx.send(Msg::Ended { owner, end });
                    // Reaped once it has written its exit file (on a full disk, when space returns).
                    spawned.exited().await;
                }
                Err(err) => {
                    let _ = tx.send(Msg::Spawned { owner, result: Err(err) });
                }
            }
        });
    }

    /// Watches a process we did not start (after a restart) through a pidfd on its shim.
    pub(super) fn watch_reattached(&self, owner: Owner, watch: ExitWatch, files: StageFiles) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let end = match watch.exited().await {
                Ok(()) => read_end(&files, "its shim exited without recording a status"),
                Err(err) => ProcessEnd::Vanished(format!("cannot watch its shim: {err}")),
            };
            let _ = tx.send(Msg::Ended { owner, end });
        });
    }
}

/// The recorded end of a stage whose shim is gone.
pub(super) fn read_end(files: &StageFiles, otherwise: &str) -> ProcessEnd {
    match files.read_finished() {
        Ok(Some(finished)) => ProcessEnd::Finished(finished),
        Ok(None) => ProcessEnd::Vanished(otherwise.to_string()),
        Err(err) => ProcessEnd::Vanished(format!("unreadable status file {}: {err}", files.exit.display())),
    }
}
