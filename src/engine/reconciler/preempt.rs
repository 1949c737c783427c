//! Preemption in the daemon (issue 33, with `--preempt`): when the first run the claim could
//! not place lacks pool units or a parallel slot, the running preemptible runs of lower
//! priority that free them at the least lost work (`model::preemption`) are stopped, and each
//! queues again once its stages are gone, to resume from its last checkpoint.
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

use std::collections::{BTreeMap, BTreeSet};

use tracing::info;
use uuid::Uuid;

use super::{Reconciler, Result};
use crate::engine::store::StoreError;
use crate::model::preemption::{Holder, Shortage, choose_victims};
use crate::model::run::PREEMPTED_BY;
use crate::model::{
    Checkpoint, Millis, NewEvent, NextAttempt, Run, RunState, Start, next_start, now_millis, short_id,
};
use crate::workflow::PreemptSignal;
use crate::workflow::checkpoints::params_for;

/// The pool name a parallel slot goes by in a shortage, when slots are short.
const SLOT: &str = "parallel slot";

/// A preemption asked of a victim: the run it is for and the pools short; with a timer while
/// the victim was asked to checkpoint first.
pub(super) struct Ask {
    pub urgent: Uuid,
    pub short: Vec<String>,
    pub timer: Option<tokio::task::AbortHandle>,
}

/// The first run the claim could not place for lack of units or a slot.
#[derive(Clone, Debug)]
pub(super) struct Blocked {
    pub id: Uuid,
    pub priority: i64,
    pub needs: BTreeMap<String, u32>,
}

impl Blocked {
    pub fn of(run: &Run) -> Blocked {
        Blocked {
            id: run.id,
            priority: run.priority,
            needs: run.params.needs.iter().map(|(pool, n)| (pool.clone(), *n)).collect(),
        }
    }
}

impl Reconciler {
    /// The lowest priority a run may have to be claimed now: while victims stop for a run,
    /// the runs below it wait, so what the victims free goes to it. None: any run.
    pub(super) async fn preemption_floor(&self) -> Result<Option<i64>> {
        let urgent: BTreeSet<Uuid> = self
            .runs
            .values()
            .filter(|sup| sup.run.state == RunState::Stopping)
            .filter_map(|sup| sup.run.preempted_by()?.parse().ok())
            .collect();
        let mut floor = None;
        for id in urgent {
            if let Some(run) = self.store.run(id).await?.filter(|r| r.state == RunState::Pending) {
                floor = floor.max(Some(run.priority));
            }
        }
        Ok(floor)
    }

    /// Preempts for `blocked` what it lacks, if a set of victims frees it; nothing while an
    /// earlier preemption is still under way.
    pub(super) async fn preempt_for(&mut self, blocked: Blocked) -> Result {
        let Some(gap) = self.config.preempt_gap else { return Ok(()) };
        if self.runs.values().any(|sup| sup.run.preempted_by().is_some() || sup.preempt_ask.is_some()) {
            return Ok(());
        }
        let now = now_millis();
        let slots_short = self.runs.len() >= self.config.max_parallel;
        let mut needed = blocked.needs.clone();
        let mut free = BTreeMap::new();
        let held: BTreeSet<String> = self.runs.values().flat_map(|s| s.resources()).collect();
        for (pool, units) in self.config.pools.iter() {
            let unheld = units.iter().filter(|u| !held.contains(&crate::model::pool::unit_resource(pool, u)));
            free.insert(pool.clone(), unheld.count() as u32);
        }
        if slots_short {
            needed.insert(SLOT.to_string(), 1);
            free.insert(SLOT.to_string(), 0);
        }
        let shortage = Shortage { needed, free, priority: blocked.priority, gap, now };
        let mut holders = Vec::new();
        for sup in self.runs.values() {
            let run = &sup.run;
            if !matches!(run.state, RunState::Starting | RunState::Running) {
                continue;
            }
            let mut units: BTreeMap<String, u32> = crate::model::pool::assigned(&run.params.resolved)
                .into_iter()
                .map(|(pool, units)| (pool, units.len() as u32))
                .collect();
            if slots_short {
                units.insert(SLOT.to_string(), 1);
            }
            let preemptible = run.spec.preemptible && run.preemptions < i64::from(run.spec.max_preemptions());
            let mut holder = Holder {
                id: run.id,
                priority: run.priority,
                preemptible,
                started_at: run.started_at.unwrap_or(now),
                checkpoint_at: None,
                units,
                min_runtime: run.spec.min_runtime().as_millis() as Millis,
            };
            // Only a run that may be chosen costs a read of its checkpoints.
            if holder.protection(&shortage).is_none() {
                holder.checkpoint_at = self.last_resumable(run.id).await?.map(|c| c.at);
            }
            holders.push(holder);
        }
        let Some(choice) = choose_victims(&shortage, &holders) else { return Ok(()) };
        // The pools short: what each victim is said to give.
        let short: Vec<String> = shortage
            .needed
            .iter()
            .filter(|(pool, needed)| **needed > shortage.free.get(*pool).copied().unwrap_or(0))
            .map(|(pool, _)| pool.clone())
            .collect();
        for victim in choice.victims {
            let ask = Ask { urgent: blocked.id, short: short.clone(), timer: None };
            match self.runs.get(&victim).and_then(|sup| sup.run.spec.preempt_signal) {
                Some(signal) => self.ask_to_checkpoint(victim, signal, ask).await?,
                None => self.preempt(victim, &ask).await?,
            }
        }
        Ok(())
    }

