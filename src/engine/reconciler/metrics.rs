//! Metrics in the reconciler: while a run runs, a worker follows the source its workflow's
//! `metrics:` names and records what it reads through the store itself, beside the loop, as the
//! W&B metric poller does: readings are not run state, and a slow store write must not delay
//! the loop that sees exits. Readings are keyed by (run, name, attempt, step), so a file read
//! again after a restart records nothing twice. When the run leaves `running`, the worker reads
//! what is left, records it and ends.
//!
//! A sweep member's worker also watches the sweep's metric: when readings of it land it tells
//! the sweep decider (`SweepReadings`), which decides on that sweep at once; and the first
//! reading of it that is no number is said once per attempt, as an event on the run, rather
//! than left out in silence.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tracing::warn;
use uuid::Uuid;

use super::SweepReadings;
use super::{Reconciler, Result};
use crate::engine::store::Store;
use crate::logs::follow::{FileMark, Follower};
use crate::model::{MetricReading, NewEvent, now_millis};
use crate::workflow::metrics::{NotNumber, ResolvedMetrics};

use super::core::readings::{self, AfterBatch, AfterFailure, METRICS_FOLLOW as FOLLOW_INTERVAL, ReadFrom};

/// The most bytes of the file read into one batch: a batch's readings stay a few MB at most,
/// whatever the stage writes (lines are bounded by the follower, readings per line by
/// `MAX_READINGS_PER_LINE`).
const BATCH_BYTES: u64 = 256 * 1024;

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

/// What a batch read: its readings at `from_step` or later, whether there is more to read, and
/// the first value of the watched metric that was no number.
struct Batch {
    readings: Vec<MetricReading>,
    more: bool,
    odd: Option<NotNumber>,
}

