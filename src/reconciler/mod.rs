//! The one loop that owns run state in the daemon. Workers (spawners, exit watchers, probes,
//! timers) report here over a channel and never touch state; the loop commits each decision
//! to the store before acting on it, so a crash between the two is repaired on restart.

mod claim;
mod jobs;
mod node;
mod notifications;
mod recover;
mod schedules;
mod slurm;
mod supervised;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustix::process::Signal;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::launch::probe::{NotReady, ReadyHow, wait_ready};
use crate::launch::process::{ExitWatch, signal_group};
use crate::launch::spawn::{SpawnError, spawn_stage};
use crate::launch::status::{Finished, StageFiles, Started};
use crate::model::{ExitStatus, NewEvent, RunState, StageState, now_millis};
use crate::store::{Store, StoreError};
use crate::transitions::RunEvent;
use crate::workflow::retry::AfterFailure;
pub use supervised::ports_of;
use supervised::{StopStep, Supervised};

#[derive(Clone, Debug)]
pub struct ReconcilerConfig {
    /// The lachesis binary, started again as `lachesis shim`.
    pub exe: PathBuf,
    /// Runs started at once at most, whatever their resources.
    pub max_parallel: usize,
    /// SIGTERM-to-SIGKILL grace when a workflow sets none.
    pub stop_grace: Duration,
    /// Fallback store scan, for changes whose wake-up was lost.
    pub scan_interval: Duration,
    /// Where job directories go.
    pub jobs_dir: PathBuf,
    /// Where the runs this node claims keep their files.
    pub runs_dir: PathBuf,
    /// The node's local ledger of its claims.
    pub claims_dir: PathBuf,
}

/// How a stage's process ended, as far as the daemon can tell.
#[derive(Debug)]
pub enum StageEnd {
    Finished(Finished),
    /// Gone without a recorded status.
    Vanished(String),
}

/// Whose process a spawner or watcher reports on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    Stage { run: Uuid, idx: usize },
    Task { job: Uuid, idx: usize },
}

#[derive(Debug)]
pub enum Msg {
    /// The store changed (a CLI wrote something) or the fallback timer fired.
    Wake,
    Spawned {
        owner: Owner,
        result: std::result::Result<Started, SpawnError>,
    },
    Ready {
        run: Uuid,
        idx: usize,
        how: ReadyHow,
    },
    NotReady {
        run: Uuid,
        idx: usize,
        error: NotReady,
    },
    Ended {
        owner: Owner,
        end: StageEnd,
    },
    GraceElapsed {
        run: Uuid,
        idx: usize,
    },
    /// A job task ran past its timeout.
    TaskTimedOut {
        job: Uuid,
        idx: usize,
    },
    /// The heartbeat found this node's lease reaped.
    LeaseLost,
    /// sbatch answered for a Slurm stage: its job id, or why it was refused.
    Submitted {
        run: Uuid,
        idx: usize,
        result: std::result::Result<u64, String>,
    },
    /// A Slurm stage's job left the queue and runs.
    SlurmRunning {
        run: Uuid,
        idx: usize,
    },
}

pub struct Reconciler {
    /// The store as everyone sees it (registration, reaping other nodes).
    base: Arc<dyn Store>,
    /// The store writing under this node's fencing token.
    store: Arc<dyn Store>,
    node: node::NodeState,
    /// The last claim found nothing more to take (so the next one reads before it writes).
    queue_drained: bool,
    config: ReconcilerConfig,
    tx: UnboundedSender<Msg>,
    runs: HashMap<Uuid, Supervised>,
    jobs: HashMap<Uuid, jobs::SupervisedJob>,
    http: reqwest::Client,
    notifier: Option<crate::notify::Notifier>,
    metrics: Arc<crate::metrics::Metrics>,
}

type Result<T = ()> = std::result::Result<T, StoreError>;