    /// Asks a victim whose workflow names a `preempt_signal` to checkpoint now; it is stopped
    /// at its next checkpoint, or after `preempt_wait`.
    async fn ask_to_checkpoint(&mut self, id: Uuid, signal: PreemptSignal, mut ask: Ask) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        let wait = sup.run.spec.preempt_wait();
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
        let message = format!(
            "asked to checkpoint now ({}) before its preemption by run {}: stopped at its next checkpoint, or in {}",
            signal.name(),
            short_id(&ask.urgent),
            crate::model::progress::span(wait)
        );
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
        match self.store.run(ask.urgent).await? {
            Some(run) if run.state == RunState::Pending => self.preempt(id, &ask).await,
            _ => Ok(()),
        }
    }

    /// Stops `id` for run `ask.urgent`: the decision and both runs' events in one commit.
    async fn preempt(&mut self, id: Uuid, ask: &Ask) -> Result {
        let Some(sup) = self.runs.get(&id) else { return Ok(()) };
        let run = sup.run.clone();
        if !matches!(run.state, RunState::Starting | RunState::Running) {
            return Ok(());
        }
        let now = now_millis();
        let started = run.started_at.unwrap_or(now);
        let last = self.last_resumable(run.id).await?;
        let (since_at, since) = match last {
            Some(c) if c.at >= started => (c.at, format!("since the checkpoint at step {}", c.step)),
            _ => (started, "since its attempt started".to_string()),
        };
        let lost = std::time::Duration::from_millis((now - since_at).max(0) as u64);
        // What it gives of the short pools, by unit.
        let assigned = crate::model::pool::assigned(&run.params.resolved);
        let short: Vec<(String, Vec<String>)> = ask
            .short
            .iter()
            .map(|pool| (pool.clone(), assigned.get(pool).cloned().unwrap_or_default()))
            .filter(|(pool, units)| pool == SLOT || !units.is_empty())
            .collect();
        let reason = format!(
            "preempted by run {} for {}; ≈ {} of work {since} will be redone",
            short_id(&ask.urgent),
            amounts(&short),
            crate::model::progress::span(lost)
        );
        let note = format!("took {} from run {}", named_units(&short), run.short_id());
        let mut params = run.params.clone();
        params.resolved.insert(PREEMPTED_BY.to_string(), ask.urgent.to_string());
        let moved = self.store.preempt(&run, &params, &reason, ask.urgent, &note).await;
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

    /// Queues a preempted run whose stages are all gone again, resuming from its last
    /// checkpoint. True if the run changed under us and should be looked at again.
    pub(super) async fn requeue_preempted(&mut self, id: Uuid) -> Result<bool> {
        self.catch_up_checkpoints(id).await?;
        let Some(sup) = self.runs.get(&id) else { return Ok(false) };
        let run = sup.run.clone();
        let by = run.preempted_by().map(|by| by.chars().take(8).collect::<String>()).unwrap_or_default();
        let checkpoints = self.store.checkpoints(id).await?;
        let started = run.started_at.unwrap_or(run.updated_at);
        let since = Checkpoint::last_resumable(&checkpoints).map_or(started, |c| c.at.max(started));
        // The work redone ends where the victim did, at its last stage's end: not at this
        // requeue, which a daemon restarted meanwhile makes later by its downtime.
        let now = now_millis();
        let ended = sup.rows().filter_map(|s| s.record.ended_at).max().map_or(now, |at| at.min(now));
        let lost = (ended - since).max(0);
        let mut params = run.params.clone();
        params.resolved.remove(PREEMPTED_BY);
        let (params, note) = match run.spec.checkpoints.is_some() {
            true => {
                let start = next_start(NextAttempt::Retry { resume: true }, &checkpoints)
                    .unwrap_or(Start::Scratch("no checkpoint"));
                (params_for(&params, &start), start.describe(run.attempt + 1))
            }
            false => {
                let note = format!(
                    "attempt {} starts from step 0: the workflow names no checkpoints",
                    run.attempt + 1
                );
                (params, note)
            }
        };
        let reason = format!("queued again after its preemption by run {by}");
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

/// "1 gpu unit", "2 gpu units and a parallel slot".
fn amounts(short: &[(String, Vec<String>)]) -> String {
    let parts: Vec<String> = short
        .iter()
        .map(|(pool, units)| match (pool.as_str(), units.len()) {
            (SLOT, _) => "a parallel slot".to_string(),
            (_, 1) => format!("1 {pool} unit"),
            (_, n) => format!("{n} {pool} units"),
        })
        .collect();
    parts.join(" and ")
}

/// "gpu unit 2", "gpu units 2,3 and a parallel slot".
fn named_units(short: &[(String, Vec<String>)]) -> String {
    let parts: Vec<String> = short
        .iter()
        .map(|(pool, units)| match (pool.as_str(), units.len()) {
            (SLOT, _) => "a parallel slot".to_string(),
            (_, 1) => format!("{pool} unit {}", units[0]),
            (_, _) => format!("{pool} units {}", units.join(",")),
        })
        .collect();
    parts.join(" and ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_name_what_was_taken() {
        let gpu = vec![("gpu".to_string(), vec!["2".to_string()])];
        assert_eq!(amounts(&gpu), "1 gpu unit");
        assert_eq!(named_units(&gpu), "gpu unit 2");
        let both =
            vec![("gpu".to_string(), vec!["0".to_string(), "3".to_string()]), (SLOT.to_string(), vec![])];
        assert_eq!(amounts(&both), "2 gpu units and a parallel slot");
        assert_eq!(named_units(&both), "gpu units 0,3 and a parallel slot");
    }
}
