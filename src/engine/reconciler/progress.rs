//! Progress and the stall watchdog in the reconciler. A worker per running run reads its step
//! (an HTTP poller, or a follower of a log or a JSONL file) and reports changes as
//! `Msg::Progress`; the loop records each change, and one timer per run (`Msg::StallCheck`)
//! fires at its stall deadline, which is measured from the last *recorded* change, so a
//! restarted daemon keeps the same clock.

use std::time::Duration;

use tokio::task::AbortHandle;
use tracing::{info, warn};
use uuid::Uuid;

use super::core::{progress, stalls};
use super::{Msg, Reconciler, Result};
use crate::logs::follow::{FileMark, Follower, last_in_tail};
use crate::model::{Millis, NewEvent, ProgressPoint, RunTrigger, now_millis};
use crate::workflow::progress::{Reading, ResolvedProgress, ResolvedSource};

/// How often a followed log is looked at for new lines.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);
/// The most of a log read in one go before the newest step is reported.
const FOLLOW_SLICE: u64 = 8 * 1024 * 1024;
/// The longest an HTTP progress reading may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// How much of a log's end is read for the last step once its stage exited.
const TAIL_WINDOW: u64 = 256 * 1024;

/// What the loop keeps about a running run's progress.
#[derive(Default)]
pub struct ProgressWatch {
    pub resolved: Option<ResolvedProgress>,
    /// Where this attempt's lines begin in a followed file.
    log_start: FileMark,
    /// The step a resuming attempt started from: lines before it are earlier attempts'.
    from_step: Option<u64>,
    worker: Option<AbortHandle>,
    timer: Option<(Millis, AbortHandle)>,
    pub last: Option<ProgressPoint>,
    /// The stall clock starts here: the last change of step, or reaching `running`.
    clock_from: Millis,
}

impl ProgressWatch {
    pub fn stop(&mut self) {
        if let Some(worker) = self.worker.take() {
            worker.abort();
        }
        if let Some((_, timer)) = self.timer.take() {
            timer.abort();
        }
    }
}

impl Drop for ProgressWatch {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Reconciler {
    /// Starts reading a running run's progress and arms its stall timer (once per run and
    /// daemon; a restarted daemon carries on from the recorded series).
    pub(super) async fn watch_progress(&mut self, id: Uuid) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        if sup.progress.is_some() {
            return Ok(());
        }
        self.watch_checkpoints(id).await?;
        self.watch_metrics(id).await?;
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        let mut watch = ProgressWatch::default();
        let run = sup.run.clone();
        if run.spec.progress.is_none() && run.spec.stall_timeout.is_none() {
            sup.progress = Some(watch);
            return Ok(());
        }
        watch.last = self.store.last_progress(id, run.attempt).await?;
        let since = self.store.running_since(id).await?.unwrap_or_else(now_millis);
        watch.clock_from = watch.last.map_or(since, |p| p.at.max(since));
        if let Some(last) = watch.last {
            self.telemetry.set_run_step(&id.to_string(), Some((last.step, last.total)));
        }
        let mut problem = None;
        if let Some(spec) = &run.spec.progress {
            let config = crate::environments::run_config(
                &run.spec.locked,
                &run.params.config,
                run.env_name.as_deref().unwrap_or("run"),
                &run.short_id(),
                &run.params.resolved,
            );
            let stages = &sup.stages;
            let log_of =
                |stage: &str| stages.iter().find(|s| s.plan.name == stage).map(|s| s.plan.log_path.clone());
            match spec.resolve(&run.params.resolved, &config, log_of) {
                Ok(resolved) => {
                    if let Some(path) = resolved.source.followed_file() {
                        let idx = spec
                            .log
                            .as_ref()
                            .and_then(|l| stages.iter().position(|s| s.plan.name == l.stage));
                        // Spawned by another daemon (or a JSONL file, which no stage owns): a
                        // first attempt's lines are all its own; a later attempt's are taken
                        // from now on.
                        watch.log_start = match (idx.and_then(|i| stages[i].log_start), sup.progress_mark) {
                            (Some(start), _) => FileMark::at(start),
                            (None, Some(mark)) => mark,
                            (None, None) if run.attempt == 1 => FileMark::default(),
                            (None, None) => FileMark::of(path),
                        };
                        watch.from_step = crate::workflow::checkpoints::resume_of(&run.params.resolved)
                            .ok()
                            .flatten()
                            .map(|point| point.step.max(0) as u64);
                    }
                    let known =
                        watch.last.map(|p| Reading { step: p.step as u64, total: p.total.map(|t| t as u64) });
                    watch.worker = Some(spawn_worker(
                        self.tx.clone(),
                        self.http.clone(),
                        id,
                        resolved.clone(),
                        known,
                        (watch.log_start, watch.from_step),
                    ));
                    watch.resolved = Some(resolved);
                }
                Err(err) => problem = Some(format!("cannot read progress: {err}")),
            }
        }
        sup.progress = Some(watch);
        if let Some(problem) = problem {
            self.store.add_event(id, &NewEvent::note(problem)).await?;
        }
        self.arm_stall_timer(id);
        Ok(())
    }
}

