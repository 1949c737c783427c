//! The one loop that owns run state in the daemon. Workers (spawners, exit watchers, probes,
//! timers) report here over a channel and never touch state; the loop commits each decision
//! to the store before acting on it, so a crash between the two is repaired on restart.

mod after;
mod checkpoints;
mod claim;
mod inference_tests;
mod node;
mod outcome;
mod progress;
mod recover;
mod runs;
mod schedules;
mod slurm;
mod supervised;
mod time_limit;

pub use time_limit::deadline as time_limit_deadline;
mod webhooks;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::engine::store::{Store, StoreError};
use crate::launch::probe::ReadyHow;
use crate::launch::process::ExitWatch;
use crate::launch::spawn::{Shims, SpawnError};
use crate::launch::status::{Finished, StageFiles, Started};
use crate::model::{Exit, NewEvent, ProcessRecord, now_millis};
use supervised::Supervised;
pub use supervised::ports_of;

#[derive(Clone, Debug)]
pub struct ReconcilerConfig {
    /// The lachesis binary; `lachesis-shim` beside it starts stages (else `lachesis shim`).
    pub exe: PathBuf,
    /// Runs started at once at most, whatever their resources.
    pub max_parallel: usize,
    /// SIGTERM-to-SIGKILL grace when a workflow sets none.
    pub stop_grace: Duration,
    /// Fallback store scan, for changes whose wake-up was lost.
    pub scan_interval: Duration,
    /// Where test directories go.
    pub tests_dir: PathBuf,
    /// Where the runs this node claims keep their files.
    pub runs_dir: PathBuf,
    /// The node's local ledger of its claims.
    pub claims_dir: PathBuf,
    /// Stage log limits where a workflow sets none.
    pub log_rotation: crate::logs::Rotation,
    /// This node's counted pools (`--pool gpu=0,1,2,3`).
    pub pools: crate::model::Pools,
}

/// How a process (a stage's or a task's) ended, as far as the daemon can tell.
#[derive(Clone, Debug)]
pub enum ProcessEnd {
    Finished(Finished),
    /// Gone without a recorded status.
    Vanished(String),
}

impl ProcessEnd {
    /// Records this end on `record`; returns what happened, in words for its event.
    fn record_on(
        &self,
        record: &mut ProcessRecord,
    ) -> std::result::Result<String, crate::model::IllegalProcessMove> {
        match self {
            ProcessEnd::Finished(f) => record.exited(f.exit, f.spawn_error.as_deref(), f.ended_at),
            ProcessEnd::Vanished(why) => record.lost(why, now_millis()),
        }
    }

    /// The exit status, when one was recorded.
    fn exit(&self) -> Option<Exit> {
        match self {
            ProcessEnd::Finished(f) => f.exit,
            ProcessEnd::Vanished(_) => None,
        }
    }
}

/// Whose process a spawner or watcher reports on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    Stage { run: Uuid, idx: usize },
    Task { test: Uuid, idx: usize },
}

#[derive(Clone, Debug)]
pub enum Msg {
    /// The store changed (a CLI wrote something) or the fallback timer fired.
    Wake,
    /// New runs or tests were queued: only the queue needs a look.
    Queued,
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
        /// Why, in words (`NotReady`'s).
        error: String,
    },
    Ended {
        owner: Owner,
        end: ProcessEnd,
    },
    GraceElapsed {
        run: Uuid,
        idx: usize,
    },
    /// A test task ran past its timeout.
    TaskTimedOut {
        test: Uuid,
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
    /// A progress worker read a new step.
    Progress {
        run: Uuid,
        reading: crate::workflow::progress::Reading,
    },
    /// A checkpoint worker read checkpoints (or a malformed line): they wait in the run's
    /// watch until the loop records them.
    Checkpoints {
        run: Uuid,
    },
    /// A run's stall timer fired at `deadline` (ms since the epoch).
    StallCheck {
        run: Uuid,
        deadline: crate::model::Millis,
    },
    /// A run's time-limit timer fired.
    TimeLimit {
        run: Uuid,
    },
    /// Do whatever the run's state asks next (after a spawn's backoff, or a write held while
    /// the run was found in the store).
    Drive {
        run: Uuid,
    },
    /// Fail (or retry) a run for a reason found outside a message (its claim).
    Fail {
        run: Uuid,
        reason: String,
    },
    /// An event of a run to record (a signal it was sent, a note on its restart).
    Note {
        run: Uuid,
        event: NewEvent,
    },
    /// Write a stage's row as the loop holds it, with an event (what restart repair found).
    Record {
        run: Uuid,
        idx: usize,
        event: NewEvent,
    },
    /// Restart repair looks again at a stage that had left no trace.
    Examine {
        run: Uuid,
        idx: usize,
        looks_left: u32,
    },
    /// The messages held for `run` (their writes could not land) are due again.
    Replay {
        run: Uuid,
    },
}

