//! Claiming: which pending runs this node takes (queue order, free slots, its resources,
//! ports and pool units, label pinning), and getting a claimed run under way (ledger, run
//! directory, config).

use std::collections::{BTreeMap, BTreeSet};

use tracing::{debug, info};

use super::core::{self, claim::Picker, claim::SweepRoom};
use super::{Reconciler, Result, Supervised};
use crate::engine::store::Pick;
use crate::model::Run;
use crate::model::RunTrigger;

/// Queue rows read per scheduling page, and how deep the scheduler looks for runs it can start.
const SCHEDULE_PAGE: i64 = 32;
const SCHEDULE_PAGES: i64 = 16;
/// How soon the queue is looked at again after a picked run was another writer's.
const LOST_RACE_LOOK: std::time::Duration = std::time::Duration::from_millis(50);

impl Reconciler {
    /// Claims pending runs in queue order while slots and their resources are free, looking
    /// past runs blocked on resources or pinned to other nodes so other work can go ahead
    /// (`core::claim::Picker` decides each). After a look at the queue, reads when the next
    /// backoff ends of a run it did not find claimable, and wakes then (`core::wakeups`).
    pub(super) async fn claim_runs(&mut self) -> Result {
        // Before the claim's own clock read: a backoff ending between the two is read below.
        let looked_at = crate::model::now_millis();
        if self.claim_pass().await?
            && let Some(lease) = &self.node.lease
        {
            // Not read, the previous answer stands: the claim itself went through.
            match self.store.next_backoff_end(looked_at, lease).await {
                Ok(next) => self.retry_wakeups.stored(next),
                Err(err) => debug!("reconciler: cannot read the next backoff end: {err}"),
            }
        }
        Ok(())
    }

