//! The one loop that owns run state in the daemon. Workers (spawners, exit watchers, probes,
//! timers) report here over a channel and never touch state; the loop commits each decision
//! to the store before acting on it, so a crash between the two is repaired on restart.

mod claim;
mod inference_tests;
mod node;
mod notifications;
mod progress;
mod recover;
mod runs;
mod schedules;
mod slurm;
mod supervised;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tracing::warn;
use uuid::Uuid;

use crate::launch::probe::{NotReady, ReadyHow};
use crate::launch::process::ExitWatch;
use crate::launch::spawn::{Shims, SpawnError};
use crate::launch::status::{Finished, StageFiles, Started};
use crate::model::{Exit, ProcessRecord, now_millis};
use crate::store::{Store, StoreError};
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
    fn record_on(&self, record: &mut ProcessRecord) -> String {
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

#[derive(Debug)]
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
        error: NotReady,
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
    /// A run's stall timer fired at `deadline` (ms since the epoch).
    StallCheck {
        run: Uuid,
        deadline: crate::model::Millis,
    },
    /// A stage's end whose commit failed (a full disk under the store), tried again.
    EndedAgain {
        run: Uuid,
        idx: usize,
        end: ProcessEnd,
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
    tests: HashMap<Uuid, inference_tests::SupervisedTest>,
    http: reqwest::Client,
    notifier: Option<crate::notify::Notifier>,
    metrics: Arc<crate::metrics::Metrics>,
    shims: Arc<Shims>,
}

type Result<T = ()> = std::result::Result<T, StoreError>;

/// How long a shim that reported its stage's exit gets to write its exit file and exit, before
/// the daemon acts on the report alone.
const SHIM_EXIT_GRACE: Duration = Duration::from_secs(2);

/// How long a stage's end waits before its commit is tried again.
const END_RETRY: Duration = Duration::from_secs(1);

impl Reconciler {
    pub fn new(
        store: Arc<dyn Store>,
        registration: crate::store::NodeRegistration,
        config: ReconcilerConfig,
        tx: UnboundedSender<Msg>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Reconciler {
        let http = crate::http_client::builder().no_proxy().build().unwrap_or_default();
        let notifier = crate::notify::Notifier::with_defaults().ok();
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
            tests: HashMap::new(),
            http,
            notifier,
            metrics,
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
            self.metrics.tick.observe_ms(batch_started.elapsed().as_secs_f64() * 1000.0);
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
            Msg::Ended { owner: Owner::Stage { run, idx }, end } => {
                let retry = end.clone();
                let result = self.on_ended(run, idx, end).await;
                self.retry_end_if_transient(run, idx, retry, result)
            }
            Msg::EndedAgain { run, idx, end } => {
                let retry = end.clone();
                let result = self.end_stage(run, idx, end, true).await;
                self.retry_end_if_transient(run, idx, retry, result)
            }
            Msg::Ended { owner: Owner::Task { test, idx }, end } => self.on_task_ended(test, idx, end).await,
            Msg::TaskTimedOut { test, idx } => self.on_task_timed_out(test, idx).await,
            Msg::GraceElapsed { run, idx } => self.on_grace_elapsed(run, idx).await,
            Msg::LeaseLost => self.on_lease_lost().await,
            Msg::Submitted { run, idx, result } => self.on_submitted(run, idx, result).await,
            Msg::SlurmRunning { run, idx } => self.on_slurm_running(run, idx).await,
            Msg::Progress { run, reading } => self.on_progress(run, reading).await,
            Msg::StallCheck { run, deadline } => self.on_stall_check(run, deadline).await,
        }
    }

    /// A stage's end that could not be committed (the store's disk is full, the database is
    /// away) is kept and committed again shortly, however long that takes: dropping it would
    /// leave its run `running` with no process.
    fn retry_end_if_transient(&self, run: Uuid, idx: usize, end: ProcessEnd, result: Result) -> Result {
        let err = match result {
            Err(err @ (StoreError::Database(_) | StoreError::Locked(_) | StoreError::Io { .. })) => err,
            other => return other,
        };
        let why = if err.to_string().contains("full") { "disk full".to_string() } else { err.to_string() };
        warn!(run = %run, stage = idx, "could not record the exit: {why}; retrying in {}s", END_RETRY.as_secs());
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(END_RETRY).await;
            let _ = tx.send(Msg::EndedAgain { run, idx, end });
        });
        Ok(())
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
