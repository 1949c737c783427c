//! The run lifecycle in the reconciler: start stages in order, count them up, apply the
//! completion rule when one exits, fail or retry, and stop stages in reverse order.

use std::time::Duration;

use rustix::process::Signal;
use tracing::{debug, info};
use uuid::Uuid;

use super::supervised::StopStep;
use super::{Msg, Owner, ProcessEnd, Reconciler, Result, slurm};
use crate::engine::store::{RunMove, StoreError};
use crate::launch::probe::{NotReady, ReadyHow, wait_ready};
use crate::launch::process::signal_group;
use crate::launch::spawn::SpawnError;
use crate::launch::status::Started;
use crate::model::{Exit, Millis, NewEvent, ProcessState, Run, RunEvent, RunState, now_millis};
use crate::workflow::retry::AfterFailure;

impl Reconciler {
    /// Adopts changes others made (stop requests from the CLI) to the runs we supervise.
    pub(super) async fn sync_from_store(&mut self) -> Result {
        // Others only ever move started runs (a stop request, or a reaper deciding this node
        // was lost); ended runs are ours alone.
        let active = self.store.active_runs().await?;
        let mut seen = std::collections::HashSet::new();
        for run in active {
            seen.insert(run.id);
            let changed = match self.runs.get(&run.id) {
                Some(sup) => sup.run.version < run.version,
                None => false,
            };
            if changed {
                let id = run.id;
                if let Some(sup) = self.runs.get_mut(&id) {
                    sup.run = run;
                }
                self.drive(id).await?;
            }
        }
        // A run we think is active but that our token no longer holds was taken over.
        let token = self.store_token();
        let missing: Vec<Uuid> = self
            .runs
            .iter()
            .filter(|(id, sup)| !sup.run.state.is_terminal() && !seen.contains(id))
            .map(|(id, _)| *id)
            .collect();
        for id in missing {
            match self.base.run(id).await? {
                Some(run) if run.fence == token => {}
                _ => self.abandon_run(id, "its claim was taken over while this node looked lost"),
            }
        }
        Ok(())
    }

    pub(super) fn store_token(&self) -> Option<i64> {
        self.node.lease.as_ref().map(|l| l.token)
    }

    /// Does whatever the run's current state asks for next. Safe to call at any time.
    pub(super) async fn drive(&mut self, id: Uuid) -> Result {
        loop {
            let Some(sup) = self.runs.get_mut(&id) else {
                return Ok(());
            };
            match sup.run.state {
                RunState::Pending => {}
                RunState::Running => {
                    if sup.progress.is_none() {
                        self.watch_progress(id).await?;
                    }
                }
                RunState::Starting => {
                    match sup.stages.iter().position(|s| s.record.state != ProcessState::Up) {
                        None => {
                            self.transition(id, RunEvent::AllStagesUp, None).await?;
                            continue;
                        }
                        Some(idx) if sup.stages[idx].record.state == ProcessState::Pending => {
                            self.spawn(id, idx).await?
                        }
                        Some(_) => {}
                    }
                }
                RunState::Stopping
                | RunState::Retrying
                | RunState::Stopped
                | RunState::Completed
                | RunState::Failed => {
                    sup.cancel_all_readiness();
                    if let Some(watch) = sup.progress.as_mut() {
                        watch.stop();
                    }
                    if sup.stages.iter().any(|s| s.record.state == ProcessState::Spawning) {
                        // A stage is being started: stop it once we know who it is.
                    } else if let Some(idx) = sup.next_to_stop() {
                        self.stop_stage(id, idx).await?;
                    } else if sup.run.state == RunState::Stopping {
                        self.transition(id, RunEvent::AllStagesGone, None).await?;
                        continue;
                    } else if sup.run.state == RunState::Retrying {
                        if self.requeue_for_retry(id).await? {
                            continue;
                        }
                    } else {
                        debug!(run = %sup.run.short_id(), state = %sup.run.state, "done");
                        self.forget_progress(id);
                        self.runs.remove(&id);
                        self.node.ledger.forget(&id);
                    }
                }
            }
            return Ok(());
        }
    }