    /// One claim; false if it did not look at the queue (no lease, or no slot to fill).
    async fn claim_pass(&mut self) -> Result<bool> {
        let free = self.config.max_parallel.saturating_sub(self.runs.len());
        let Some(lease) = self.node.lease.clone() else { return Ok(false) };
        let preempting = self.config.preempt_gap.is_some();
        // With no slot free, only preemption can place a run: it reads the queue for it.
        let look = core::claim::look(free, preempting, self.queue_drained);
        if look == core::claim::Look::Nothing {
            return Ok(false);
        }
        let floor = if preempting { self.preemption_floor().await? } else { None };
        if look == core::claim::Look::AskFirst && !self.store.runs_waiting().await? {
            return Ok(true);
        }
        // A sweep's `max_live`, counted over every node's runs in flight: its members past it
        // wait in the queue, skipped like a run whose resources are taken.
        let sweeps = self.store.sweep_slots().await?;
        let sweeps = sweeps
            .into_iter()
            .map(|(id, slots)| (id, SweepRoom { max_live: slots.max_live, in_flight: slots.in_flight }))
            .collect();
        let mut picker = Picker {
            free,
            preempting,
            floor,
            held: self.runs.values().flat_map(|s| s.resources()).collect(),
            pools: &self.config.pools,
            sweeps,
            runs_dir: &self.config.runs_dir,
            taken: 0,
            blocked: None,
        };
        let mut pick = |run: &Run| -> Pick {
            match picker.pick(run, lease.fits(&run.spec.node_labels), &mut free_port) {
                core::claim::Pick::Take { params, run_dir } => Pick::Take { params, run_dir },
                core::claim::Pick::Skip => Pick::Skip,
                core::claim::Pick::Stop => Pick::Stop,
            }
        };
        let claimed = self.store.claim_runs(&lease, SCHEDULE_PAGE, SCHEDULE_PAGES, &mut pick).await?;
        let blocked = picker.blocked;
        // A run left blocked keeps the queue looked at: preemption may place it later.
        self.queue_drained =
            core::claim::drained_after(claimed.runs.len(), free, blocked.is_some(), claimed.lost);
        if claimed.lost > 0 {
            // Runs it picked were another writer's at that instant (another node taking them,
            // most often): look again shortly, rather than at the next scan, in case it let go.
            let tx = self.tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(LOST_RACE_LOOK).await;
                let _ = tx.send(super::Msg::Queued);
            });
        }
        for run in claimed.runs {
            let id = run.id;
            // Each claimed run gets under way on its own: one whose write cannot land is held,
            // and does not leave the others claimed and unsupervised.
            let started = self.start_claimed(run, lease.token).await;
            self.or_hold(id, started, super::Msg::Drive { run: id })?;
        }
        if let Some(blocked) = blocked {
            self.preempt_for(blocked).await?;
        }
        Ok(true)
    }

    /// Begins a run this node just claimed: ledger first, then its first stage.
    pub(super) async fn start_claimed(&mut self, run: Run, token: i64) -> Result {
        info!(run = %run.short_id(), workflow = %run.workflow, attempt = run.attempt, "claimed");
        let id = run.id;
        let ledger =
            self.node.ledger.record(&run, token).err().map(|e| format!("cannot record the claim: {e}"));
        // A run just claimed has its stages pending, as submitted (or requeued); they are read
        // back when the store answers, else taken as such so the run is supervised anyway.
        let stages = match self.store.stages(id).await {
            Ok(stages) => stages,
            Err(err) if super::outcome::holds(&err) => run.pending_stages(),
            Err(err) => return Err(err),
        };
        let missing: Vec<String> =
            run.spec.credentials.iter().filter(|c| !crate::environ::is_set(c)).cloned().collect();
        // The values of the runs it waited for go into its params before its plan is made.
        // A store that cannot answer fails the run saying so (a write it cannot take is held
        // like any failure): it never starts with values it does not have.
        let (run, after) = match super::core::dependencies::needs_after_values(&run) {
            true => match self.resolve_after(run.clone()).await {
                Ok(resolved) => resolved,
                Err(err) => (run, Some(format!("cannot read the values of the runs it waited for: {err}"))),
            },
            false => (run, None),
        };
        let actions = core::claim::start(ledger, &missing, after, run.attempt);
        match Supervised::new(run.clone(), stages) {
            Ok(sup) => {
                self.runs.insert(id, sup);
            }
            Err(err) => {
                // The run can't be planned, so it never starts: fail it without supervising it.
                let reason = format!("cannot start: {err}");
                self.store.transition(&run, RunTrigger::Fail, Some(&reason), None).await?;
                self.node.ledger.forget(&id);
                return Ok(());
            }
        }
        for action in actions {
            let problem = match action {
                core::claim::Start::Fail(problem) => problem,
                core::claim::Start::PrepareRunDir { clear_status } => {
                    if clear_status {
                        let _ = std::fs::remove_dir_all(run.run_dir.join(".status"));
                    }
                    match prepare_run_dir(&run) {
                        Ok(()) => continue,
                        Err(problem) => problem,
                    }
                }
                core::claim::Start::Drive => return self.drive(id).await,
            };
            let failed = self.fail(id, &problem).await;
            return self.or_hold(id, failed, super::Msg::Fail { run: id, reason: problem.clone() });
        }
        Ok(())
    }
}

/// Creates the run directory and, for workflows that read one, the run's config file: the
/// locked profile with the run's configured values, readable by the owner only (it may name
/// endpoints and keys of the infrastructure).
fn prepare_run_dir(run: &Run) -> std::result::Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(&run.run_dir)
        .map_err(|e| format!("cannot create {}: {e}", run.run_dir.display()))?;
    if !run.spec.uses_var("config_path") {
        return Ok(());
    }
    let doc = crate::environments::run_config(
        &run.spec.locked,
        &run.params.config,
        run.env_name.as_deref().unwrap_or("run"),
        &run.short_id(),
        &run.params.resolved,
    );
    let text = crate::yaml::to_string(&doc).map_err(|e| format!("cannot write the run config: {e}"))?;
    let path = run.run_dir.join("config.yaml");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A free port (the kernel's pick) outside `held` and `taken`.
fn free_port(held: &BTreeSet<String>, taken: &BTreeMap<String, u16>) -> Option<u16> {
    (0..20).find_map(|_| {
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let clash = held.contains(&format!("port:{port}")) || taken.values().any(|p| *p == port);
        (!clash).then_some(port)
    })
}
