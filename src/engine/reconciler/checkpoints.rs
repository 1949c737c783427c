//! Checkpoints in the reconciler: a worker per running run follows the file its workflow's
//! `checkpoints:` names and reports each checkpoint as `Msg::Checkpoint`; the loop records it
//! under the run's current attempt. Rows are keyed by their line, so the file is read from its
//! start whenever a daemon starts watching, and nothing is recorded twice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::AbortHandle;
use tracing::warn;
use uuid::Uuid;

use super::{Msg, Reconciler, Result};
use crate::logs::follow::Follower;
use crate::model::{FoundCheckpoint, NewEvent, NextAttempt, Run, RunParams, Start, next_start, now_millis};
use crate::workflow::checkpoints::{ResolvedCheckpoints, params_for};

/// How often the followed file is looked at for new lines.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);
/// The most read in one go before what was found is reported.
const FOLLOW_SLICE: u64 = 8 * 1024 * 1024;

/// What the loop keeps about a running run's checkpoint source.
pub struct CheckpointWatch {
    source: ResolvedCheckpoints,
    /// Shared with the worker, so a last look reads on from where it stopped.
    follower: Arc<Mutex<Follower>>,
    /// A malformed line is reported once per watch.
    warned: Arc<AtomicBool>,
    worker: AbortHandle,
}

impl CheckpointWatch {
    /// Stops the worker; what it has not read yet is left for `catch_up_checkpoints`.
    pub fn stop(&self) {
        self.worker.abort();
    }
}

impl Drop for CheckpointWatch {
    fn drop(&mut self) {
        self.worker.abort();
    }
}

/// What one read of the source found.
struct Pass {
    found: Vec<FoundCheckpoint>,
    /// The first malformed line's problem, the first time one is seen.
    problem: Option<String>,
    more: bool,
}

fn read_pass(source: &ResolvedCheckpoints, follower: &Mutex<Follower>, warned: &AtomicBool) -> Pass {
    let mut pass = Pass { found: Vec::new(), problem: None, more: false };
    let Ok(mut follower) = follower.lock() else { return pass };
    let file = source.file().display().to_string();
    pass.more = follower
        .read_some(FOLLOW_SLICE, |line| match source.read_line(line) {
            Ok(Some(found)) => pass.found.push(found),
            Ok(None) => {}
            Err(err) => {
                if !warned.swap(true, Ordering::Relaxed) {
                    pass.problem = Some(format!("checkpoints: skipped a line of {file}: failed to {err}"));
                }
            }
        })
        .unwrap_or_else(|err| {
            warn!("checkpoints: cannot read {file}: {err}");
            false
        });
    pass
}

impl Reconciler {
    /// Starts following a run's checkpoints, if its workflow names where they appear; a
    /// source that cannot be resolved is said in an event.
    pub(super) async fn watch_checkpoints(&mut self, id: Uuid) -> Result<Option<CheckpointWatch>> {
        let Some(sup) = self.runs.get(&id) else { return Ok(None) };
        let Some(spec) = &sup.run.spec.checkpoints else { return Ok(None) };
        let stages = &sup.stages;
        let log_of =
            |stage: &str| stages.iter().find(|s| s.plan.name == stage).map(|s| s.plan.log_path.clone());
        let source = match spec.resolve(&sup.run.params.resolved, log_of) {
            Ok(source) => source,
            Err(err) => {
                self.store.add_event(id, &NewEvent::note(format!("cannot read checkpoints: {err}"))).await?;
                return Ok(None);
            }
        };
        let follower = Arc::new(Mutex::new(Follower::new(source.file())));
        let warned = Arc::new(AtomicBool::new(false));
        let (tx, task_source, task_follower, task_warned) =
            (self.tx.clone(), source.clone(), Arc::clone(&follower), Arc::clone(&warned));
        let task = tokio::spawn(async move {
            loop {
                let (source, follower, warned) =
                    (task_source.clone(), Arc::clone(&task_follower), Arc::clone(&task_warned));
                let read = tokio::task::spawn_blocking(move || read_pass(&source, &follower, &warned));
                let Ok(pass) = read.await else { return };
                if let Some(problem) = pass.problem
                    && tx.send(Msg::Note { run: id, event: NewEvent::note(problem) }).is_err()
                {
                    return;
                }
                for found in pass.found {
                    if tx.send(Msg::Checkpoint { run: id, found }).is_err() {
                        return;
                    }
                }
                if !pass.more {
                    tokio::time::sleep(FOLLOW_INTERVAL).await;
                }
            }
        });
        Ok(Some(CheckpointWatch { source, follower, warned, worker: task.abort_handle() }))
    }

    /// Records a checkpoint of a supervised run under its current attempt.
    pub(super) async fn on_checkpoint(&mut self, id: Uuid, found: FoundCheckpoint) -> Result {
        let Some(sup) = self.runs.get(&id) else { return Ok(()) };
        self.store.record_checkpoint(id, sup.run.attempt, &found, now_millis()).await?;
        Ok(())
    }

    /// Reads what the worker has not read yet and records it: a last look before the run's
    /// next attempt is decided, so a checkpoint written just before an exit is not missed.
    pub(super) async fn catch_up_checkpoints(&mut self, id: Uuid) -> Result {
        let Some(watch) =
            self.runs.get(&id).and_then(|s| s.progress.as_ref()).and_then(|w| w.checkpoints.as_ref())
        else {
            return Ok(());
        };
        let (source, follower, warned) =
            (watch.source.clone(), Arc::clone(&watch.follower), Arc::clone(&watch.warned));
        let read = tokio::task::spawn_blocking(move || {
            let mut all = Pass { found: Vec::new(), problem: None, more: true };
            while all.more {
                let pass = read_pass(&source, &follower, &warned);
                all.found.extend(pass.found);
                all.problem = all.problem.or(pass.problem);
                all.more = pass.more;
            }
            all
        });
        let Ok(pass) = read.await else { return Ok(()) };
        if let Some(problem) = pass.problem {
            self.store.add_event(id, &NewEvent::note(problem)).await?;
        }
        for found in pass.found {
            self.on_checkpoint(id, found).await?;
        }
        Ok(())
    }
}

impl Reconciler {
    /// For a run with a `checkpoints:` source that the retry policy requeues: the next
    /// attempt's params (with the resume point, or without one) and the event that says what it
    /// starts from.
    pub(super) async fn next_params(&mut self, run: &Run) -> Result<Option<(RunParams, String)>> {
        if run.spec.checkpoints.is_none() {
            return Ok(None);
        }
        let resume = run.spec.retry.as_ref().is_none_or(|p| p.resume);
        let checkpoints = self.store.checkpoints(run.id).await?;
        let start = next_start(NextAttempt::Retry { resume }, &checkpoints)
            .unwrap_or(Start::Scratch("no checkpoint"));
        Ok(Some((params_for(&run.params, &start), start.describe(run.attempt + 1))))
    }
}