    /// Applies `event` to a supervised run; on a conflict, adopts what the store holds instead.
    pub(super) async fn transition(&mut self, id: Uuid, event: RunEvent, reason: Option<&str>) -> Result {
        self.transition_at(id, event, reason, None).await
    }

    /// `transition`; a terminal state ends at `exited_at` when given (the deciding exit's time).
    async fn transition_at(
        &mut self,
        id: Uuid,
        event: RunEvent,
        reason: Option<&str>,
        exited_at: Option<Millis>,
    ) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        let moved = match exited_at {
            Some(at) => {
                let at = run_end_time(at, sup.run.started_at, now_millis());
                self.store.transition_ended(&sup.run, event, reason, at).await
            }
            None => self.store.transition(&sup.run, event, reason, None).await,
        };
        self.adopt(id, moved.map(Some)).await
    }

    /// Takes the outcome of a move of run `id`: the moved run; or, when the store's run had
    /// changed under us (a stop request), what the store holds now.
    async fn adopt(&mut self, id: Uuid, moved: std::result::Result<Option<Run>, StoreError>) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        match moved {
            Ok(Some(run)) => {
                info!(run = %run.short_id(), state = %run.state, reason = run.reason.as_deref().unwrap_or(""), "transition");
                sup.run = run;
                self.notify_run(&self.runs[&id].run);
                Ok(())
            }
            Ok(None) | Err(StoreError::Conflict { .. }) => {
                if let Some(run) = self.store.run(id).await? {
                    sup.run = run;
                }
                Ok(())
            }
            Err(StoreError::Illegal(err)) => {
                // Our view was stale in a way a re-read explains (e.g. already stopping).
                debug!("ignored: {err}");
                Ok(())
            }
            Err(err) => Err(err),
        }
    }

    pub(super) async fn fail(&mut self, id: Uuid, reason: &str) -> Result {
        self.fail_after(id, reason, None).await
    }

    /// Fails a started run, or — when a stage's `exit` is transient by the workflow's retry
    /// policy and attempts are left — sends it to `retrying`.
    pub(super) async fn fail_after(&mut self, id: Uuid, reason: &str, exit: Option<Exit>) -> Result {
        self.fail_after_at(id, reason, exit, None).await
    }

    /// `fail_after` for a stage that ended at `exited_at`: a failed run ends then.
    async fn fail_after_at(
        &mut self,
        id: Uuid,
        reason: &str,
        exit: Option<Exit>,
        exited_at: Option<Millis>,
    ) -> Result {
        let Some(sup) = self.runs.get(&id) else { return Ok(()) };
        match failure_move(&sup.run, reason, exit) {
            Some((event, reason)) => self.transition_at(id, event, Some(&reason), exited_at).await,
            None => Ok(()),
        }
    }

    /// Queues a retrying run whose stages are all gone as its next attempt, after the policy's
    /// backoff. True if the run changed under us and should be looked at again.
    async fn requeue_for_retry(&mut self, id: Uuid) -> Result<bool> {
        let Some(sup) = self.runs.get(&id) else { return Ok(false) };
        let run = sup.run.clone();
        let wait = run.spec.retry.as_ref().map_or(Duration::ZERO, |p| p.backoff_after(run.attempt));
        let not_before = now_millis() + wait.as_millis() as i64;
        let reason = run.reason.clone().unwrap_or_else(|| "retry".into());
        match self.store.requeue(&run, RunEvent::AllStagesGone, &reason, not_before).await {
            Ok(queued) => {
                info!(run = %queued.short_id(), attempt = queued.attempt, "queued again for a retry");
                self.forget_progress(id);
                self.runs.remove(&id);
                self.node.ledger.forget(&id);
                Ok(false)
            }
            Err(StoreError::Conflict { .. }) => {
                // Someone stopped it meanwhile: adopt what the store holds and decide again.
                if let (Some(fresh), Some(sup)) = (self.store.run(id).await?, self.runs.get_mut(&id)) {
                    sup.run = fresh;
                }
                Ok(true)
            }
            Err(err) => Err(err),
        }
    }

    async fn spawn(&mut self, id: Uuid, idx: usize) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        let stage = &mut sup.stages[idx];
        stage.record.state = ProcessState::Spawning;
        // Committed before the shim exists: after a crash, "spawning" means "look for its files".
        self.store.update_stage(stage, None).await?;
        if sup.run.spec.launcher == crate::workflow::Launcher::Slurm {
            self.submit_slurm(id, idx);
            return Ok(());
        }
        sup.log_starts[idx] = Some(std::fs::metadata(&sup.plans[idx].log_path).map_or(0, |m| m.len()));
        let plan = sup.plans[idx].clone();
        let files = sup.files[idx].clone();
        self.launch(Owner::Stage { run: id, idx }, plan, files);
        Ok(())
    }

    pub(super) async fn on_spawned(
        &mut self,
        id: Uuid,
        idx: usize,
        result: std::result::Result<Started, SpawnError>,
    ) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        let name = sup.stages[idx].name.clone();
        match result {
            Ok(started) => {
                let at_once = sup.run.state == RunState::Starting && sup.plans[idx].up_at_once();
                let stage = &mut sup.stages[idx];
                stage.record.started(
                    ProcessState::Starting,
                    started.started_at,
                    started.shim,
                    started.process,
                );
                let pid = stage.record.process.as_ref().map_or_else(|| "?".into(), |p| p.pid.to_string());
                let mut events = vec![NewEvent::stage(
                    &name,
                    format!("started (pid {pid}): {}", crate::secrets::redact_argv(&sup.plans[idx].argv)),
                )];
                if at_once {
                    // Up at once, decided here (a task would race the stage's own exit). Its start,
                    // its being up and, with the last stage up, the run's running: one commit.
                    let how = ReadyHow::from(sup.plans[idx].up_at_once_how());
                    stage.record.state = ProcessState::Up;
                    stage.ready_at = Some(now_millis());
                    events.push(NewEvent::stage(&name, format!("up ({how})")));
                    let all_up = sup.stages.iter().all(|s| s.record.state == ProcessState::Up);
                    let then = all_up.then_some(RunMove {
                        run: &sup.run,
                        event: RunEvent::AllStagesUp,
                        reason: None,
                        ended_at: None,
                    });
                    let moved = self.store.record_stage(&sup.stages[idx], &events, then).await?;
                    if all_up {
                        self.adopt(id, Ok(moved)).await?;
                    }
                } else {
                    self.store.update_stage(&sup.stages[idx], events.first()).await?;
                    if sup.run.state == RunState::Starting {
                        self.start_readiness(id, idx, Duration::ZERO);
                    }
                }
            }
            Err(err) => {
                let stage = &mut sup.stages[idx];
                let what = stage.record.exited(None, Some(&err.to_string()), now_millis());
                self.store.update_stage(stage, Some(&NewEvent::stage(&name, what))).await?;
                self.fail(id, &format!("stage '{name}' failed to start: {err}")).await?;
            }
        }
        self.drive(id).await
    }

    pub(super) fn start_readiness(&mut self, id: Uuid, idx: usize, elapsed: Duration) {
        let Some(sup) = self.runs.get_mut(&id) else {
            return;
        };
        let plan = sup.plans[idx].clone();
        let tx = self.tx.clone();
        let http = self.http.clone();
        let task = tokio::spawn(async move {
            let msg = match wait_ready(&plan, elapsed, &http).await {
                Ok(how) => Msg::Ready { run: id, idx, how },
                Err(error) => Msg::NotReady { run: id, idx, error },
            };
            let _ = tx.send(msg);
        });
        sup.readiness[idx] = Some(task.abort_handle());
    }

    pub(super) async fn on_ready(&mut self, id: Uuid, idx: usize, how: ReadyHow) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        sup.readiness[idx] = None;
        let stage = &mut sup.stages[idx];
        if stage.record.state != ProcessState::Starting {
            return Ok(());
        }
        stage.record.state = ProcessState::Up;
        stage.ready_at = Some(now_millis());
        let event = NewEvent::stage(&stage.name, format!("up ({how})"));
        self.store.update_stage(stage, Some(&event)).await?;
        self.drive(id).await
    }

    pub(super) async fn on_not_ready(&mut self, id: Uuid, idx: usize, error: NotReady) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        sup.readiness[idx] = None;
        let name = sup.stages[idx].name.clone();
        self.store.add_event(id, &NewEvent::stage(&name, error.to_string())).await?;
        self.fail(id, &format!("stage '{name}' {error}")).await?;
        self.drive(id).await
    }

    pub(super) async fn on_ended(&mut self, id: Uuid, idx: usize, end: ProcessEnd) -> Result {
        self.end_stage(id, idx, end, false).await
    }

    /// Records a stage's end and decides its run. `again`: a retry of an end whose commit
    /// failed part-way, so a stage already recorded still gets its run decided.
    pub(super) async fn end_stage(&mut self, id: Uuid, idx: usize, end: ProcessEnd, again: bool) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        sup.cancel_readiness(idx);
        let live = sup.stages[idx].record.state.is_live();
        if !live && !again {
            return Ok(()); // already recorded (a repair and a watcher both reported it)
        }
        let name = sup.stages[idx].name.clone();
        // Changed in memory only once committed: a failed commit is tried again from scratch.
        let mut ended = sup.stages[idx].clone();
        let what = end.record_on(&mut ended.record);
        let exit = end.exit();
        let exited_at = match &end {
            ProcessEnd::Finished(finished) => Some(finished.ended_at),
            ProcessEnd::Vanished(_) => None,
        };
        let decision = self.decide_end(id, &name, &what, exit).await?;
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        let ended_at = exited_at.map(|at| run_end_time(at, sup.run.started_at, now_millis()));
        if live {
            // The stage's end and the run state it decides land in one commit.
            let then = decision.as_ref().map(|(event, reason)| RunMove {
                run: &sup.run,
                event: *event,
                reason: Some(reason),
                ended_at,
            });
            let event = NewEvent::stage(&name, what);
            // An error means nothing landed: the end is tried again from scratch.
            let moved = self.store.record_stage(&ended, std::slice::from_ref(&event), then).await?;
            if let ProcessEnd::Finished(finished) = &end {
                self.metrics.exit_detection.observe_ms((now_millis() - finished.ended_at) as f64);
            }
            self.metrics.stage_ended(exit);
            sup.stages[idx] = ended;
            if decision.is_some() {
                self.adopt(id, Ok(moved)).await?;
            }
        } else if let Some((event, reason)) = decision {
            self.transition_at(id, event, Some(&reason), exited_at).await?;
        }
        self.drive(id).await
    }

    /// What a stage's end does to its run, by the run's state as we know it: complete it, fail
    /// it, send it to a retry, or nothing (it is already stopping or ended).
    async fn decide_end(
        &mut self,
        id: Uuid,
        name: &str,
        what: &str,
        exit: Option<Exit>,
    ) -> Result<Option<(RunEvent, String)>> {
        let Some(sup) = self.runs.get(&id) else { return Ok(None) };
        let deciding = sup.run.spec.deciding_stages().contains(&name);
        let reason = match sup.run.state {
            RunState::Starting => match exit {
                Some(_) => format!("stage '{name}' {what} during start-up"),
                None => format!("stage '{name}' {what}"),
            },
            RunState::Running if deciding && exit.is_some_and(Exit::success) => {
                return Ok(Some(match self.short_of_total(id, name).await? {
                    Some(reason) => (RunEvent::Fail, reason),
                    None => (RunEvent::Complete, format!("stage '{name}' finished")),
                }));
            }
            RunState::Running if deciding => format!("stage '{name}' {what}"),
            RunState::Running => format!("stage '{name}' {what} while the run was running"),
            _ => return Ok(None),
        };
        Ok(failure_move(&sup.run, &reason, exit))
    }

    /// One step of stopping stage `idx`: SIGTERM to its process group, SIGKILL after the grace.
    pub(super) async fn stop_stage(&mut self, id: Uuid, idx: usize) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        if sup.stop[idx] != StopStep::Running {
            return Ok(()); // signalled already; its exit or the grace timer comes next
        }
        sup.stop[idx] = StopStep::Termed;
        let stage = &sup.stages[idx];
        let grace = sup.run.spec.stop_grace.map_or(self.config.stop_grace, |d| d.0);
        if let Some(job) = stage.slurm_job {
            // Slurm escalates to SIGKILL itself after its KillWait.
            slurm::cancel(job);
            let message = format!("scancel Slurm job {job}: SIGTERM to the stage process");
            self.store.add_event(id, &NewEvent::stage(&stage.name, message)).await?;
            return Ok(());
        }
        let sent = stage.record.process.as_ref().is_some_and(|p| signal_group(p, Signal::TERM));
        let message = if sent {
            format!("sent SIGTERM to its process group; SIGKILL in {}", crate::workflow::Dur(grace))
        } else {
            "already exiting; waiting for its status".to_string()
        };
        self.store.add_event(id, &NewEvent::stage(&stage.name, message)).await?;
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let _ = tx.send(Msg::GraceElapsed { run: id, idx });
        });
        Ok(())
    }

    pub(super) async fn on_grace_elapsed(&mut self, id: Uuid, idx: usize) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        let stage = &sup.stages[idx];
        if !stage.record.state.is_live() || sup.stop[idx] != StopStep::Termed {
            return Ok(());
        }
        sup.stop[idx] = StopStep::Killed;
        if stage.record.process.as_ref().is_some_and(|p| signal_group(p, Signal::KILL)) {
            let event = NewEvent::stage(&stage.name, "grace period over: sent SIGKILL to its process group");
            self.store.add_event(id, &event).await?;
        }
        Ok(())
    }
}