impl Reconciler {
    pub fn new(
        store: Arc<dyn Store>,
        registration: crate::store::NodeRegistration,
        config: ReconcilerConfig,
        tx: UnboundedSender<Msg>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Reconciler {
        let http = reqwest::Client::builder().no_proxy().build().unwrap_or_default();
        let notifier = crate::notify::Notifier::with_defaults().ok();
        let node = node::NodeState::new(registration, config.claims_dir.clone());
        Reconciler {
            base: Arc::clone(&store),
            store,
            node,
            queue_drained: true,
            config,
            tx,
            runs: HashMap::new(),
            jobs: HashMap::new(),
            http,
            notifier,
            metrics,
        }
    }

    /// Repairs what the store says is in flight, then serves messages until the channel closes.
    pub async fn run(mut self, mut rx: UnboundedReceiver<Msg>) -> Result {
        self.join().await?;
        self.recover().await?;
        self.recover_jobs().await?;
        self.schedule().await?;
        self.schedule_jobs().await?;
        let mut next_due = self.tick_schedules().await?;
        let mut scan = tokio::time::interval(self.config.scan_interval);
        scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Sleeps until the next schedule is due, not polling for it.
            let until_due = next_due.map_or(Duration::from_secs(3600), |due| {
                (due - chrono::Utc::now()).to_std().unwrap_or(Duration::ZERO) + Duration::from_millis(5)
            });
            let first = tokio::select! {
                msg = rx.recv() => match msg { Some(msg) => msg, None => return Ok(()) },
                _ = scan.tick() => Msg::Wake,
                _ = tokio::time::sleep(until_due) => Msg::Wake,
            };
            let batch_started = std::time::Instant::now();
            // Handle everything already queued before rescanning the store once.
            let mut rescan = false;
            let supervised_before = self.runs.len();
            let jobs_before = self.jobs.len();
            let mut next = Some(first);
            while let Some(msg) = next {
                match msg {
                    Msg::Wake => rescan = true,
                    msg => {
                        if let Err(err) = self.handle(msg).await {
                            self.on_error(err).await;
                            rescan = true;
                        }
                    }
                }
                next = rx.try_recv().ok();
            }
            if rescan && let Err(err) = self.reap_lost_nodes().await {
                warn!("reconciler: cannot reap lost nodes: {err}");
            }
            if rescan && let Err(err) = self.sync_from_store().await {
                self.on_error(err).await;
            }
            if rescan && let Err(err) = self.sync_jobs().await {
                warn!("reconciler: cannot read jobs: {err}");
            }
            if rescan {
                match self.tick_schedules().await {
                    Ok(due) => next_due = due,
                    Err(err) => warn!("reconciler: cannot check schedules: {err}"),
                }
            }
            if (rescan || self.jobs.len() < jobs_before)
                && let Err(err) = self.schedule_jobs().await
            {
                warn!("reconciler: cannot schedule jobs: {err}");
            }
            self.metrics.tick.observe_ms(batch_started.elapsed().as_secs_f64() * 1000.0);
            // The queue only needs a look when work may have arrived or a slot came free.
            if (rescan || self.runs.len() < supervised_before)
                && let Err(err) = self.schedule().await
            {
                warn!("reconciler: cannot schedule: {err}");
            }
        }
    }

    async fn handle(&mut self, msg: Msg) -> Result {
        match msg {
            Msg::Wake => Ok(()),
            Msg::Spawned { owner: Owner::Stage { run, idx }, result } => {
                self.on_spawned(run, idx, result).await
            }
            Msg::Spawned { owner: Owner::Task { job, idx }, result } => {
                self.on_task_spawned(job, idx, result).await
            }
            Msg::Ready { run, idx, how } => self.on_ready(run, idx, how).await,
            Msg::NotReady { run, idx, error } => self.on_not_ready(run, idx, error).await,
            Msg::Ended { owner: Owner::Stage { run, idx }, end } => self.on_ended(run, idx, end).await,
            Msg::Ended { owner: Owner::Task { job, idx }, end } => self.on_task_ended(job, idx, end).await,
            Msg::TaskTimedOut { job, idx } => self.on_task_timed_out(job, idx).await,
            Msg::GraceElapsed { run, idx } => self.on_grace_elapsed(run, idx).await,
            Msg::LeaseLost => self.on_lease_lost().await,
            Msg::Submitted { run, idx, result } => self.on_submitted(run, idx, result).await,
            Msg::SlurmRunning { run, idx } => self.on_slurm_running(run, idx).await,
        }
    }

