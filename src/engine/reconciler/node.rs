//! This daemon as one node among several on a store: its lease and heartbeat, reaping nodes
//! whose heartbeat stopped, and what it does when its own claims are taken away (after a
//! restart, a lost lease or a rejected write): stop supervising them and kill what it still
//! runs for them, writing nothing about them under its stale token.
//!
//! The claim ledger (`claims/` in the home) is the node's local memory of what it claimed and
//! under which token, written before any stage starts: after a restart it is how the node finds
//! the processes of runs that were reaped while it was away.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::process::Signal;
use serde::{Deserialize, Serialize};
use tokio::task::AbortHandle;
use tracing::{info, warn};
use uuid::Uuid;

use super::core::leases::{self, ClaimFate};
use super::{Msg, Reconciler, Result};
use crate::engine::store::{Lease, NodeRegistration, Reap, StoreError};
use crate::launch::process::{Liveness, liveness, signal_group};
use crate::launch::status::StageFiles;
use crate::model::{NewEvent, ProcessIdentity, Run, now_millis};

/// What the reconciler knows about itself as a node.
pub struct NodeState {
    pub registration: NodeRegistration,
    pub lease: Option<Lease>,
    heartbeat: Option<AbortHandle>,
    pub ledger: Ledger,
}

impl NodeState {
    pub fn new(registration: NodeRegistration, claims_dir: PathBuf) -> NodeState {
        NodeState { registration, lease: None, heartbeat: None, ledger: Ledger { dir: claims_dir } }
    }
}

/// One claim as the node remembers it: a run's, or an inference test's (whose "stages" are
/// its per-model tasks, with status files in the test directory).
#[derive(Debug, Serialize, Deserialize)]
pub struct Claim {
    pub token: i64,
    pub run_dir: PathBuf,
    pub stages: Vec<String>,
    #[serde(default)]
    pub test: bool,
}

/// The node's local record of its claims: one small file per run.
pub struct Ledger {
    dir: PathBuf,
}

impl Ledger {
    fn path(&self, id: &Uuid) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Written before any stage of the run starts, so no process can exist without it.
    pub fn record(&self, run: &Run, token: i64) -> std::io::Result<()> {
        let stages = run.spec.stages.iter().map(|s| s.name.clone()).collect();
        self.write(&run.id, &Claim { token, run_dir: run.run_dir.clone(), stages, test: false })
    }

    /// `tasks` are the file stems of the test's task status files.
    pub fn record_test(
        &self,
        test: &crate::model::InferenceTest,
        token: i64,
        tasks: Vec<String>,
    ) -> std::io::Result<()> {
        self.write(&test.id, &Claim { token, run_dir: test.test_dir.clone(), stages: tasks, test: true })
    }

    fn write(&self, id: &Uuid, claim: &Claim) -> std::io::Result<()> {
        let tmp = self.dir.join(format!(".{id}.tmp"));
        std::fs::write(&tmp, serde_json::to_vec(claim).map_err(std::io::Error::other)?)?;
        std::fs::rename(tmp, self.path(id))
    }

    pub fn forget(&self, id: &Uuid) {
        let _ = std::fs::remove_file(self.path(id));
    }

    fn entries(&self) -> Vec<(Uuid, Claim)> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        dir.flatten()
            .filter_map(|entry| {
                let name = entry.file_name();
                let id = Uuid::parse_str(name.to_str()?.strip_suffix(".json")?).ok()?;
                let claim = serde_json::from_slice(&std::fs::read(entry.path()).ok()?).ok()?;
                Some((id, claim))
            })
            .collect()
    }
}

impl Reconciler {
    /// Takes a lease (adopting the runs of this node's previous, unreaped lease), writes as its
    /// token from now on, and settles claims the node remembers but no longer holds.
    pub(super) async fn join(&mut self) -> Result {
        std::fs::create_dir_all(&self.node.ledger.dir)
            .map_err(|source| StoreError::Io { path: self.node.ledger.dir.clone(), source })?;
        let lease = self.base.register_node(&self.node.registration).await?;
        info!(node = %lease.node, token = lease.token, adopted_from = ?lease.previous, "node registered");
        self.store = self.base.fenced(lease.token);
        self.node.lease = Some(lease.clone());
        let (token, previous) = (lease.token, lease.previous);
        self.start_heartbeat(lease);
        let mut held: HashSet<Uuid> = self.store.supervised_runs().await?.iter().map(|r| r.id).collect();
        let running = self.store.tests_in(crate::model::TestState::Running, i64::MAX).await?;
        held.extend(running.iter().filter(|j| j.fence == Some(token)).map(|j| j.id));
        for (id, claim) in self.node.ledger.entries() {
            let holds = held.contains(&id) || self.runs.contains_key(&id) || self.tests.contains_key(&id);
            match leases::claim_fate(holds, claim.token, previous) {
                ClaimFate::Held => {}
                ClaimFate::Released => self.forget_released_claim(id, claim),
                ClaimFate::Stale => self.settle_stale_claim(id, claim).await,
            }
        }
        Ok(())
    }

