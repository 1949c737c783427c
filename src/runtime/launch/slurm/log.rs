//! A Slurm stage's log, kept within the stage's rotation by the daemon. Slurm appends the job's
//! output to it from the compute node, so no shim rotates it: the job's watcher looks at its
//! size every few seconds and rotates it by copy and truncate (`logs::copy_truncate`), off
//! the daemon's thread. Reads of it are the same bounded reads as any stage log's.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::logs::Rotation;

/// How often the log's size is looked at: a stage writing 100 MB/s passes its size by at most
/// this much output before a look.
const LOOK_EVERY: Duration = Duration::from_secs(2);

pub struct SlurmLog {
    path: PathBuf,
    rotation: Rotation,
    next_look: Instant,
}

impl SlurmLog {
    pub fn new(path: PathBuf, rotation: Rotation) -> SlurmLog {
        SlurmLog { path, rotation, next_look: Instant::now() }
    }

    /// Rotates the log if it is past its size, at most every [`LOOK_EVERY`] unless `now_too`
    /// (the job ended: its last output is bounded too). A failure is logged and tried again at
    /// the next look; the job is never touched.
    pub async fn keep_bounded(&mut self, now_too: bool) {
        if !now_too && Instant::now() < self.next_look {
            return;
        }
        self.next_look = Instant::now() + LOOK_EVERY;
        let (path, rotation) = (self.path.clone(), self.rotation);
        let done = tokio::task::spawn_blocking(move || crate::logs::copy_truncate(&path, rotation)).await;
        match done {
            Ok(Ok(true)) => tracing::info!(log = %self.path.display(), "rotated the Slurm stage's log"),
            Ok(Ok(false)) => {}
            Ok(Err(err)) => {
                tracing::warn!(log = %self.path.display(), "cannot rotate the Slurm stage's log: {err}")
            }
            Err(err) => tracing::warn!("cannot rotate a Slurm stage's log: {err}"),
        }
    }
}