    /// A failed step: a rejected write means the run (or job) is someone else's now.
    async fn on_error(&mut self, err: StoreError) {
        match err {
            StoreError::Fenced { id, token } => {
                let why =
                    format!("a write under fencing token {token} was rejected: another node took it over");
                self.abandon_run(id, &why);
                self.abandon_job(id, &why);
            }
            StoreError::LeaseLost { .. } => {
                if let Err(err) = self.on_lease_lost().await {
                    warn!("reconciler: cannot register again: {err}");
                }
            }
            err => warn!("reconciler: {err}"),
        }
    }

    /// Adopts changes others made (stop requests from the CLI) to the runs we supervise.
    async fn sync_from_store(&mut self) -> Result {
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

    fn store_token(&self) -> Option<i64> {
        self.node.lease.as_ref().map(|l| l.token)
    }

    /// Does whatever the run's current state asks for next. Safe to call at any time.
    async fn drive(&mut self, id: Uuid) -> Result {
        loop {
            let Some(sup) = self.runs.get_mut(&id) else {
                return Ok(());
            };
            match sup.run.state {
                RunState::Pending | RunState::Running => {}
                RunState::Starting => match sup.stages.iter().position(|s| s.state != StageState::Up) {
                    None => {
                        self.transition(id, RunEvent::AllStagesUp, None).await?;
                        continue;
                    }
                    Some(idx) if sup.stages[idx].state == StageState::Pending => self.spawn(id, idx).await?,
                    Some(_) => {}
                },
                RunState::Stopping
                | RunState::Retrying
                | RunState::Stopped
                | RunState::Completed
                | RunState::Failed => {
                    sup.cancel_all_readiness();
                    if sup.stages.iter().any(|s| s.state == StageState::Spawning) {
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
                        self.runs.remove(&id);
                        self.node.ledger.forget(&id);
                    }
                }
            }
            return Ok(());
        }
    }

    /// Applies `event` to a supervised run; on a conflict, adopts what the store holds instead.
    async fn transition(&mut self, id: Uuid, event: RunEvent, reason: Option<&str>) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        match self.store.transition(&sup.run, event, reason, None).await {
            Ok(run) => {
                info!(run = %run.short_id(), state = %run.state, reason = reason.unwrap_or(""), "transition");
                sup.run = run;
                self.notify_run(&self.runs[&id].run);
                Ok(())
            }
            Err(StoreError::Conflict { .. }) => {
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

    async fn fail(&mut self, id: Uuid, reason: &str) -> Result {
        self.fail_after(id, reason, None).await
    }

    /// Fails a started run, or — when a stage's `exit` is transient by the workflow's retry
    /// policy and attempts are left — sends it to `retrying`.
    async fn fail_after(&mut self, id: Uuid, reason: &str, exit: Option<ExitStatus>) -> Result {
        let Some(sup) = self.runs.get(&id) else { return Ok(()) };
        if !matches!(sup.run.state, RunState::Starting | RunState::Running) {
            return Ok(());
        }
        let policy = sup.run.spec.retry.as_ref();
        match crate::workflow::retry::after_exit(policy, sup.run.attempt, exit) {
            AfterFailure::RetryIn(wait) => {
                let max = policy.map_or(1, |p| p.max_attempts);
                let reason = format!(
                    "{reason} (transient by the retry policy): attempt {} of {max} starts in {}",
                    sup.run.attempt + 1,
                    crate::workflow::Dur(wait)
                );
                self.transition(id, RunEvent::Retry, Some(&reason)).await
            }
            AfterFailure::Fail => self.transition(id, RunEvent::Fail, Some(reason)).await,
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
        stage.state = StageState::Spawning;
        // Committed before the shim exists: after a crash, "spawning" means "look for its files".
        self.store.update_stage(stage, None).await?;
        if sup.run.spec.launcher == crate::workflow::Launcher::Slurm {
            self.submit_slurm(id, idx);
            return Ok(());
        }
        let plan = sup.plans[idx].clone();
        let files = sup.files[idx].clone();
        self.launch(Owner::Stage { run: id, idx }, plan, files);
        Ok(())
    }

    /// Starts a process under a shim; its start and its end are reported as messages.
    fn launch(&self, owner: Owner, plan: crate::workflow::StagePlan, files: StageFiles) {
        let exe = self.config.exe.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            match spawn_stage(&exe, &plan, &files).await {
                Ok(mut spawned) => {
                    let _ = tx.send(Msg::Spawned { owner, result: Ok(spawned.started) });
                    // The shim writes the exit file before it exits, so its exit means "read it".
                    let _ = spawned.shim.wait().await;
                    let end = read_end(&files, "its shim exited without recording a status");
                    let _ = tx.send(Msg::Ended { owner, end });
                }
                Err(err) => {
                    let _ = tx.send(Msg::Spawned { owner, result: Err(err) });
                }
            }
        });
    }

    async fn on_spawned(
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
                let stage = &mut sup.stages[idx];
                stage.state = StageState::Starting;
                stage.started_at = Some(started.started_at);
                stage.shim = Some(started.shim);
                stage.process = started.process;
                let pid = stage.process.as_ref().map_or_else(|| "?".into(), |p| p.pid.to_string());
                let event = NewEvent::stage(
                    &name,
                    format!("started (pid {pid}): {}", crate::redact::argv(&sup.plans[idx].argv)),
                );
                self.store.update_stage(&sup.stages[idx], Some(&event)).await?;
                if sup.run.state == RunState::Starting {
                    let plan = &sup.plans[idx];
                    if plan.start_delay.is_none() && plan.probe.is_none() {
                        // Up at once, decided here: a task would race the stage's own exit.
                        return self.on_ready(id, idx, "no start delay or probe".into()).await;
                    }
                    self.start_readiness(id, idx, Duration::ZERO);
                }
            }
            Err(err) => {
                let stage = &mut sup.stages[idx];
                stage.state = StageState::Exited;
                stage.ended_at = Some(now_millis());
                let event = NewEvent::stage(&name, format!("failed to start: {err}"));
                self.store.update_stage(stage, Some(&event)).await?;
                self.fail(id, &format!("stage '{name}' failed to start: {err}")).await?;
            }
        }
        self.drive(id).await
    }