/// Reads a run's step from its source, reporting each change.
fn spawn_worker(
    tx: tokio::sync::mpsc::UnboundedSender<Msg>,
    http: reqwest::Client,
    id: Uuid,
    resolved: ResolvedProgress,
    known: Option<Reading>,
    (log_start, from_step): (FileMark, Option<u64>),
) -> AbortHandle {
    let task = tokio::spawn(async move {
        let mut last = known;
        match resolved.source.clone() {
            ResolvedSource::Http { url, every, .. } => {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(reading) = read_http(&http, &url, &resolved).await else { continue };
                    if last != Some(reading) {
                        last = Some(reading);
                        if tx.send(Msg::Progress { run: id, reading }).is_err() {
                            return;
                        }
                    }
                }
            }
            ResolvedSource::Log { path, .. } | ResolvedSource::Jsonl { path, .. } => {
                // Reads happen off the runtime's threads, a bounded slice at a time, so a file
                // written faster than it is read holds up neither exits nor other runs.
                let mut follower = Follower::from_mark(&path, log_start);
                // A malformed JSONL line is skipped; the first one is worth a warning.
                let mut warned = false;
                loop {
                    let resolved_now = resolved.clone();
                    let path_now = path.clone();
                    let pass = tokio::task::spawn_blocking(move || {
                        let (mut first, mut newest) = (None, None);
                        let more = follower
                            .read_some(FOLLOW_SLICE, |line| {
                                match resolved_now.read_followed_from(line, from_step) {
                                    Ok(Some(reading)) => {
                                        first.get_or_insert(reading);
                                        newest = Some(reading);
                                    }
                                    Ok(None) => {}
                                    Err(err) if !warned => {
                                        warned = true;
                                        warn!(
                                            "progress: skipping a line of {} that is not JSON: {err}",
                                            path_now.display()
                                        );
                                    }
                                    Err(_) => {}
                                }
                            })
                            .unwrap_or_else(|err| {
                                warn!("progress: cannot read {}: {err}", path_now.display());
                                false
                            });
                        (follower, first, newest, more, warned)
                    });
                    let Ok((back, first, newest, more, warned_now)) = pass.await else { return };
                    (follower, warned) = (back, warned_now);
                    // The attempt's first reading says where it started (a resumed attempt at
                    // its checkpoint's step): kept, even when the same pass reads further.
                    if let (None, Some(first)) = (last, first)
                        && newest != Some(first)
                    {
                        last = Some(first);
                        if tx.send(Msg::Progress { run: id, reading: first }).is_err() {
                            return;
                        }
                    }
                    if let Some(reading) = newest
                        && last != Some(reading)
                    {
                        last = Some(reading);
                        if tx.send(Msg::Progress { run: id, reading }).is_err() {
                            return;
                        }
                    }
                    if !more {
                        tokio::time::sleep(FOLLOW_INTERVAL).await;
                    }
                }
            }
        }
    });
    task.abort_handle()
}