impl Msg {
    /// The run this message is about, if it is about one: its messages are handled in order,
    /// and held together when one of their writes cannot land.
    fn run(&self) -> Option<Uuid> {
        match self {
            Msg::Spawned { owner: Owner::Stage { run, .. }, .. }
            | Msg::Ended { owner: Owner::Stage { run, .. }, .. } => Some(*run),
            Msg::Ready { run, .. }
            | Msg::NotReady { run, .. }
            | Msg::GraceElapsed { run, .. }
            | Msg::Submitted { run, .. }
            | Msg::SlurmRunning { run, .. }
            | Msg::Progress { run, .. }
            | Msg::Checkpoints { run }
            | Msg::StallCheck { run, .. }
            | Msg::TimeLimit { run }
            | Msg::Drive { run }
            | Msg::Fail { run, .. }
            | Msg::Note { run, .. }
            | Msg::Record { run, .. }
            | Msg::Examine { run, .. } => Some(*run),
            Msg::Spawned { owner: Owner::Task { .. }, .. }
            | Msg::Ended { owner: Owner::Task { .. }, .. }
            | Msg::Wake
            | Msg::Queued
            | Msg::TaskTimedOut { .. }
            | Msg::LeaseLost
            | Msg::Replay { .. } => None,
        }
    }

    /// What handling it records, for the warning when that cannot land.
    fn what(&self) -> &'static str {
        match self {
            Msg::Spawned { .. } => "a stage's start",
            Msg::Ready { .. } => "a stage being up",
            Msg::NotReady { .. } => "a stage not coming up",
            Msg::Ended { .. } => "the exit",
            Msg::GraceElapsed { .. } => "a SIGKILL after the grace",
            Msg::Submitted { .. } | Msg::SlurmRunning { .. } => "a Slurm job's start",
            Msg::Progress { .. } => "a step",
            Msg::Checkpoints { .. } => "checkpoints",
            Msg::StallCheck { .. } => "a stall",
            Msg::TimeLimit { .. } => "a time limit",
            Msg::Fail { .. } => "a failure",
            Msg::Note { .. } | Msg::Record { .. } => "an event",
            Msg::Examine { .. } => "a stage found at restart",
            Msg::Drive { .. } | Msg::Wake | Msg::Queued | Msg::Replay { .. } => "the run's next step",
            Msg::TaskTimedOut { .. } | Msg::LeaseLost => "a change",
        }
    }
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
    /// Per run, the messages whose writes could not land (a full disk, the database away),
    /// oldest first, with the ones that came after them: replayed in order once due.
    held: HashMap<Uuid, VecDeque<Msg>>,
    tests: HashMap<Uuid, inference_tests::SupervisedTest>,
    http: reqwest::Client,
    webhooks: Option<crate::webhooks::WebhookClient>,
    telemetry: Arc<crate::telemetry::Telemetry>,
    shims: Arc<Shims>,
}

type Result<T = ()> = std::result::Result<T, StoreError>;

/// How long a shim that reported its stage's exit gets to write its exit file and exit, before
/// the daemon acts on the report alone.
const SHIM_EXIT_GRACE: Duration = Duration::from_secs(2);

/// How long a held write waits before it is tried again.
const HOLD_RETRY: Duration = Duration::from_secs(1);

impl Reconciler {
    pub fn new(
        store: Arc<dyn Store>,
        registration: crate::engine::store::NodeRegistration,
        config: ReconcilerConfig,
        tx: UnboundedSender<Msg>,
        telemetry: Arc<crate::telemetry::Telemetry>,
    ) -> Reconciler {
        let http = crate::http_client::builder().no_proxy().build().unwrap_or_default();
        let webhooks = crate::webhooks::WebhookClient::with_defaults().ok();
        let node = node::NodeState::new(registration, config.claims_dir.clone());
        let shims = Arc::new(Shims::new(&config.exe, config.log_rotation));
        Reconciler {
            base: Arc::clone(&store),
            store,
            node,
            queue_drained: true,
            config,
            tx,
            runs: HashMap::new(),
            held: HashMap::new(),
            tests: HashMap::new(),
            http,
            webhooks,
            telemetry,
            shims,
        }
    }