/// Reads up to `BATCH_BYTES` of the source, watching metric `watch`.
fn read_batch(
    source: &ResolvedMetrics,
    reader: &Mutex<Reader>,
    run: Uuid,
    from_step: i64,
    watch: Option<&str>,
) -> Batch {
    let Ok(mut reader) = reader.lock() else { return Batch { readings: Vec::new(), more: false, odd: None } };
    let reader = &mut *reader;
    let (mut readings, mut odd) = (Vec::new(), None);
    let warned = &mut reader.warned;
    let more = reader
        .follower
        .read_some(BATCH_BYTES, |line| match source.read_line_watching(line, watch) {
            Ok((found, not_number)) => {
                // Below the step it resumed at, an earlier attempt's (`core::readings`).
                readings.extend(found.into_iter().filter(|r| r.step >= from_step));
                if odd.is_none() {
                    odd = not_number.filter(|n| n.step >= from_step);
                }
            }
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
    Batch { readings, more, odd }
}

/// Where a sweep member's worker tells its sweep's decider that readings landed.
struct SweepFeed {
    sweep: Uuid,
    readings: Arc<SweepReadings>,
}

/// The metric sweep `sweep` compares its members by, as its stored file says (None: it has
/// none, or it cannot be read now, and then any reading is news to the decider).
async fn sweep_metric(store: &dyn Store, sweep: Uuid) -> Option<String> {
    store.sweep(sweep).await.ok()??.metric_name()
}

/// Where a worker reads: the source, from `mark` on, keeping readings at `from_step` or later.
struct Followed {
    source: ResolvedMetrics,
    mark: FileMark,
    from_step: i64,
}

/// Follows the source from its mark, recording readings under `attempt` until `finish` is set
/// and the file is read to its end.
fn spawn_worker(
    store: Arc<dyn Store>,
    run: Uuid,
    attempt: u32,
    followed: Followed,
    finish: Arc<Finish>,
    feed: Option<SweepFeed>,
) {
    let Followed { source, mark, from_step } = followed;
    let reader =
        Arc::new(Mutex::new(Reader { follower: Follower::from_mark(source.file(), mark), warned: false }));
    tokio::spawn(async move {
        let metric = match &feed {
            Some(feed) => sweep_metric(&*store, feed.sweep).await,
            None => None,
        };
        let mut failures = 0u32;
        let mut said_odd = false;
        loop {
            // Sampled before the read: a read that starts after the ask reads the last lines.
            let finishing = finish.asked.load(Ordering::Acquire);
            let (source_, reader_, watch) = (source.clone(), Arc::clone(&reader), metric.clone());
            let Ok(Batch { readings: batch, more, odd }) = tokio::task::spawn_blocking(move || {
                read_batch(&source_, &reader_, run, from_step, watch.as_deref())
            })
            .await
            else {
                return;
            };
            // A batch is written before the next is read: memory holds one batch at most.
            while !batch.is_empty() {
                match store.put_metric_values(run, attempt, &batch, now_millis()).await {
                    Ok(()) => {
                        failures = 0;
                        if let Some(feed) = &feed
                            && readings::news_for_sweep(
                                metric.as_deref(),
                                batch.iter().map(|r| r.name.as_str()),
                            )
                        {
                            feed.readings.landed(feed.sweep);
                        }
                        break;
                    }
                    Err(err) => {
                        failures += 1;
                        if failures == 1 {
                            warn!(%run, "metrics: cannot record readings, trying again: {err}");
                        }
                        match readings::after_failure(failures, finishing) {
                            AfterFailure::GiveUp => {
                                warn!(%run, "metrics: gave up recording the last readings: {err}");
                                return;
                            }
                            AfterFailure::Retry(wait) => tokio::time::sleep(wait).await,
                        }
                    }
                }
            }
            if let (Some(odd), Some(feed)) = (odd, &feed)
                && readings::say_not_a_number(true, odd.step, from_step, said_odd)
            {
                let note = NewEvent::note(super::not_a_number_note(&odd, feed.sweep));
                said_odd = store.add_event(run, &note).await.is_ok();
            }
            match readings::after_batch(more, finishing) {
                AfterBatch::ReadOn => continue,
                AfterBatch::End => return,
                AfterBatch::Wait => tokio::select! {
                    _ = tokio::time::sleep(FOLLOW_INTERVAL) => {}
                    _ = finish.wake.notified() => {}
                },
            }
        }
    });
}

impl Reconciler {
    /// Starts following a running run's metrics, if its workflow names where they appear (once
    /// per attempt and daemon). A first attempt's file is read from its start; a later
    /// attempt's from where it stood when the attempt's first stage started (a file put in its
    /// place since, from its start, without the rows below the step it resumed at: those are
    /// the earlier attempts', kept by a trainer that rewrote the file), or from the stage's log
    /// start for a log.
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
        let mark = match (
            readings::read_from(log_start, sup.metrics_mark.is_some(), sup.run.attempt),
            sup.metrics_mark,
        ) {
            (ReadFrom::LogStart(start), _) => FileMark::at(start),
            (ReadFrom::Kept, Some(mark)) => mark,
            (ReadFrom::Start, _) => FileMark::default(),
            (ReadFrom::Kept | ReadFrom::Now, _) => FileMark::of(source.file()),
        };
        let attempt = u32::try_from(sup.run.attempt).unwrap_or(u32::MAX);
        let finish = Arc::new(Finish::default());
        let resumed_at = crate::workflow::checkpoints::resume_of(&sup.run.params.resolved).ok().flatten();
        let from_step = readings::from_step(resumed_at.map(|point| point.step));
        let followed = Followed { source, mark, from_step };
        let feed = sup
            .run
            .params
            .sweep
            .map(|of| SweepFeed { sweep: of.sweep, readings: Arc::clone(&self.sweep_readings) });
        spawn_worker(Arc::clone(&self.store), id, attempt, followed, Arc::clone(&finish), feed);
        sup.metrics = Some(MetricWatch { finish });
        Ok(())
    }

    /// A last look at the run's metrics before it leaves this daemon's hands (its end, or its
    /// requeue): a run that never reached `running` here (a stage that ended during start-up,
    /// or one a restarted daemon found ended) gets a worker that reads its source once, records
    /// it and ends; one that had its worker has it finish.
    pub(super) async fn catch_up_metrics(&mut self, id: Uuid) -> Result {
        self.watch_metrics(id).await?;
        if let Some(watch) = self.runs.get(&id).and_then(|sup| sup.metrics.as_ref()) {
            watch.finish();
        }
        Ok(())
    }
}