    fn start_readiness(&mut self, id: Uuid, idx: usize, elapsed: Duration) {
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

    async fn on_ready(&mut self, id: Uuid, idx: usize, how: ReadyHow) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        sup.readiness[idx] = None;
        let stage = &mut sup.stages[idx];
        if stage.state != StageState::Starting {
            return Ok(());
        }
        stage.state = StageState::Up;
        stage.ready_at = Some(now_millis());
        let event = NewEvent::stage(&stage.name, format!("up ({how})"));
        self.store.update_stage(stage, Some(&event)).await?;
        self.drive(id).await
    }

    async fn on_not_ready(&mut self, id: Uuid, idx: usize, error: NotReady) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        sup.readiness[idx] = None;
        let name = sup.stages[idx].name.clone();
        self.store.add_event(id, &NewEvent::stage(&name, error.to_string())).await?;
        self.fail(id, &format!("stage '{name}' {error}")).await?;
        self.drive(id).await
    }

    async fn on_ended(&mut self, id: Uuid, idx: usize, end: StageEnd) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        sup.cancel_readiness(idx);
        let stage = &mut sup.stages[idx];
        if !stage.state.is_live() {
            return Ok(()); // already recorded (a repair and a watcher both reported it)
        }
        let name = stage.name.clone();
        let (what, exit) = match &end {
            StageEnd::Finished(finished) => {
                self.metrics.exit_detection.observe_ms((now_millis() - finished.ended_at) as f64);
                self.metrics.stage_ended(finished.exit);
                stage.state = StageState::Exited;
                stage.exit = finished.exit;
                stage.ended_at = Some(finished.ended_at);
                match (&finished.exit, &finished.spawn_error) {
                    (Some(exit), _) => (format!("exited with {exit}"), finished.exit),
                    (None, Some(error)) => (format!("failed to start: {error}"), None),
                    (None, None) => ("exited".to_string(), None),
                }
            }
            StageEnd::Vanished(why) => {
                self.metrics.stage_ended(None);
                stage.state = StageState::Lost;
                stage.ended_at = Some(now_millis());
                (format!("lost: {why}"), None)
            }
        };
        self.store.update_stage(stage, Some(&NewEvent::stage(&name, what.clone()))).await?;

        let state = sup.run.state;
        let deciding = sup.run.spec.deciding_stages().contains(&name.as_str());
        match state {
            RunState::Starting => {
                let reason = match exit {
                    Some(_) => format!("stage '{name}' {what} during start-up"),
                    None => format!("stage '{name}' {what}"),
                };
                self.fail_after(id, &reason, exit).await?;
            }
            RunState::Running if deciding && exit.is_some_and(ExitStatus::success) => {
                self.transition(id, RunEvent::Complete, Some(&format!("stage '{name}' finished"))).await?;
            }
            RunState::Running if deciding => {
                self.fail_after(id, &format!("stage '{name}' {what}"), exit).await?
            }
            RunState::Running => {
                self.fail_after(id, &format!("stage '{name}' {what} while the run was running"), exit).await?
            }
            _ => {}
        }
        self.drive(id).await
    }

    /// One step of stopping stage `idx`: SIGTERM to its process group, SIGKILL after the grace.
    async fn stop_stage(&mut self, id: Uuid, idx: usize) -> Result {
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
        let sent = stage.process.as_ref().is_some_and(|p| signal_group(p, Signal::TERM));
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

    async fn on_grace_elapsed(&mut self, id: Uuid, idx: usize) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else {
            return Ok(());
        };
        let stage = &sup.stages[idx];
        if !stage.state.is_live() || sup.stop[idx] != StopStep::Termed {
            return Ok(());
        }
        sup.stop[idx] = StopStep::Killed;
        if stage.process.as_ref().is_some_and(|p| signal_group(p, Signal::KILL)) {
            let event = NewEvent::stage(&stage.name, "grace period over: sent SIGKILL to its process group");
            self.store.add_event(id, &event).await?;
        }
        Ok(())
    }

    /// Watches a process we did not start (after a restart) through a pidfd on its shim.
    fn watch_reattached(&self, owner: Owner, watch: ExitWatch, files: StageFiles) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let end = match watch.exited().await {
                Ok(()) => read_end(&files, "its shim exited without recording a status"),
                Err(err) => StageEnd::Vanished(format!("cannot watch its shim: {err}")),
            };
            let _ = tx.send(Msg::Ended { owner, end });
        });
    }
}

/// The recorded end of a stage whose shim is gone.
fn read_end(files: &StageFiles, otherwise: &str) -> StageEnd {
    match files.read_finished() {
        Ok(Some(finished)) => StageEnd::Finished(finished),
        Ok(None) => StageEnd::Vanished(otherwise.to_string()),
        Err(err) => StageEnd::Vanished(format!("unreadable status file {}: {err}", files.exit.display())),
    }
}