    /// A claim of the node's own previous lease, never reaped, whose run that lease no longer
    /// held: the daemon let it go itself (it ended, or was queued again) and died before it
    /// forgot the line. No other node took it, so nothing is said on the run; any process still
    /// running for it here is killed all the same.
    fn forget_released_claim(&mut self, id: Uuid, claim: Claim) {
        let processes: Vec<ProcessIdentity> =
            claim.stages.iter().filter_map(|name| live_stage_process(&claim.run_dir, name)).collect();
        let killed = self.kill_leftovers(processes);
        info!(run = %crate::model::short_id(&id), killed = ?killed, "forgot a claim let go before a restart");
        self.node.ledger.forget(&id);
    }

    /// The lease was reaped (this node looked dead for longer than its lease): take a new one
    /// and drop whatever was handed to other nodes meanwhile.
    pub(super) async fn on_lease_lost(&mut self) -> Result {
        warn!("this node's lease was lost (no heartbeat for longer than the lease); registering again");
        self.join().await?;
        let held: std::collections::HashMap<Uuid, Run> =
            self.store.supervised_runs().await?.into_iter().map(|r| (r.id, r)).collect();
        for id in self.runs.keys().copied().collect::<Vec<_>>() {
            match held.get(&id) {
                Some(run) => {
                    if let Some(sup) = self.runs.get_mut(&id) {
                        sup.run = run.clone();
                    }
                }
                None => self.abandon_run(id, "the lease was lost and the run was taken over"),
            }
        }
        let token = self.node.lease.as_ref().map(|l| l.token);
        for id in self.tests.keys().copied().collect::<Vec<_>>() {
            match self.base.test(id).await? {
                Some(test) if test.fence == token => {
                    if let Some(sup) = self.tests.get_mut(&id) {
                        sup.test = test;
                    }
                }
                _ => self.abandon_test(id, "the lease was lost and the test was failed by another node"),
            }
        }
        Ok(())
    }

