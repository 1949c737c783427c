//! Checkpoints in the reconciler: a worker per running run follows the file its workflow's
//! `checkpoints:` names and says when it read checkpoints (`Msg::Checkpoints`); the loop records
//! them under the run's current attempt, and reads what is left itself before a stage's end is
//! recorded. Rows are keyed by their line, so the file is read from its start whenever a
//! daemon starts watching, and nothing is recorded twice.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::AbortHandle;
use tracing::warn;
use uuid::Uuid;

use super::{Msg, Reconciler, Result};
use crate::logs::follow::Follower;
use crate::model::{FoundCheckpoint, NewEvent, Run, RunParams, now_millis};
use crate::workflow::checkpoints::ResolvedCheckpoints;

/// How often the followed file is looked at for new lines.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);
/// The most read in one go before what was found is reported.
const FOLLOW_SLICE: u64 = 8 * 1024 * 1024;

/// What the loop keeps about a supervised run's checkpoint source, once it looked for it.
#[derive(Default)]
pub struct CheckpointWatch {
    /// None when the workflow names no source, or one that cannot be resolved (said once).
    source: Option<(ResolvedCheckpoints, Arc<Mutex<Read>>)>,
    /// The worker following the source while the run runs.
    worker: Option<AbortHandle>,
}

/// The file's reader and what it read that the loop has not recorded yet. A line leaves the
/// file only into `found`, and `found` only into the store: whoever reads (the worker, or the
/// loop's last look), nothing read is lost, even when the worker is stopped mid-read.
struct Read {
    follower: Follower,
    found: Vec<FoundCheckpoint>,
    /// The first malformed line's problem, until it is recorded.
    problem: Option<String>,
    /// A malformed line is reported once per watch.
    warned: bool,
}

impl CheckpointWatch {
    /// Stops the worker; what it has not read yet is left for `catch_up_checkpoints`.
    pub fn stop(&mut self) {
        if let Some(worker) = self.worker.take() {
            worker.abort();
        }
    }
}

impl Drop for CheckpointWatch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads one slice of the source into `read.found`: whether there is more to read, and
/// whether this slice found anything for the loop (a checkpoint or a malformed line).
fn read_slice(source: &ResolvedCheckpoints, read: &Mutex<Read>) -> (bool, bool) {
    let Ok(mut read) = read.lock() else { return (false, false) };
    let read = &mut *read;
    let before = (read.found.len(), read.problem.is_some());
    let file = source.file().display().to_string();
    let (found, problem, warned) = (&mut read.found, &mut read.problem, &mut read.warned);
    let more = read
        .follower
        .read_some(FOLLOW_SLICE, |line| match source.read_line(line) {
            Ok(Some(checkpoint)) => found.push(checkpoint),
            Ok(None) => {}
            Err(err) => {
                if !std::mem::replace(warned, true) {
                    *problem = Some(format!("checkpoints: skipped a line of {file}: failed to {err}"));
                }
            }
        })
        .unwrap_or_else(|err| {
            warn!("checkpoints: cannot read {file}: {err}");
            false
        });
    (more, (read.found.len(), read.problem.is_some()) != before)
}

