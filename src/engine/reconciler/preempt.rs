//! Preemption in the daemon (issue 33, with `--preempt`): when the first run the claim could
//! not place lacks pool units or a parallel slot, the running preemptible runs of lower
//! priority that free them at the least lost work (`model::preemption`) are stopped, and each
//! queues again once its stages are gone, to resume from its last checkpoint. What is decided
//! is `core::preemption`; this is the shell that reads, writes and signals.
//!
//! Restart safety rests on two writes, each one transaction (`PreemptionStore`):
//! - the decision moves the victim to `stopping` with `preempted_by` in its params. Killed
//!   before it, nothing happened and the next claim decides again; killed after it (before any
//!   signal, or during the grace), the restarted daemon re-attaches the stopping victim and
//!   finishes its stop;
//! - once every stage is gone, the requeue (`stopping ──preempted──▶ pending`, conditional on
//!   the version read) moves it back, exactly once. Killed before it, the restarted daemon finds
//!   the victim stopping with no live stage and requeues it then; killed after it, the victim
//!   is pending and holds nothing, and the urgent run, of higher priority, is claimed first.
//!
//! The crash points `preempt.decided`, `preempt.stages_gone` and `preempt.requeued`
//! (`crate::failpoint`, only in a `testing` build) are where tests/it/preemption.rs kills the
//! daemon to hold it to this.
//!
//! Units are read back from the supervised runs' params, a stopping victim included, so they
//! free only when the victim is no longer supervised: no unit is held by two live runs. While
//! a preemption is under way, runs of lower priority than the run it is for are not claimed,
//! so the units it frees go to that run (claims go by priority).

use std::collections::BTreeSet;

use tracing::info;
use uuid::Uuid;

use super::core::preemption::{self, Blocked};
use super::{Reconciler, Result};
use crate::engine::store::StoreError;
use crate::model::{Checkpoint, NewEvent, now_millis, short_id};
use crate::workflow::PreemptSignal;

/// A preemption asked of a victim: the run it is for and the pools short; with a timer while
/// the victim was asked to checkpoint first.
pub(super) struct Ask {
    pub urgent: Uuid,
    pub short: Vec<String>,
    pub timer: Option<tokio::task::AbortHandle>,
}

impl Reconciler {
    /// The lowest priority a run may have to be claimed now (`core::preemption::floor`).
    pub(super) async fn preemption_floor(&self) -> Result<Option<i64>> {
        let urgent: BTreeSet<Uuid> = preemption::urgent_runs(self.runs.values().map(|sup| &sup.run));
        let mut read = Vec::new();
        for id in urgent {
            read.extend(self.store.run(id).await?);
        }
        Ok(preemption::floor(&read))
    }

    /// Preempts for `blocked` what it lacks, if a set of victims frees it; nothing while an
    /// earlier preemption is still under way.
    pub(super) async fn preempt_for(&mut self, blocked: Blocked) -> Result {
        let Some(gap) = self.config.preempt_gap else { return Ok(()) };
        let asked = self.runs.values().any(|sup| sup.preempt_ask.is_some());
        if preemption::under_way(self.runs.values().map(|sup| &sup.run), asked) {
            return Ok(());
        }
        let now = now_millis();
        let slots_short = self.runs.len() >= self.config.max_parallel;
        let held: BTreeSet<String> = self.runs.values().flat_map(|s| s.resources()).collect();
        let shortage = preemption::shortage(&blocked, &self.config.pools, &held, slots_short, gap, now);
        let mut holders = Vec::new();
        for sup in self.runs.values() {
            let Some(mut holder) = preemption::holder(&sup.run, slots_short, now) else { continue };
            // Only a run that may be chosen costs a read of its checkpoints.
            if holder.protection(&shortage).is_none() {
                holder.checkpoint_at = self.last_resumable(sup.run.id).await?.map(|c| c.at);
            }
            holders.push(holder);
        }
        let runs = &self.runs;
        let actions =
            preemption::plan(blocked.id, &shortage, &holders, |id| runs.get(&id).map(|sup| &sup.run));
        for action in actions {
            match action {
                preemption::Action::Ask { victim, urgent, short, signal, wait, note } => {
                    let ask = Ask { urgent, short, timer: None };
                    self.ask_to_checkpoint(victim, signal, wait, note, ask).await?
                }
                preemption::Action::Stop { victim, urgent, short } => {
                    self.preempt(victim, &Ask { urgent, short, timer: None }).await?
                }
            }
        }
        Ok(())
    }

