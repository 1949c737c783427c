//! The run lifecycle in the reconciler: start stages in order, count them up, apply the
//! completion rule when one exits, fail or retry, and stop stages in reverse order.

use std::time::Duration;

use rustix::process::Signal;
use tracing::{debug, info};
use uuid::Uuid;

use super::core::lifecycle::{StageView, Step, next_step};
use super::core::retries::{self, spawn_backoff};
use super::core::stage_end::{self, run_end_time};
use super::core::stages;
use super::supervised::StopStep;
use super::{Msg, Owner, ProcessEnd, Reconciler, Result, slurm};
use crate::engine::store::{RunMove, StoreError};
use crate::launch::probe::{ReadyHow, wait_ready};
use crate::launch::process::signal_group;
use crate::launch::spawn::SpawnError;
use crate::launch::status::Started;
use crate::model::{
    Exit, Millis, NewEvent, ProcessState, ProcessTrigger, Run, RunState, RunTrigger, now_millis,
};

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
                // Behind any of its messages still held, so it acts on what they record.
                self.handle_or_hold(Msg::Drive { run: id }).await?;
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

    /// Does whatever the run's current state asks for next (`core::lifecycle`). Safe to call at
    /// any time.
    pub(super) async fn drive(&mut self, id: Uuid) -> Result {
        loop {
            let Some(sup) = self.runs.get_mut(&id) else {
                return Ok(());
            };
            super::time_limit::arm(sup, &self.tx);
            let now = std::time::Instant::now();
            let stages: Vec<StageView> = sup
                .stages
                .iter()
                .map(|s| StageView {
                    state: s.stage.record.state,
                    spawn_due: s.spawn_after.is_none_or(|at| at <= now),
                })
                .collect();
            let ending = !matches!(sup.run.state, RunState::Pending | RunState::Starting | RunState::Running);
            if ending {
                sup.cancel_all_readiness();
                if let Some(watch) = sup.progress.as_mut() {
                    watch.stop();
                }
                if let Some(watch) = sup.metrics.as_ref() {
                    watch.finish();
                }
                // Its follower stays: the run's last look at its checkpoints reads on from it.
                if let Some(watch) = sup.checkpoints.as_mut() {
                    watch.stop();
                }
            }
            match next_step(sup.run.state, sup.run.after_stop(), &stages) {
                Step::Wait => {}
                Step::Watch => {
                    if sup.progress.is_none() {
                        self.watch_progress(id).await?;
                    }
                }
                Step::AllStagesUp => {
                    self.transition(id, RunTrigger::AllStagesUp, None).await?;
                    continue;
                }
                Step::Spawn(idx) => self.spawn(id, idx).await?,
                Step::StopStage(idx) => self.stop_stage(id, idx).await?,
                Step::RequeuePreempted => {
                    if self.requeue_preempted(id).await? {
                        continue;
                    }
                }
                Step::ContinueExploited => {
                    if self.continue_exploited(id).await? {
                        continue;
                    }
                }
                Step::AllStagesGone => {
                    self.transition(id, RunTrigger::AllStagesGone, None).await?;
                    continue;
                }
                Step::RequeueRetry => {
                    if self.requeue_for_retry(id).await? {
                        continue;
                    }
                }
                Step::LetGo => {
                    debug!(run = %sup.run.short_id(), state = %sup.run.state, "done");
                    // Its last checkpoints are its trained weights, also when it failed.
                    self.catch_up_checkpoints(id).await?;
                    self.catch_up_metrics(id).await?;
                    self.forget_progress(id);
                    self.runs.remove(&id);
                    self.node.ledger.forget(&id);
                }
            }
            return Ok(());
        }
    }

    /// Applies `event` to a supervised run; on a conflict, adopts what the store holds instead.
    pub(super) async fn transition(&mut self, id: Uuid, trigger: RunTrigger, reason: Option<&str>) -> Result {
        self.transition_at(id, trigger, reason, None).await
    }

    /// `transition`; a terminal state ends at `exited_at` when given (the deciding exit's time).
    async fn transition_at(
        &mut self,
        id: Uuid,
        trigger: RunTrigger,
        reason: Option<&str>,
        exited_at: Option<Millis>,
    ) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        let moved = match exited_at {
            Some(at) => {
                let at = run_end_time(at, sup.run.started_at, now_millis());
                self.store.transition_ended(&sup.run, trigger, reason, at).await
            }
            None => self.store.transition(&sup.run, trigger, reason, None).await,
        };
        self.adopt(id, moved.map(Some)).await
    }

    /// Takes the outcome of a move of run `id`: the moved run; or, when the store's run had
    /// changed under us (a stop request), what the store holds now.
    pub(super) async fn adopt(
        &mut self,
        id: Uuid,
        moved: std::result::Result<Option<Run>, StoreError>,
    ) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        match moved {
            Ok(Some(run)) => {
                info!(run = %run.short_id(), state = %run.state, reason = run.reason.as_deref().unwrap_or(""), "transition");
                // Its notification, if any, was written with the move; the poster is rung
                // after the batch. A crash here must not lose it (the restart tests' point).
                if crate::webhooks::Payload::of_run(&run).is_some() {
                    crate::failpoint::Failpoint::WebhooksRunMoved.hit();
                    self.outbox_news = true;
                }
                sup.run = run;
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
        match stage_end::failure_move(&sup.run, reason, exit) {
            Some((trigger, reason)) => self.transition_at(id, trigger, Some(&reason), exited_at).await,
            None => Ok(()),
        }
    }

    /// Queues a retrying run whose stages are all gone as its next attempt, after the policy's
    /// backoff. True if the run changed under us and should be looked at again.
    async fn requeue_for_retry(&mut self, id: Uuid) -> Result<bool> {
        self.catch_up_checkpoints(id).await?;
        self.catch_up_metrics(id).await?;
        let Some(sup) = self.runs.get(&id) else { return Ok(false) };
        let run = sup.run.clone();
        let retries::Requeue { not_before, reason } = retries::requeue(&run, now_millis());
        let requeued = match self.next_params(&run).await? {
            Some((params, note)) => {
                self.store
                    .requeue_resuming(&run, RunTrigger::AllStagesGone, &reason, not_before, &params, &note)
                    .await
            }
            None => self.store.requeue(&run, RunTrigger::AllStagesGone, &reason, not_before).await,
        };
        match requeued {
            Ok(queued) => {
                info!(run = %queued.short_id(), attempt = queued.attempt, "queued again for a retry");
                self.retry_wakeups.add(id, not_before);
                self.let_go(id);
                Ok(false)
            }
            Err(StoreError::Conflict { .. }) => {
                // Someone stopped it meanwhile: adopt what the store holds and decide again.
                self.adopt_stored(id).await?;
                Ok(true)
            }
            Err(err) => Err(err),
        }
    }

    /// A run queued again leaves this node's supervision: its gauge, its place in the loop and
    /// its ledger line go.
    pub(super) fn let_go(&mut self, id: Uuid) {
        self.forget_progress(id);
        self.runs.remove(&id);
        self.node.ledger.forget(&id);
    }

    /// The run as the store holds it now replaces the loop's copy (a write lost a race).
    pub(super) async fn adopt_stored(&mut self, id: Uuid) -> Result {
        if let (Some(fresh), Some(sup)) = (self.store.run(id).await?, self.runs.get_mut(&id)) {
            sup.run = fresh;
        }
        Ok(())
    }

    async fn spawn(&mut self, id: Uuid, idx: usize) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        let tracked = &mut sup.stages[idx];
        let mut spawning = tracked.stage.clone();
        spawning.record.apply(ProcessTrigger::Spawn)?;
        // Committed before the shim exists: after a crash, "spawning" means "look for its files".
        // Held in memory only once it landed: until then the stage is still to be started.
        self.store.update_stage(&spawning, None).await?;
        tracked.stage = spawning;
        tracked.spawn_after = None;
        if sup.run.spec.launcher == crate::workflow::Launcher::Slurm {
            self.submit_slurm(id, idx);
            return Ok(());
        }
        tracked.log_start = Some(std::fs::metadata(&tracked.plan.log_path).map_or(0, |m| m.len()));
        let plan = tracked.plan.clone();
        if sup.progress_mark.is_none() {
            let file = sup.run.spec.progress.as_ref().and_then(|p| p.jsonl_file(&sup.run.params.resolved));
            sup.progress_mark = file.map(|file| crate::logs::follow::FileMark::of(&file));
        }
        if sup.metrics_mark.is_none() {
            let file = sup.run.spec.metrics.as_ref().and_then(|m| m.jsonl_file(&sup.run.params.resolved));
            sup.metrics_mark = file.map(|file| crate::logs::follow::FileMark::of(&file));
        }
        let files = tracked.files.clone();
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
        if sup.stages[idx].stage.record.state != ProcessState::Spawning {
            // Recorded already (this is a replay whose later step could not land): go on from there.
            return self.drive(id).await;
        }
        match result {
            Ok(started) => self.record_start(id, idx, started).await?,
            Err(err) if err.is_transient() => self.spawn_later(id, idx, &err).await?,
            Err(err) => {
                let tracked = &sup.stages[idx];
                let name = tracked.stage.name.clone();
                let mut failed = tracked.stage.clone();
                let what = failed.record.exited(None, Some(&err.to_string()), now_millis())?;
                let reason = format!("stage '{name}' failed to start: {err}");
                // The stage's failure and its run's move: one commit.
                let then = stage_end::failure_move(&sup.run, &reason, None);
                let moved = self
                    .store
                    .record_stage(&failed, &[NewEvent::stage(&name, what)], as_move(&sup.run, &then))
                    .await?;
                sup.stages[idx].stage = failed;
                self.adopt(id, Ok(moved)).await?;
            }
        }
        self.drive(id).await
    }

    /// Records a started stage: its start and, when nothing needs to be awaited, its being up
    /// and (for the last stage) the run's `running`, in one commit. The loop's state changes
    /// once that landed.
    async fn record_start(&mut self, id: Uuid, idx: usize, started: Started) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        let tracked = &sup.stages[idx];
        let name = tracked.stage.name.clone();
        let states: Vec<ProcessState> = sup.stages.iter().map(|s| s.stage.record.state).collect();
        let record = stages::started(sup.run.state, tracked.plan.up_at_once(), idx, &states);
        let mut stage = tracked.stage.clone();
        stage.record.started(started.started_at, started.shim, started.process)?;
        let pid = stage.record.process.as_ref().map_or_else(|| "?".into(), |p| p.pid.to_string());
        let mut events = vec![NewEvent::stage(
            &name,
            format!("started (pid {pid}): {}", crate::secrets::redact_argv(&tracked.plan.argv)),
        )];
        let all_up = match record {
            stages::Started::Recorded { readiness } => {
                self.store.update_stage(&stage, events.first()).await?;
                sup.stages[idx].stage = stage;
                sup.stages[idx].spawn_failures = 0;
                if readiness {
                    self.start_readiness(id, idx, Duration::ZERO);
                }
                return Ok(());
            }
            stages::Started::Up { all_up } => all_up,
        };
        // Up at once, decided here (a task would race the stage's own exit).
        let how = ReadyHow::from(tracked.plan.up_at_once_how());
        stage.record.apply(ProcessTrigger::Ready)?;
        stage.ready_at = Some(now_millis());
        events.push(NewEvent::stage(&name, format!("up ({how})")));
        let then = all_up.then_some(RunMove {
            run: &sup.run,
            trigger: RunTrigger::AllStagesUp,
            reason: None,
            ended_at: None,
        });
        let moved = self.store.record_stage(&stage, &events, then).await?;
        sup.stages[idx].stage = stage;
        sup.stages[idx].spawn_failures = 0;
        if all_up {
            self.adopt(id, Ok(moved)).await?;
        }
        Ok(())
    }

    /// A transient failure to start stage `idx` (the machine is short of processes, files or
    /// memory for a moment): the stage goes back to pending, with an event, and is started
    /// again after a backoff. Never a failure of its run.
    async fn spawn_later(&mut self, id: Uuid, idx: usize, err: &SpawnError) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        let tracked = &sup.stages[idx];
        let wait = spawn_backoff(tracked.spawn_failures);
        let mut pending = tracked.stage.clone();
        pending.record.apply(ProcessTrigger::Defer)?;
        let event = NewEvent::stage(
            &pending.name,
            format!("could not start yet: {err}; trying again in {}", crate::workflow::Dur(wait)),
        );
        self.store.update_stage(&pending, Some(&event)).await?;
        info!(run = %sup.run.short_id(), stage = %pending.name, "{}", event.message);
        let tracked = &mut sup.stages[idx];
        tracked.stage = pending;
        tracked.spawn_failures = tracked.spawn_failures.saturating_add(1);
        tracked.spawn_after = Some(std::time::Instant::now() + wait);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = tx.send(Msg::Drive { run: id });
        });
        Ok(())
    }

    pub(super) fn start_readiness(&mut self, id: Uuid, idx: usize, elapsed: Duration) {
        let Some(sup) = self.runs.get_mut(&id) else {
            return;
        };
        let plan = sup.stages[idx].plan.clone();
        let tx = self.tx.clone();
        let http = self.http.clone();
        let task = tokio::spawn(async move {
            let msg = match wait_ready(&plan, elapsed, &http).await {
                Ok(how) => Msg::Ready { run: id, idx, how },
                Err(error) => Msg::NotReady { run: id, idx, error: error.to_string() },
            };
            let _ = tx.send(msg);
        });
        sup.stages[idx].readiness = Some(task.abort_handle());
    }

    pub(super) async fn on_ready(&mut self, id: Uuid, idx: usize, how: ReadyHow) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        sup.stages[idx].readiness = None;
        if sup.stages[idx].stage.record.state != ProcessState::Starting {
            return self.drive(id).await;
        }
        let mut up = sup.stages[idx].stage.clone();
        up.record.apply(ProcessTrigger::Ready)?;
        up.ready_at = Some(now_millis());
        let event = NewEvent::stage(&up.name, format!("up ({how})"));
        self.store.update_stage(&up, Some(&event)).await?;
        sup.stages[idx].stage = up;
        self.drive(id).await
    }

    pub(super) async fn on_not_ready(&mut self, id: Uuid, idx: usize, error: String) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        sup.stages[idx].readiness = None;
        let stage = &sup.stages[idx].stage;
        if stage.record.state != ProcessState::Starting {
            return self.drive(id).await;
        }
        let name = stage.name.clone();
        let reason = format!("stage '{name}' {error}");
        // Its event and the run's failure: one commit.
        let then = stage_end::failure_move(&sup.run, &reason, None);
        let moved = self
            .store
            .record_stage(stage, &[NewEvent::stage(&name, error)], as_move(&sup.run, &then))
            .await?;
        if then.is_some() {
            self.adopt(id, Ok(moved)).await?;
        }
        self.drive(id).await
    }

    /// Records a stage's end and decides its run; the two land in one commit, and the loop's
    /// state changes once they did (a replay of an end that could not land starts afresh).
    pub(super) async fn on_ended(&mut self, id: Uuid, idx: usize, end: ProcessEnd) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        sup.cancel_readiness(idx);
        if !sup.stages[idx].stage.record.state.is_live() {
            // Recorded already (a repair and a watcher both reported it, or a replay).
            return self.drive(id).await;
        }
        let name = sup.stages[idx].stage.name.clone();
        let mut ended = sup.stages[idx].stage.clone();
        let what = end.record_on(&mut ended.record)?;
        let exit = end.exit();
        let exited_at = match &end {
            ProcessEnd::Finished(finished) => Some(finished.ended_at),
            ProcessEnd::Vanished(_) => None,
        };
        // What the stage wrote before it exited is recorded before its end is: the run's
        // outcome and trained weights then hold its last checkpoint, and a daemon that dies
        // after this commit has nothing left to read.
        self.catch_up_checkpoints(id).await?;
        let last = self.last_step_before_end(id, &name, &what, exit).await?;
        let Some(sup) = self.runs.get(&id) else { return Ok(()) };
        let read = stage_end::End { run: &sup.run, stage: &name, what: &what, exit, exited_at, last };
        let mut moved = None;
        for action in stage_end::on_end(&read, true, now_millis()) {
            match action {
                stage_end::Action::Record { what, then, ended_at } => {
                    let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
                    let then = then.as_ref().map(|(trigger, reason)| RunMove {
                        run: &sup.run,
                        trigger: *trigger,
                        reason: Some(reason),
                        ended_at,
                    });
                    let event = NewEvent::stage(&name, what);
                    moved = Some(self.store.record_stage(&ended, std::slice::from_ref(&event), then).await?);
                    if let ProcessEnd::Finished(finished) = &end {
                        self.telemetry.exit_detection.observe_ms((now_millis() - finished.ended_at) as f64);
                    }
                    self.telemetry.stage_ended(exit);
                    sup.stages[idx].stage = ended.clone();
                }
                stage_end::Action::Adopt => self.adopt(id, Ok(moved.take().flatten())).await?,
                stage_end::Action::Drive => self.drive(id).await?,
            }
        }
        Ok(())
    }

    /// The run's last step, read before a stage's end is recorded when the end may decide the
    /// run (`stage_end::last_reading`).
    async fn last_step_before_end(
        &mut self,
        id: Uuid,
        name: &str,
        what: &str,
        exit: Option<Exit>,
    ) -> Result<Option<crate::model::ProgressPoint>> {
        let Some(sup) = self.runs.get(&id) else { return Ok(None) };
        let deciding = sup.run.spec.deciding_stages().contains(&name);
        let verdict = stage_end::verdict(sup.run.state, deciding, name, what, exit);
        let require_total = sup.run.spec.completion.require_total;
        match stage_end::last_reading(&verdict, require_total, sup.progress.is_some()) {
            stage_end::LastReading::Skip => Ok(None),
            how => self.last_step(id, how).await,
        }
    }

    /// One step of stopping stage `idx`: SIGTERM to its process group, SIGKILL after the grace.
    pub(super) async fn stop_stage(&mut self, id: Uuid, idx: usize) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        if sup.stages[idx].stop != StopStep::Running {
            return Ok(()); // signalled already; its exit or the grace timer comes next
        }
        sup.stages[idx].stop = StopStep::Termed;
        let stage = &sup.stages[idx].stage;
        let grace = sup.run.spec.stop_grace.map_or(self.config.stop_grace, |d| d.0);
        // Signals are sent once; their events are held until they land.
        if let Some(job) = stage.slurm_job {
            // Slurm escalates to SIGKILL itself after its KillWait.
            slurm::cancel(job);
            let message = format!("scancel Slurm job {job}: SIGTERM to the stage process");
            let event = NewEvent::stage(&stage.name, message);
            return self.note(id, event).await;
        }
        let sent = stage.record.process.as_ref().is_some_and(|p| signal_group(p, Signal::TERM));
        let message = if sent {
            format!("sent SIGTERM to its process group; SIGKILL in {}", crate::workflow::Dur(grace))
        } else {
            "already exiting; waiting for its status".to_string()
        };
        let event = NewEvent::stage(&stage.name, message);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let _ = tx.send(Msg::GraceElapsed { run: id, idx });
        });
        self.note(id, event).await
    }

    pub(super) async fn on_grace_elapsed(&mut self, id: Uuid, idx: usize) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        let stage = &sup.stages[idx].stage;
        if !stage.record.state.is_live() || sup.stages[idx].stop != StopStep::Termed {
            return Ok(());
        }
        let killed = stage.record.process.as_ref().is_some_and(|p| signal_group(p, Signal::KILL));
        let event = NewEvent::stage(&stage.name, "grace period over: sent SIGKILL to its process group");
        sup.stages[idx].stop = StopStep::Killed;
        if killed {
            return self.note(id, event).await;
        }
        Ok(())
    }
}

/// A stage's failure's move of its run (from `failure_move`), as the store takes it.
fn as_move<'a>(run: &'a Run, then: &'a Option<(RunTrigger, String)>) -> Option<RunMove<'a>> {
    then.as_ref().map(|(trigger, reason)| RunMove {
        run,
        trigger: *trigger,
        reason: Some(reason),
        ended_at: None,
    })
}