/// A failure of a started run: `retry` when the stage's `exit` is transient by the workflow's
/// retry policy and attempts are left, else `fail`. None for a run not starting or running.
fn failure_move(run: &Run, reason: &str, exit: Option<Exit>) -> Option<(RunEvent, String)> {
    if !matches!(run.state, RunState::Starting | RunState::Running) {
        return None;
    }
    let policy = run.spec.retry.as_ref();
    Some(match crate::workflow::retry::after_exit(policy, run.attempt, exit.and_then(Exit::code)) {
        AfterFailure::RetryIn(wait) => {
            let max = policy.map_or(1, |p| p.max_attempts);
            let reason = format!(
                "{reason} (transient by the retry policy): attempt {} of {max} starts in {}",
                run.attempt + 1,
                crate::workflow::Dur(wait)
            );
            (RunEvent::Retry, reason)
        }
        AfterFailure::Fail => (RunEvent::Fail, reason.to_string()),
    })
}

/// When a run that a stage's exit decided ends: at that exit, kept within [started, now] so
/// a skewed or forged time cannot give a negative or future duration.
fn run_end_time(exited_at: Millis, run_started_at: Option<Millis>, now: Millis) -> Millis {
    exited_at.min(now).max(run_started_at.unwrap_or(Millis::MIN))
}

#[cfg(test)]
mod tests {
    use super::run_end_time;

    #[test]
    fn a_run_ends_at_its_deciding_exit_within_its_lifetime() {
        assert_eq!(run_end_time(1_500, Some(1_000), 9_000), 1_500, "the exit's time, not now");
        assert_eq!(run_end_time(500, Some(1_000), 9_000), 1_000, "never before it started");
        assert_eq!(run_end_time(20_000, Some(1_000), 9_000), 9_000, "never in the future");
        assert_eq!(run_end_time(1_500, None, 9_000), 1_500);
    }
}