    /// Repairs what the store says is in flight, then serves messages until the channel closes.
    pub async fn run(mut self, mut rx: UnboundedReceiver<Msg>) -> Result {
        self.join().await?;
        self.recover().await?;
        self.recover_tests().await?;
        self.claim_runs().await?;
        self.claim_tests().await?;
        let mut next_due = self.tick_schedules().await?;
        let dependency_failures = self.spawn_dependency_failures();
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
            let mut queued = false;
            let supervised_before = self.runs.len();
            let tests_before = self.tests.len();
            let mut next = Some(first);
            while let Some(msg) = next {
                match msg {
                    Msg::Wake => rescan = true,
                    Msg::Queued => queued = true,
                    msg => {
                        if let Err(err) = self.handle_or_hold(msg).await {
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
            if rescan && let Err(err) = self.sync_tests().await {
                warn!("reconciler: cannot read tests: {err}");
            }
            if rescan {
                match self.tick_schedules().await {
                    Ok(due) => next_due = due,
                    Err(err) => warn!("reconciler: cannot check schedules: {err}"),
                }
            }
            if (rescan || queued || self.tests.len() < tests_before)
                && let Err(err) = self.claim_tests().await
            {
                warn!("reconciler: cannot schedule tests: {err}");
            }
            // A run that ended, or a stop made elsewhere (a rescan), may have failed the runs
            // waiting for it: their notices are posted beside the loop.
            if let Some(wake) = &dependency_failures
                && (rescan || self.runs.len() < supervised_before)
            {
                wake.notify_one();
            }
            self.telemetry.tick.observe_ms(batch_started.elapsed().as_secs_f64() * 1000.0);
            // A submission's poke: its run is there to claim, no read needs to say so first.
            if queued {
                self.queue_drained = false;
            }
            // The queue only needs a look when work may have arrived or a slot came free.
            if (rescan || queued || self.runs.len() < supervised_before)
                && let Err(err) = self.claim_runs().await
            {
                warn!("reconciler: cannot schedule: {err}");
            }
        }
    }

    /// Handles `msg`, or holds it: behind earlier messages of its run still held, or because
    /// a write it made could not land. A held message is tried again as it was, so a handler
    /// changes the loop's state only once its writes landed, and does again on a replay only
    /// what is not done yet.
    async fn handle_or_hold(&mut self, msg: Msg) -> Result {
        if let Msg::Replay { run } = msg {
            return self.replay(run).await;
        }
        let Some(run) = msg.run() else { return self.handle(msg).await };
        if let Some(queue) = self.held.get_mut(&run) {
            queue.push_back(msg);
            return Ok(());
        }
        let copy = msg.clone();
        match self.handle(msg).await {
            Err(err) if outcome::holds(&err) => {
                self.hold(run, copy, &err);
                Ok(())
            }
            other => other,
        }
    }

    /// Keeps `msg` first in its run's queue and has the queue replayed shortly.
    fn hold(&mut self, run: Uuid, msg: Msg, err: &StoreError) {
        let why = outcome::why_held(err);
        let again = HOLD_RETRY.as_secs();
        // Said when the run's writes start being held, not every second while they are.
        if self.held.contains_key(&run) {
            debug!(run = %run, "still cannot record {}: {why}; trying again in {again}s", msg.what());
        } else {
            warn!(run = %run, "could not record {}: {why}; trying again every {again}s", msg.what());
        }
        self.held.entry(run).or_default().push_front(msg);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(HOLD_RETRY).await;
            let _ = tx.send(Msg::Replay { run });
        });
    }

    /// Handles the held messages of `run` in order, until one cannot land again.
    async fn replay(&mut self, run: Uuid) -> Result {
        while let Some(msg) = self.held.get_mut(&run).and_then(VecDeque::pop_front) {
            let copy = msg.clone();
            match self.handle(msg).await {
                Ok(()) => {}
                Err(err) if outcome::holds(&err) => {
                    self.hold(run, copy, &err);
                    return Ok(());
                }
                Err(err) => self.on_error(err).await,
            }
        }
        if self.held.remove(&run).is_some() {
            info!(run = %run, "recorded what was held");
        }
        Ok(())
    }

    /// Takes the outcome of a step for run `id` taken outside a message (a claim, a repair, a
    /// rescan): when its write could not land, `msg` is held to take it again.
    fn or_hold(&mut self, id: Uuid, result: Result, msg: Msg) -> Result {
        match result {
            Err(err) if outcome::holds(&err) => {
                self.hold(id, msg, &err);
                Ok(())
            }
            other => other,
        }
    }

    /// Records an event of run `id`, or holds it until it can land.
    async fn note(&mut self, id: Uuid, event: NewEvent) -> Result {
        let result = self.store.add_event(id, &event).await;
        self.or_hold(id, result, Msg::Note { run: id, event })
    }

    async fn handle(&mut self, msg: Msg) -> Result {
        match msg {
            Msg::Wake | Msg::Queued => Ok(()),
            Msg::Spawned { owner: Owner::Stage { run, idx }, result } => {
                self.on_spawned(run, idx, result).await
            }
            Msg::Spawned { owner: Owner::Task { test, idx }, result } => {
                self.on_task_spawned(test, idx, result).await
            }
            Msg::Ready { run, idx, how } => self.on_ready(run, idx, how).await,
            Msg::NotReady { run, idx, error } => self.on_not_ready(run, idx, error).await,
            Msg::Ended { owner: Owner::Stage { run, idx }, end } => self.on_ended(run, idx, end).await,
            Msg::Ended { owner: Owner::Task { test, idx }, end } => self.on_task_ended(test, idx, end).await,
            Msg::TaskTimedOut { test, idx } => self.on_task_timed_out(test, idx).await,
            Msg::GraceElapsed { run, idx } => self.on_grace_elapsed(run, idx).await,
            Msg::LeaseLost => self.on_lease_lost().await,
            Msg::Submitted { run, idx, result } => self.on_submitted(run, idx, result).await,
            Msg::SlurmRunning { run, idx } => self.on_slurm_running(run, idx).await,
            Msg::Progress { run, reading } => self.on_progress(run, reading).await,
            Msg::Checkpoints { run } => self.on_checkpoints(run).await,
            Msg::StallCheck { run, deadline } => self.on_stall_check(run, deadline).await,
            Msg::TimeLimit { run } => self.on_time_limit(run).await,
            Msg::Drive { run } => self.drive(run).await,
            Msg::Fail { run, reason } => {
                self.fail(run, &reason).await?;
                self.drive(run).await
            }
            Msg::Note { run, event } => self.store.add_event(run, &event).await,
            Msg::Record { run, idx, event } => match self.runs.get(&run) {
                Some(sup) => self.store.update_stage(&sup.stages[idx].stage, Some(&event)).await,
                None => Ok(()),
            },
            Msg::Examine { run, idx, looks_left } => self.on_examine(run, idx, looks_left).await,
            // Taken by `handle_or_hold`: a replay is not itself replayed.
            Msg::Replay { .. } => Ok(()),
        }
    }

    /// A failed step: a rejected write means the run (or test) is someone else's now.
    async fn on_error(&mut self, err: StoreError) {
        match err {
            StoreError::Fenced { id, token } => {
                let why =
                    format!("a write under fencing token {token} was rejected: another node took it over");
                self.abandon_run(id, &why);
                self.abandon_test(id, &why);
            }
            StoreError::LeaseLost { .. } => {
                if let Err(err) = self.on_lease_lost().await {
                    warn!("reconciler: cannot register again: {err}");
                }
            }
            err => warn!("reconciler: {err}"),
        }
    }

    /// Starts a process under a shim; its start and its end are reported as messages.
    fn launch(&self, owner: Owner, plan: crate::workflow::StagePlan, files: StageFiles) {
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
    fn watch_reattached(&self, owner: Owner, watch: ExitWatch, files: StageFiles) {
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
fn read_end(files: &StageFiles, otherwise: &str) -> ProcessEnd {
    match files.read_finished() {
        Ok(Some(finished)) => ProcessEnd::Finished(finished),
        Ok(None) => ProcessEnd::Vanished(otherwise.to_string()),
        Err(err) => ProcessEnd::Vanished(format!("unreadable status file {}: {err}", files.exit.display())),
    }
}
