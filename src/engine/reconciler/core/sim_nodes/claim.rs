//! A node's claim, in two steps as the store makes it, so other nodes act in between: the read
//! (`claim::look`, then the picker over the queue, locking the runs it takes, or with the bug
//! the whole page; the first run that lacks units or a slot noted for preemption) and the
//! commit (each run taken in flight under the node's token, its stage started on the node's
//! machine). The claim's first write renews the lease: refused, the claim is held
//! (`HeldWrites::hold_claim`) and the queue waits for the round; with the lease gone, it ends.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::held::Msg;
use super::{LOCK_WHOLE_PAGE, MAX_PARALLEL, Sim};
use crate::engine::reconciler::core::claim::{Look, Pick, Picker, drained_after, look};
use crate::engine::reconciler::core::preemption::{self, Blocked};
use crate::model::{Pools, RunParams, RunState, RunTrigger};

/// A claim read and locked, not yet committed.
pub(super) struct ClaimTx {
    taken: Vec<(Uuid, RunParams)>,
    lost: usize,
    free: usize,
    looked_at: crate::model::Millis,
    blocked: Option<Blocked>,
}

impl Sim {
    /// The picker node `k` claims with: its free slots, what its runs hold, and the floor its
    /// victims' urgent runs set (read from the store).
    pub(super) fn picker<'a>(&self, k: usize, pools: &'a Pools) -> Picker<'a> {
        Picker {
            free: MAX_PARALLEL.saturating_sub(self.nodes[k].supervised.len()),
            preempting: true,
            floor: self.floor(k),
            held: self.units_held(k),
            pools,
            sweeps: BTreeMap::new(),
            runs_dir: std::path::Path::new("/runs"),
            taken: 0,
            blocked: None,
        }
    }

    /// While node `k`'s victims stop for a run still pending, runs below it wait.
    fn floor(&self, k: usize) -> Option<i64> {
        let urgent = preemption::urgent_runs(self.nodes[k].supervised.iter().map(|id| self.run(*id)));
        preemption::floor(urgent.iter().map(|id| self.run(*id)))
    }

    /// Claims, unless a claim that could not land waits for the round.
    pub(super) fn claim_or_wait(&mut self, k: usize) {
        if !self.nodes[k].held.claim {
            self.begin(k);
        }
    }

    /// A claim's read: `claim::look`, then the picker over the queue, locking what it takes
    /// (or, with the bug, the whole page, skipping rows another claim locked).
    pub(super) fn begin(&mut self, k: usize) {
        let free = MAX_PARALLEL.saturating_sub(self.nodes[k].supervised.len());
        match look(free, true, self.nodes[k].drained) {
            Look::Nothing => return,
            // `runs_waiting` reads without locks: a locked row still counts.
            Look::AskFirst if self.queue().is_empty() => {
                self.nodes[k].looked_at = Some(self.now);
                return;
            }
            Look::AskFirst | Look::Claim => {}
        }
        if self.nodes[k].refusing {
            return self.hold_claim(k);
        }
        if !self.nodes[k].leased(self.now) {
            return; // the lease is lost: the heartbeat finds it so
        }
        self.nodes[k].heartbeat_at = self.now;
        let pools = self.nodes[k].pools.clone();
        let mut picker = self.picker(k, &pools);
        let (mut taken, mut lost) = (Vec::new(), 0);
        for id in self.queue() {
            let row = &self.rows[&id];
            let locked_elsewhere = row.locked_by.is_some_and(|other| other != k);
            if LOCK_WHOLE_PAGE && locked_elsewhere {
                continue;
            }
            match picker.pick(&row.run, row.pin.is_none_or(|p| p == k), &mut |_, _| None) {
                Pick::Take { .. } if locked_elsewhere => lost += 1,
                Pick::Take { params, .. } => {
                    self.rows.get_mut(&id).unwrap().locked_by = Some(k);
                    taken.push((id, *params));
                }
                Pick::Skip if LOCK_WHOLE_PAGE => self.rows.get_mut(&id).unwrap().locked_by = Some(k),
                Pick::Skip => {}
                Pick::Stop => break,
            }
        }
        let blocked = picker.blocked.take();
        self.nodes[k].looked_at = Some(self.now);
        self.nodes[k].claim = Some(ClaimTx { taken, lost, free, looked_at: self.now, blocked });
    }

    /// A claim's commit: each taken run in flight under the node's token, its stage started on
    /// the node's machine with its units; locks released. Refused, it rolls back and is held.
    /// Then the run it could not place is preempted for, at the node's next step.
    pub(super) fn commit(&mut self, k: usize) {
        let Some(tx) = self.nodes[k].claim.take() else { return };
        for row in self.rows.values_mut().filter(|r| r.locked_by == Some(k)) {
            row.locked_by = None;
        }
        if self.nodes[k].refusing {
            return self.hold_claim(k);
        }
        let token = self.nodes[k].token;
        for (id, params) in &tx.taken {
            let row = &self.rows[id];
            // Its lock kept every other claim off it: the urgent run too is claimed once.
            assert!(
                row.run.state == RunState::Pending && row.owner.is_none(),
                "run {id} claimed twice: {:?} under {:?}",
                row.run.state,
                row.owner
            );
            self.apply(*id, RunTrigger::Claim);
            self.apply(*id, RunTrigger::AllStagesUp);
            let row = self.rows.get_mut(id).unwrap();
            row.run.params = params.clone();
            row.run.not_before = None;
            row.run.started_at = Some(self.now);
            row.owner = Some(token);
            let units = crate::model::pool::resources(row.run.units()).collect();
            let attempt = row.run.attempt;
            let node = &mut self.nodes[k];
            node.supervised.insert(*id);
            node.ledger.insert(*id, token);
            self.procs.insert((k, *id), (attempt, units));
        }
        let node = &mut self.nodes[k];
        node.drained = drained_after(tx.taken.len(), tx.free, tx.blocked.is_some(), tx.lost);
        node.looked_at = Some(tx.looked_at);
        if tx.lost > 0 {
            node.inbox.push(Msg::Queued);
        }
        node.preempt = tx.blocked;
    }
}