impl Reconciler {
    /// Records a new step of a running run.
    pub(super) async fn on_progress(&mut self, id: Uuid, reading: Reading) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        let (state, attempt) = (sup.run.state, sup.run.attempt);
        let Some(watch) = sup.progress.as_mut() else { return Ok(()) };
        let progress::Counts::Record { point, moves_clock } =
            progress::reading(state, attempt, watch.last, reading, now_millis())
        else {
            return Ok(());
        };
        self.store.record_progress(id, &point).await?;
        if moves_clock {
            watch.clock_from = point.at;
        }
        watch.last = Some(point);
        self.telemetry.set_run_step(&id.to_string(), Some((point.step, point.total)));
        Ok(())
    }

    /// Makes sure a timer fires at the run's stall deadline (or earlier, then it re-arms).
    fn arm_stall_timer(&mut self, id: Uuid) {
        let Some(sup) = self.runs.get_mut(&id) else { return };
        let Some(timeout) = sup.run.spec.stall_timeout else { return };
        let Some(watch) = sup.progress.as_mut() else { return };
        let deadline = watch.clock_from + timeout.0.as_millis() as Millis;
        if watch.timer.as_ref().is_some_and(|(at, _)| *at <= deadline) {
            return; // it fires first and looks again
        }
        if let Some((_, old)) = watch.timer.take() {
            old.abort();
        }
        let tx = self.tx.clone();
        let wait = Duration::from_millis((deadline - now_millis()).max(0) as u64);
        let task = tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = tx.send(Msg::StallCheck { run: id, deadline });
        });
        watch.timer = Some((deadline, task.abort_handle()));
    }

    /// A stall timer fired: fail (or retry) the run if its step still has not moved.
    pub(super) async fn on_stall_check(&mut self, id: Uuid, deadline: Millis) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        let Some(watch) = sup.progress.as_mut() else { return Ok(()) };
        if watch.timer.as_ref().is_some_and(|(at, _)| *at == deadline) {
            watch.timer = None;
        }
        match stalls::decide(&sup.run, watch.clock_from, watch.last, now_millis()) {
            stalls::Verdict::None => return Ok(()),
            stalls::Verdict::Until(_) => {
                self.arm_stall_timer(id);
                return Ok(());
            }
            stalls::Verdict::Fail { reason } => {
                info!(run = %sup.run.short_id(), "{reason}");
                self.transition(id, RunTrigger::Fail, Some(&reason)).await?;
            }
            stalls::Verdict::Retry { reason } => {
                info!(run = %sup.run.short_id(), "{reason}");
                self.transition(id, RunTrigger::Retry, Some(&reason)).await?;
            }
        }
        self.drive(id).await
    }

    /// Takes a last reading of the progress as a stage's end is about to decide its run
    /// (`stage_end::last_reading` says which: the follower may not have seen the log's last
    /// lines yet, or, for a stage that finished during start-up, was not started), records it
    /// before the end is, and answers the run's last step for `require_total`.
    pub(super) async fn last_step(
        &mut self,
        id: Uuid,
        how: super::core::stage_end::LastReading,
    ) -> Result<Option<ProgressPoint>> {
        let Some(sup) = self.runs.get(&id) else { return Ok(None) };
        if sup.progress.is_none() {
            self.watch_progress(id).await?;
        }
        let Some(sup) = self.runs.get(&id) else { return Ok(None) };
        let http = how == super::core::stage_end::LastReading::TailOrHttp;
        let resolved = sup.progress.as_ref().and_then(|w| w.resolved.clone());
        let (log_start, from_step) =
            sup.progress.as_ref().map_or((FileMark::default(), None), |w| (w.log_start, w.from_step));
        let followed = resolved.as_ref().and_then(|r| Some((r, r.source.followed_file()?)));
        let last_reading = match (&resolved, followed) {
            (_, Some((r, path))) => {
                // Off the loop's thread: a read must not hold up other runs' exits.
                let (path, r) = (path.to_path_buf(), r.clone());
                let read = move || {
                    let from = log_start.start_at(&path);
                    last_in_tail(&path, from, TAIL_WINDOW, |line| {
                        r.read_followed_from(line, from_step).ok().flatten()
                    })
                };
                tokio::task::spawn_blocking(read).await.ok().flatten()
            }
            // A request can take seconds: only when the outcome depends on it.
            (Some(r @ ResolvedProgress { source: ResolvedSource::Http { url, .. }, .. }), _) if http => {
                read_http(&self.http, url, r).await
            }
            _ => None,
        };
        if let Some(reading) = last_reading {
            self.on_progress(id, reading).await?;
        }
        Ok(self.runs.get(&id).and_then(|s| s.progress.as_ref()).and_then(|w| w.last))
    }

    /// The run leaves supervision: its gauge goes.
    pub(super) fn forget_progress(&self, id: Uuid) {
        self.telemetry.set_run_step(&id.to_string(), None);
    }
}

async fn read_http(http: &reqwest::Client, url: &str, resolved: &ResolvedProgress) -> Option<Reading> {
    let response = http.get(url).timeout(HTTP_TIMEOUT).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let answer: serde_json::Value = response.json().await.ok()?;
    resolved.read_json(&answer)
}