impl Reconciler {
    /// Looks up a run's checkpoint source once (said in an event if it cannot be resolved).
    async fn checkpoint_source(
        &mut self,
        id: Uuid,
    ) -> Result<Option<(ResolvedCheckpoints, Arc<Mutex<Read>>)>> {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(None) };
        if let Some(watch) = &sup.checkpoints {
            return Ok(watch.source.clone());
        }
        let Some(spec) = &sup.run.spec.checkpoints else {
            sup.checkpoints = Some(CheckpointWatch::default());
            return Ok(None);
        };
        let stages = &sup.stages;
        let log_of =
            |stage: &str| stages.iter().find(|s| s.plan.name == stage).map(|s| s.plan.log_path.clone());
        match spec.resolve(&sup.run.params.resolved, log_of) {
            Ok(source) => {
                let read = Read {
                    follower: Follower::new(source.file()),
                    found: Vec::new(),
                    problem: None,
                    warned: false,
                };
                let source = Some((source, Arc::new(Mutex::new(read))));
                sup.checkpoints = Some(CheckpointWatch { source: source.clone(), worker: None });
                Ok(source)
            }
            Err(err) => {
                // Looked at once: a second look would say it again.
                sup.checkpoints = Some(CheckpointWatch::default());
                self.store.add_event(id, &NewEvent::note(format!("cannot read checkpoints: {err}"))).await?;
                Ok(None)
            }
        }
    }

    /// Starts following a run's checkpoints, if its workflow names where they appear.
    pub(super) async fn watch_checkpoints(&mut self, id: Uuid) -> Result {
        let Some((source, read)) = self.checkpoint_source(id).await? else { return Ok(()) };
        let Some(watch) = self.runs.get_mut(&id).and_then(|s| s.checkpoints.as_mut()) else { return Ok(()) };
        if watch.worker.is_some() {
            return Ok(());
        }
        let tx = self.tx.clone();
        let task = tokio::spawn(async move {
            loop {
                let (source, read) = (source.clone(), Arc::clone(&read));
                // One slice at a time, and the next once the loop recorded this one: what is
                // read but not recorded stays small.
                let pass = tokio::task::spawn_blocking(move || {
                    let recorded = read.lock().is_ok_and(|r| {
                        super::core::readings::checkpoints_read_on(r.found.len(), r.problem.is_some())
                    });
                    if recorded { read_slice(&source, &read) } else { (false, false) }
                });
                let Ok((more, news)) = pass.await else { return };
                if news && tx.send(Msg::Checkpoints { run: id }).is_err() {
                    return;
                }
                if !more {
                    tokio::time::sleep(FOLLOW_INTERVAL).await;
                }
            }
        });
        watch.worker = Some(task.abort_handle());
        Ok(())
    }

    /// Records what the run's checkpoint source read and the loop has not recorded yet, under
    /// the run's current attempt. A write that cannot land leaves the rest for the replay
    /// (rows are keyed by their line, so one recorded twice is recorded once).
    pub(super) async fn on_checkpoints(&mut self, id: Uuid) -> Result {
        let Some(sup) = self.runs.get(&id) else { return Ok(()) };
        let attempt = sup.run.attempt;
        let Some((_, read)) = sup.checkpoints.as_ref().and_then(|w| w.source.clone()) else { return Ok(()) };
        let (found, problem) = match read.lock() {
            Ok(read) => (read.found.clone(), read.problem.clone()),
            Err(_) => return Ok(()),
        };
        if let Some(problem) = problem {
            self.store.add_event(id, &NewEvent::note(problem)).await?;
            if let Ok(mut read) = read.lock() {
                read.problem = None;
            }
        }
        for checkpoint in &found {
            self.store.record_checkpoint(id, attempt, checkpoint, now_millis()).await?;
        }
        // Only the loop takes from `found`, and the worker only appends.
        if let Ok(mut read) = read.lock() {
            read.found.drain(..found.len());
        }
        // A victim asked to checkpoint before its preemption has: it stops next.
        let asked = self.runs.get(&id).is_some_and(|sup| sup.preempt_ask.is_some());
        if super::core::readings::preemption_due(found.len(), asked) {
            let _ = self.tx.send(Msg::PreemptDue { run: id });
        }
        Ok(())
    }

    /// Reads what is left of the run's checkpoint source and records it: a last look before
    /// a stage's end is recorded and before the run's next attempt is decided, so a checkpoint
    /// written just before an exit is not missed, on any path (an exit during start-up, or one
    /// a restarted daemon finds). Reads on from where the worker stopped, or, without a
    /// worker, once from the start.
    pub(super) async fn catch_up_checkpoints(&mut self, id: Uuid) -> Result {
        let Some((source, read)) = self.checkpoint_source(id).await? else { return Ok(()) };
        loop {
            // Off the loop's thread, a slice at a time, each recorded before the next is read.
            let (source, read) = (source.clone(), Arc::clone(&read));
            let more = tokio::task::spawn_blocking(move || read_slice(&source, &read).0).await;
            self.on_checkpoints(id).await?;
            if !more.unwrap_or(false) {
                return Ok(());
            }
        }
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
        let checkpoints = self.store.checkpoints(run.id).await?;
        Ok(super::core::retries::next_attempt(run, &checkpoints, super::core::retries::resumes(run)))
    }
}