    /// Asks a victim whose workflow names a `preempt_signal` to checkpoint now; it is stopped
    /// at its next checkpoint, or after `wait`. No live stage to signal: stopped now.
    async fn ask_to_checkpoint(
        &mut self,
        id: Uuid,
        signal: PreemptSignal,
        wait: std::time::Duration,
        message: String,
        mut ask: Ask,
    ) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        let mut sent = false;
        for stage in sup.rows().filter(|s| s.record.state.is_live()) {
            if let Some(process) = &stage.record.process {
                sent |= crate::launch::process::signal_group(process, signal.signal());
            }
        }
        if !sent {
            return self.preempt(id, &ask).await;
        }
        let tx = self.tx.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = tx.send(super::Msg::PreemptDue { run: id });
        });
        ask.timer = Some(timer.abort_handle());
        sup.preempt_ask = Some(ask);
        self.note(id, NewEvent::note(message)).await
    }

    /// Stops a victim asked to checkpoint: it did, or its wait is over. Nothing when the run it
    /// was asked for no longer waits.
    pub(super) async fn carry_out_preemption(&mut self, id: Uuid) -> Result {
        let Some(ask) = self.runs.get_mut(&id).and_then(|sup| sup.preempt_ask.take()) else { return Ok(()) };
        if let Some(timer) = &ask.timer {
            timer.abort();
        }
        match preemption::ask_over(self.store.run(ask.urgent).await?.as_ref()) {
            true => self.preempt(id, &ask).await,
            false => Ok(()),
        }
    }

    /// Stops `id` for run `ask.urgent`: the decision and both runs' events in one commit.
    async fn preempt(&mut self, id: Uuid, ask: &Ask) -> Result {
        let Some(sup) = self.runs.get(&id) else { return Ok(()) };
        let run = sup.run.clone();
        let last = self.last_resumable(run.id).await?;
        let Some(decided) =
            preemption::victim_move(&run, ask.urgent, &ask.short, last.as_ref(), now_millis())
        else {
            return Ok(());
        };
        let moved =
            self.store.preempt(&run, &decided.params, &decided.reason, ask.urgent, &decided.note).await;
        if moved.is_ok() {
            // The decision is committed; no signal has reached the victim's stages yet.
            crate::failpoint::Failpoint::PreemptDecided.hit();
            info!(run = %run.short_id(), by = %short_id(&ask.urgent), "preempted");
            self.telemetry.preempted();
        }
        self.adopt(id, moved.map(Some)).await?;
        self.drive(id).await
    }

    /// A run's last resumable checkpoint: its last row when that one is (one indexed row), else
    /// a read of them all.
    async fn last_resumable(&self, id: Uuid) -> Result<Option<Checkpoint>> {
        Ok(match self.store.last_checkpoint(id).await? {
            Some(last) if last.path.is_some() => Some(last),
            Some(_) => Checkpoint::last_resumable(&self.store.checkpoints(id).await?).cloned(),
            None => None,
        })
    }

    /// A run's SIGTERM-to-SIGKILL grace in ms (its workflow's, else the daemon's), as a
    /// preemption's requeue weighs the work it lost.
    pub(super) fn grace_ms(&self, run: &crate::model::Run) -> i64 {
        let grace = run.spec.stop_grace.map_or(self.config.stop_grace, |d| d.0);
        grace.as_millis().min(i64::MAX as u128) as i64
    }

    /// Queues a preempted run whose stages are all gone again, resuming from its last
    /// checkpoint. True if the run changed under us and should be looked at again.
    pub(super) async fn requeue_preempted(&mut self, id: Uuid) -> Result<bool> {
        self.catch_up_checkpoints(id).await?;
        let Some(sup) = self.runs.get(&id) else { return Ok(false) };
        let run = sup.run.clone();
        let ended: Vec<_> = sup.rows().map(|s| stage_end_of(&s.record)).collect();
        let grace = self.grace_ms(&run);
        let checkpoints = self.store.checkpoints(id).await?;
        let preemption::Requeue { params, reason, note, lost } =
            preemption::requeue(&run, &ended, grace, &checkpoints, now_millis());
        // Every stage is gone and recorded so; the victim is still stopping.
        crate::failpoint::Failpoint::PreemptStagesGone.hit();
        match self.store.requeue_preempted(&run, &reason, &params, &note, lost).await {
            Ok(queued) => {
                // The victim is pending again; the urgent run is not claimed yet.
                crate::failpoint::Failpoint::PreemptRequeued.hit();
                info!(run = %queued.short_id(), preemptions = queued.preemptions, "queued again after a preemption");
                self.telemetry.work_lost(lost);
                self.let_go(id);
                Ok(false)
            }
            Err(StoreError::Conflict { .. }) => {
                self.adopt_stored(id).await?;
                Ok(true)
            }
            Err(err) => Err(err),
        }
    }
}

/// A stage's end as the requeue weighs it: exited with a status, or lost (noticed when).
fn stage_end_of(record: &crate::model::ProcessRecord) -> Option<preemption::StageEnd> {
    let at = record.ended_at?;
    Some(match record.state {
        crate::model::ProcessState::Lost => preemption::StageEnd::Lost(at),
        _ => preemption::StageEnd::Exited(at),
    })
}
