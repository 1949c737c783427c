//! The loop: the one place that owns run and test state in the daemon. Workers report here
//! over a channel as `Msg`s and never touch state; the loop commits each decision to the store
//! before acting on it, so a crash between the two is repaired on restart.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tracing::warn;
use uuid::Uuid;

use super::health::Health;
use super::held::Held;
use super::messages::{Msg, Owner};
use super::supervised::Supervised;
use super::{inference_tests, node};
use crate::engine::store::{Store, StoreError};
use crate::launch::spawn::Shims;

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
    /// With `--preempt`: how much lower a victim's priority must be (None: never preempt).
    pub preempt_gap: Option<i64>,
    /// What signs webhook bodies (None: unsigned, for tests that build a reconciler bare).
    pub signer: Option<crate::webhooks::Signer>,
    /// The outbox's retries and retention (None: the defaults).
    pub outbox: Option<crate::webhooks::OutboxPolicy>,
}

pub struct Reconciler {
    /// The store as everyone sees it (registration, reaping other nodes).
    pub(super) base: Arc<dyn Store>,
    /// The store writing under this node's fencing token.
    pub(super) store: Arc<dyn Store>,
    pub(super) node: node::NodeState,
    /// The last claim found nothing more to take (so the next one reads before it writes).
    pub(super) queue_drained: bool,
    pub(super) config: ReconcilerConfig,
    pub(super) tx: UnboundedSender<Msg>,
    pub(super) runs: HashMap<Uuid, Supervised>,
    /// The messages and claims whose writes could not land, and the health they make.
    pub(super) held: Held,
    pub(super) tests: HashMap<Uuid, inference_tests::SupervisedTest>,
    pub(super) http: reqwest::Client,
    pub(super) webhooks: Option<crate::webhooks::WebhookClient>,
    /// Rings the outbox's poster (None until `run` starts it).
    pub(super) outbox: Option<Arc<tokio::sync::Notify>>,
    /// A move this batch wrote a notification with: the poster is rung after it.
    pub(super) outbox_news: bool,
    /// The current unhealthy episode's in-memory posts (see `webhooks.rs`).
    pub(super) unhealthy: std::sync::Mutex<Option<super::webhooks::UnhealthyPosts>>,
    pub(super) telemetry: Arc<crate::telemetry::Telemetry>,
    pub(super) shims: Arc<Shims>,
    /// Rung by the metric workers when a sweep member's readings land (the sweep decider waits).
    pub(super) sweep_readings: Arc<super::SweepReadings>,
    /// When the backoffs of the runs this loop queued again, and the store's next, end: it
    /// claims then.
    pub(super) retry_wakeups: super::core::wakeups::Wakeups,
}

pub(super) type Result<T = ()> = std::result::Result<T, StoreError>;

impl Reconciler {
    pub fn new(
        store: Arc<dyn Store>,
        registration: crate::engine::store::NodeRegistration,
        config: ReconcilerConfig,
        tx: UnboundedSender<Msg>,
        telemetry: Arc<crate::telemetry::Telemetry>,
        health: Arc<tokio::sync::watch::Sender<Health>>,
        sweep_readings: Arc<super::SweepReadings>,
    ) -> Reconciler {
        let http = crate::http_client::builder().no_proxy().build().unwrap_or_default();
        let webhooks =
            crate::webhooks::WebhookClient::with_defaults().ok().map(|client| match &config.signer {
                Some(signer) => client.signed(signer.clone()),
                None => client,
            });
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
            held: Held::new(health),
            tests: HashMap::new(),
            http,
            webhooks,
            outbox: None,
            outbox_news: false,
            unhealthy: std::sync::Mutex::new(None),
            telemetry,
            shims,
            sweep_readings,
            retry_wakeups: Default::default(),
        }
    }

    /// Repairs what the store says is in flight, then serves messages until the channel closes.
    pub async fn run(mut self, mut rx: UnboundedReceiver<Msg>) -> Result {
        self.join().await?;
        self.recover().await?;
        self.recover_tests().await?;
        self.claim_or_wait().await?;
        self.claim_tests().await?;
        let mut next_due = self.tick_schedules().await?;
        self.outbox = self.spawn_outbox_poster();
        let mut scan = tokio::time::interval(self.config.scan_interval);
        scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Sleeps until the next schedule is due, not polling for it.
            let until_due = next_due.map_or(Duration::from_secs(3600), |due| {
                (due - chrono::Utc::now()).to_std().unwrap_or(Duration::ZERO) + Duration::from_millis(5)
            });
            // And until a retry's backoff ends, so its run is claimed then, not at the scan.
            let until_retry =
                super::core::wakeups::sleep_for(self.retry_wakeups.next(), crate::model::now_millis());
            let first = tokio::select! {
                msg = rx.recv() => match msg { Some(msg) => msg, None => return Ok(()) },
                _ = scan.tick() => Msg::Wake,
                _ = tokio::time::sleep(until_due) => Msg::Wake,
                _ = tokio::time::sleep(until_retry) => Msg::Queued,
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
            if self.retry_wakeups.take_due(crate::model::now_millis()) {
                queued = true;
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
            // A move of this batch, or one made elsewhere (a rescan), may have written
            // notifications: they are posted beside the loop.
            if let Some(wake) = &self.outbox
                && (rescan || self.outbox_news || self.runs.len() < supervised_before)
            {
                wake.notify_one();
            }
            self.outbox_news = false;
            self.telemetry.tick.observe_ms(batch_started.elapsed().as_secs_f64() * 1000.0);
            // A submission's poke: its run is there to claim, no read needs to say so first.
            if queued {
                self.queue_drained = false;
            }
            // The queue only needs a look when work may have arrived or a slot came free.
            if (rescan || queued || self.runs.len() < supervised_before)
                && let Err(err) = self.claim_or_wait().await
            {
                warn!("reconciler: cannot schedule: {err}");
            }
        }
    }

    pub(super) async fn handle(&mut self, msg: Msg) -> Result {
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
            Msg::PreemptDue { run } => self.carry_out_preemption(run).await,
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
            Msg::Replay => Ok(()),
        }
    }

    /// A failed step: a rejected write means the run (or test) is someone else's now.
    pub(super) async fn on_error(&mut self, err: StoreError) {
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
}