    fn start_heartbeat(&mut self, lease: Lease) {
        if let Some(old) = self.node.heartbeat.take() {
            old.abort();
        }
        let store = std::sync::Arc::clone(&self.base);
        let tx = self.tx.clone();
        // A few beats per lease, so one slow write doesn't cost the lease.
        let every = leases::beat_every(lease.lease);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match store.heartbeat(&lease).await {
                    Ok(()) => {}
                    Err(StoreError::LeaseLost { .. }) => {
                        let _ = tx.send(Msg::LeaseLost);
                        return;
                    }
                    Err(err) => warn!("heartbeat failed (will retry): {err}"),
                }
            }
        });
        self.node.heartbeat = Some(task.abort_handle());
    }

    /// Marks nodes whose heartbeat expired as lost and settles their runs and tests: each run
    /// fails with `node lost` or is queued again when its retry policy says so.
    pub(super) async fn reap_lost_nodes(&mut self) -> Result {
        let now = now_millis();
        let me = self.node.registration.id.clone();
        for node in self.base.expired_nodes(now).await? {
            // The store's expiry is a first cut; the core's rule is the word.
            if !leases::is_lost(&node.id, &me, node.heartbeat_at, node.lease_ms, now)
                || !self.base.mark_node_lost(&node, now).await?
            {
                continue;
            }
            let silent = Duration::from_millis((now - node.heartbeat_at).max(0) as u64);
            let lease = Duration::from_millis(node.lease_ms.max(0) as u64);
            let why = leases::node_lost_reason(&node.id, silent, lease);
            warn!(node = %node.id, "{why}");
            let mut settled = 0;
            for run in self.base.node_runs(&node.id, node.token).await? {
                let how = match leases::reap(&run, &why, now) {
                    leases::Reap::Release => Reap::Release,
                    leases::Reap::Fail { reason } => Reap::Fail { reason },
                    // Like any retry, from the last checkpoint the lost node recorded.
                    leases::Reap::Requeue { reason, not_before } => Reap::Requeue {
                        reason,
                        not_before,
                        resume: self.next_params(&run).await?.map(Box::new),
                    },
                    leases::Reap::Preempted => self.reaped_victim(&run, now).await?,
                };
                // Slurm jobs outlive their node's daemon: cancel them, the run is settled here.
                for stage in self.base.stages(run.id).await? {
                    if let (true, Some(job)) = (stage.record.state.is_live(), stage.slurm_job) {
                        super::slurm::cancel(job);
                    }
                }
                if self.base.reap_run(&run, node.token, &how).await? {
                    settled += 1;
                    if let Reap::Requeue { not_before, .. } = how {
                        self.retry_wakeups.add(run.id, not_before);
                    }
                }
            }
            let tests = self.base.reap_tests(&node.id, node.token, &why).await?;
            info!(node = %node.id, runs = settled, tests, "reaped a lost node");
        }
        Ok(())
    }

    /// How a lost node's preemption victim is queued again: as its own node would have, from
    /// its last checkpoint. Its stages' ends went with the node; its work stopped by the end of
    /// its grace after the preemption, at the latest.
    async fn reaped_victim(&self, run: &crate::model::Run, now: crate::model::Millis) -> Result<Reap> {
        let grace = self.grace_ms(run);
        let ended = run.params.preempted_at.map_or(now, |at| at.saturating_add(grace).min(now));
        let checkpoints = self.base.checkpoints(run.id).await?;
        let back = super::core::preemption::requeue(run, &[], grace, &checkpoints, ended);
        Ok(Reap::Preempted {
            reason: back.reason,
            params: Box::new(back.params),
            note: back.note,
            lost: back.lost,
        })
    }

    /// Stops supervising a run this node no longer holds and kills its local processes; the
    /// store is not written (the new owner's writes are the ones that count), and what was
    /// held for it is dropped.
    pub(super) fn abandon_run(&mut self, id: Uuid, why: &str) {
        if let Some(mut sup) = self.runs.remove(&id) {
            sup.cancel_all_readiness();
            self.forget_progress(id);
            let processes: Vec<ProcessIdentity> = sup
                .rows()
                .filter(|s| s.record.state.is_live())
                .filter_map(|s| s.record.process.clone())
                .collect();
            for job in sup.rows().filter(|s| s.record.state.is_live()).filter_map(|s| s.slurm_job) {
                super::slurm::cancel(job);
            }
            let killed = self.kill_leftovers(processes);
            warn!(run = %sup.run.short_id(), killed = ?killed, "fenced: {why}; stopped supervising it");
        }
        // What was held of it is the lost claim's: replayed, an end of that attempt would be
        // recorded on the next one, should this node claim the run again.
        let dropped = self.held.forget(id);
        if dropped > 0 {
            info!(run = %crate::model::short_id(&id), dropped, "dropped the held writes of a run let go");
        }
        self.node.ledger.forget(&id);
    }

    pub(super) fn abandon_test(&mut self, id: Uuid, why: &str) {
        if let Some(sup) = self.tests.remove(&id) {
            let processes: Vec<ProcessIdentity> = sup
                .tasks
                .iter()
                .filter(|t| t.record.state.is_live())
                .filter_map(|t| t.record.process.clone())
                .collect();
            let killed = self.kill_leftovers(processes);
            warn!(test = %crate::model::short_id(&id), killed = ?killed, "fenced: {why}; stopped supervising it");
        }
        self.node.ledger.forget(&id);
    }

    /// A claim the node remembers under a token that no longer holds the run: prove it by a
    /// write under that token (the store rejects it), kill the stage processes still running
    /// for it here, and forget it.
    async fn settle_stale_claim(&mut self, id: Uuid, claim: Claim) {
        // A write that changes nothing, under the old token: only whether it lands matters.
        let stale = self.base.fenced(claim.token);
        let rejected = if claim.test {
            match self.base.test_tasks(id).await.ok().and_then(|tasks| tasks.into_iter().next()) {
                Some(task) => matches!(stale.update_task(&task, None).await, Err(StoreError::Fenced { .. })),
                None => true,
            }
        } else {
            match self.base.stages(id).await.ok().and_then(|stages| stages.into_iter().next()) {
                Some(stage) => {
                    matches!(stale.update_stage(&stage, None).await, Err(StoreError::Fenced { .. }))
                }
                None => true,
            }
        };
        let processes: Vec<ProcessIdentity> =
            claim.stages.iter().filter_map(|name| live_stage_process(&claim.run_dir, name)).collect();
        let killed = self.kill_leftovers(processes);
        let node = &self.node.registration.id;
        let message = format!(
            "node '{node}' came back holding a stale claim (fencing token {}): its write was {}; \
             killed {} leftover stage process group(s) here",
            claim.token,
            if rejected { "rejected" } else { "not needed" },
            killed.len()
        );
        warn!(run = %crate::model::short_id(&id), "{message}");
        let _ = self.base.add_event(id, &NewEvent::note(message)).await;
        self.node.ledger.forget(&id);
    }

    /// SIGTERM to each live process group, SIGKILL after the grace period; returns the pids.
    fn kill_leftovers(&self, processes: Vec<ProcessIdentity>) -> Vec<i32> {
        let live: Vec<ProcessIdentity> =
            processes.into_iter().filter(|p| liveness(p) == Liveness::Alive).collect();
        for process in &live {
            signal_group(process, Signal::TERM);
        }
        let pids = live.iter().map(|p| p.pid).collect();
        if !live.is_empty() {
            let grace = self.config.stop_grace;
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                for process in live.iter().filter(|p| liveness(p) == Liveness::Alive) {
                    signal_group(process, Signal::KILL);
                }
            });
        }
        pids
    }
}

/// The stage process a run directory's status files name, if it is still running.
fn live_stage_process(run_dir: &Path, stage: &str) -> Option<ProcessIdentity> {
    let files = StageFiles::new(run_dir, stage);
    if matches!(files.read_finished(), Ok(Some(_))) {
        return None;
    }
    files.read_started().ok().flatten()?.process.filter(|p| liveness(p) == Liveness::Alive)
}
