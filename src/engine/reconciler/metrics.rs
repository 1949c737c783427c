//! Metrics in the reconciler: while a run runs, a worker follows the source its workflow's
//! `metrics:` names and records what it reads through the store itself, beside the loop, as the
//! W&B metric poller does: readings are not run state, and a slow store write must not delay
//! the loop that sees exits. Readings are keyed by (run, name, attempt, step), so a file read
//! again after a restart records nothing twice. When the run leaves `running`, the worker reads
//! what is left, records it and ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tracing::warn;
use uuid::Uuid;

use super::{Reconciler, Result};
use crate::engine::store::Store;
use crate::logs::follow::{FileMark, Follower};
use crate::model::{MetricReading, now_millis};
use crate::workflow::metrics::ResolvedMetrics;

/// How often the followed file is looked at for new lines.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(500);
/// The most bytes of the file read into one batch: a batch's readings stay a few MB at most,
/// whatever the stage writes (lines are bounded by the follower, readings per line by
/// `MAX_READINGS_PER_LINE`).
const BATCH_BYTES: u64 = 256 * 1024;
/// Failed writes of a batch after which a finishing worker gives up (a running one keeps it).
const FINAL_TRIES: u32 = 5;

/// A supervised run's metric worker.
pub struct MetricWatch {
    finish: Arc<Finish>,
}

/// Set when the run leaves `running`: the worker wakes at once, reads the rest and ends, before
/// a next attempt (a backoff away at least) writes lines of its own to the same file.
#[derive(Default)]
struct Finish {
    asked: AtomicBool,
    wake: Notify,
}

impl MetricWatch {
    /// Asks the worker to read what is left, record it, and end.
    pub fn finish(&self) {
        self.finish.asked.store(true, Ordering::Release);
        self.finish.wake.notify_one();
    }
}

impl Drop for MetricWatch {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The file's reader; `warned` says a malformed line was reported once already.
struct Reader {
    follower: Follower,
    warned: bool,
}

/// Reads up to `BATCH_BYTES` of the source: its readings, and whether there is more to read.
fn read_batch(source: &ResolvedMetrics, reader: &Mutex<Reader>, run: Uuid) -> (Vec<MetricReading>, bool) {
    let Ok(mut reader) = reader.lock() else { return (Vec::new(), false) };
    let reader = &mut *reader;
    let mut readings = Vec::new();
    let warned = &mut reader.warned;
    let more = reader
        .follower
        .read_some(BATCH_BYTES, |line| match source.read_line(line) {
            Ok(found) => readings.extend(found),
            Err(err) => {
                if !std::mem::replace(warned, true) {
                    warn!(%run, file = %source.file().display(), "metrics: skipped a line: failed to {err}");
                }
            }
        })
        .unwrap_or_else(|err| {
            warn!(%run, file = %source.file().display(), "metrics: cannot read: {err}");
            false
        });
    (readings, more)
}

/// Follows `source` from `mark`, recording readings under `attempt` until `finish` is set and the
/// file is read to its end.
fn spawn_worker(
    store: Arc<dyn Store>,
    run: Uuid,
    attempt: u32,
    source: ResolvedMetrics,
    mark: FileMark,
    finish: Arc<Finish>,
) {
    let reader =
        Arc::new(Mutex::new(Reader { follower: Follower::from_mark(source.file(), mark), warned: false }));
    tokio::spawn(async move {
        let mut failures = 0u32;
        loop {
            // Sampled before the read: a read that starts after the ask reads the last lines.
            let finishing = finish.asked.load(Ordering::Acquire);
            let (source_, reader_) = (source.clone(), Arc::clone(&reader));
            let Ok((batch, more)) =
                tokio::task::spawn_blocking(move || read_batch(&source_, &reader_, run)).await
            else {
                return;
            };
            // A batch is written before the next is read: memory holds one batch at most.
            while !batch.is_empty() {
                match store.put_metric_values(run, attempt, &batch, now_millis()).await {
                    Ok(()) => {
                        failures = 0;
                        break;
                    }
                    Err(err) => {
                        failures += 1;
                        if failures == 1 {
                            warn!(%run, "metrics: cannot record readings, trying again: {err}");
                        }
                        if finishing && failures >= FINAL_TRIES {
                            warn!(%run, "metrics: gave up recording the last readings: {err}");
                            return;
                        }
                        tokio::time::sleep(FOLLOW_INTERVAL * failures.min(20)).await;
                    }
                }
            }
            if more {
                continue;
            }
            if finishing {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_INTERVAL) => {}
                _ = finish.wake.notified() => {}
            }
        }
    });
}

impl Reconciler {
    /// Starts following a running run's metrics, if its workflow names where they appear (once
    /// per attempt and daemon). A first attempt's file is read from its start; a later
    /// attempt's from where it stood when the attempt's first stage started (a file put in its
    /// place since, from its start), or from the stage's log start for a log.
    pub(super) async fn watch_metrics(&mut self, id: Uuid) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        let Some(spec) = &sup.run.spec.metrics else { return Ok(()) };
        if sup.metrics.is_some() {
            return Ok(());
        }
        let stages = &sup.stages;
        let log_of =
            |stage: &str| stages.iter().find(|s| s.plan.name == stage).map(|s| s.plan.log_path.clone());
        let source = match spec.resolve(&sup.run.params.resolved, log_of) {
            Ok(source) => source,
            Err(err) => {
                // Said once: the watch stays empty for the attempt.
                sup.metrics = Some(MetricWatch { finish: Arc::default() });
                let note = crate::model::NewEvent::note(format!("cannot read metrics: {err}"));
                self.store.add_event(id, &note).await?;
                return Ok(());
            }
        };
        let log_start = spec
            .log_stage()
            .and_then(|name| stages.iter().find(|s| s.plan.name == name))
            .and_then(|s| s.log_start);
        let mark = match (log_start, sup.metrics_mark) {
            (Some(start), _) => FileMark::at(start),
            (None, Some(mark)) => mark,
            (None, None) if sup.run.attempt == 1 => FileMark::default(),
            (None, None) => FileMark::of(source.file()),
        };
        let attempt = u32::try_from(sup.run.attempt).unwrap_or(u32::MAX);
        let finish = Arc::new(Finish::default());
        spawn_worker(Arc::clone(&self.store), id, attempt, source, mark, Arc::clone(&finish));
        sup.metrics = Some(MetricWatch { finish });
        Ok(())
    }
}
