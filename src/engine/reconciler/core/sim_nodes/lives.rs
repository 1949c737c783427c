//! A node's life and lease: what a daemon keeps in memory (lost when it dies) and on its disk
//! (its claim ledger, which survives it); its heartbeat, renewed while its writes land; another
//! node's scan reaping it once its lease lapsed (`leases::is_lost`, `leases::reap`: each run
//! queued again by its retry policy or, a preemption's victim, as its preemption promised, or
//! ended); its restart (`leases::claim_fate` over its
//! ledger: supervised again, its exit file recorded, or its leftovers killed); and, alive all
//! along, its heartbeat finding its lease lost, as `on_lease_lost` does: a new lease, every run
//! it supervised let go without a write, their processes killed.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::held::{Fault, Msg};
use super::{LEASE, NODES, Sim};
use crate::engine::reconciler::core::held::HeldWrites;
use crate::engine::reconciler::core::leases::{self, ClaimFate};
use crate::engine::reconciler::core::preemption::Blocked;
use crate::engine::reconciler::core::wakeups::Wakeups;
use crate::model::{Exit, Millis, Pools, RunState, RunTrigger};

pub(super) struct Node {
    pub alive: bool,
    pub token: i64,
    /// Its lease as the store holds it: renewed while alive and its writes land.
    pub heartbeat_at: Millis,
    /// Marked lost by another node's scan; it learns so at its next heartbeat.
    pub reaped: bool,
    /// Its store connection refuses writes (a full disk, the database away).
    pub refusing: bool,
    /// The daemon's memory, lost when it dies.
    pub supervised: BTreeSet<Uuid>,
    pub inbox: Vec<Msg>,
    pub drained: bool,
    pub claim: Option<super::claim::ClaimTx>,
    /// The run its last claim could not place, preempted for next (its own step, so other
    /// nodes act between the claim's commit and the victims' moves).
    pub preempt: Option<Blocked>,
    pub held: HeldWrites<Msg, Fault>,
    pub wakeups: Wakeups,
    /// When it last read the queue (a claim's look).
    pub looked_at: Option<Millis>,
    /// Its claim ledger, on its disk: survives its death.
    pub ledger: BTreeMap<Uuid, i64>,
    pub pools: Pools,
}

impl Node {
    pub(super) fn new(token: i64, pools: Pools) -> Node {
        Node {
            alive: true,
            token,
            heartbeat_at: 0,
            reaped: false,
            refusing: false,
            supervised: BTreeSet::new(),
            inbox: vec![Msg::Wake],
            drained: true,
            claim: None,
            preempt: None,
            held: HeldWrites::default(),
            wakeups: Wakeups::default(),
            looked_at: None,
            ledger: BTreeMap::new(),
            pools,
        }
    }

    /// Busy, or with a look due: a claim under way, a preemption to decide, news to handle, or
    /// held writes whose round comes (while its writes land).
    pub(super) fn busy(&self) -> bool {
        let (runs, _) = self.held.counts();
        self.claim.is_some()
            || self.preempt.is_some()
            || !self.inbox.is_empty()
            || (!self.refusing && (runs > 0 || self.held.claim))
    }

    /// Whether it may claim: a live lease, its writes landing.
    pub(super) fn leased(&self, now: Millis) -> bool {
        self.alive && !self.reaped && !self.refusing && self.heartbeat_at.saturating_add(LEASE) >= now
    }
}

impl Sim {
    /// The daemon dies: its memory, held writes and claim under way go (the transaction rolls
    /// back); its stages run on; its lease lapses.
    pub(super) fn kill(&mut self, k: usize) {
        let node = &mut self.nodes[k];
        node.alive = false;
        node.supervised.clear();
        node.inbox.clear();
        node.claim = None;
        node.preempt = None;
        node.held = HeldWrites::default();
        node.wakeups = Wakeups::default();
        for row in self.rows.values_mut().filter(|r| r.locked_by == Some(k)) {
            row.locked_by = None;
        }
    }

    /// Node `k`'s scan: it reaps the nodes whose lease expired (`leases::reap`: each run
    /// queued again by its retry policy or ended), then looks at the queue. Reaping is a write:
    /// a node whose writes are refused reaps nothing. A node whose claim is under way is not
    /// reaped: the claim renewed its lease and holds its row.
    pub(super) fn scan(&mut self, k: usize) {
        if !self.nodes[k].alive || self.nodes[k].reaped {
            return;
        }
        if self.nodes[k].refusing {
            self.nodes[k].inbox.push(Msg::Wake);
            return;
        }
        for lost in 0..NODES {
            let node = &self.nodes[lost];
            if node.reaped
                || node.claim.is_some()
                || !leases::is_lost(&lost.to_string(), &k.to_string(), node.heartbeat_at, LEASE, self.now)
            {
                continue;
            }
            let token = node.token;
            self.nodes[lost].reaped = true;
            let why = format!("node lost: node '{lost}'");
            for id in self.order.clone() {
                let row = &self.rows[&id];
                if row.owner != Some(token) || !row.run.state.is_in_flight() {
                    continue;
                }
                match leases::reap(&row.run, &why, self.now) {
                    leases::Reap::Requeue { not_before, .. } => {
                        self.apply(id, RunTrigger::Requeue);
                        let row = self.rows.get_mut(&id).unwrap();
                        row.owner = None;
                        row.run.attempt += 1;
                        row.run.not_before = Some(not_before);
                        row.run.params.units = Default::default();
                        row.claimable_since = not_before;
                        self.nodes[k].wakeups.add(id, not_before);
                    }
                    // As the shell does: its stages' ends lost with the node.
                    leases::Reap::Preempted => self.requeue_victim(id, &[]),
                    leases::Reap::Fail { .. } => self.apply(id, RunTrigger::NodeLost),
                    leases::Reap::Release => {}
                }
            }
        }
        self.nodes[k].inbox.push(Msg::Wake);
    }

    /// Node `k` comes back: a new lease (adopting its runs when the old one was never reaped),
    /// then each claim of its ledger by `leases::claim_fate`: supervised again (its stage
    /// re-attached, stopped again if its run stops, or its exit file recorded), or its leftover
    /// processes killed. Registering is a write: while its writes are refused it cannot start.
    pub(super) fn restart(&mut self, k: usize) {
        if (self.nodes[k].alive && !self.nodes[k].reaped) || self.nodes[k].refusing {
            return;
        }
        self.kill(k);
        let (old, reaped) = (self.nodes[k].token, self.nodes[k].reaped);
        let token = self.next_token;
        self.next_token += 1;
        let previous = (!reaped).then_some(old);
        for row in self.rows.values_mut().filter(|r| r.owner == Some(old) && previous.is_some()) {
            row.owner = Some(token);
        }
        let node = &mut self.nodes[k];
        (node.alive, node.reaped, node.token, node.heartbeat_at, node.drained) =
            (true, false, token, self.now, true);
        node.inbox.push(Msg::Wake);
        for (id, claimed_under) in self.nodes[k].ledger.clone() {
            let row = &self.rows[&id];
            let held = row.owner == Some(token) && row.run.state.is_in_flight();
            match leases::claim_fate(held, claimed_under, previous) {
                ClaimFate::Held => {
                    self.nodes[k].supervised.insert(id);
                    self.nodes[k].ledger.insert(id, token);
                    let attempt = row.run.attempt;
                    if self.procs.contains_key(&(k, id)) {
                        if row.run.state == RunState::Stopping {
                            self.signal(k, id);
                        }
                    } else if let Some(&exit) = self.exits.get(&(k, id, attempt)) {
                        self.record_end(k, id, exit, attempt).expect("its writes land: registering did");
                    }
                }
                ClaimFate::Released | ClaimFate::Stale => {
                    self.procs.remove(&(k, id));
                    self.nodes[k].ledger.remove(&id);
                }
            }
        }
        // Processes of runs it no longer knows (not in its ledger) are not its: none here.
    }

    pub(super) fn expire(&mut self) {
        self.now += LEASE + 1_000;
    }

    /// Node `k`'s heartbeat, once its lease was reaped and its writes land: the lease is lost,
    /// and it does what `on_lease_lost` does. (A heartbeat that renews is `tick`'s.)
    pub(super) fn beat(&mut self, k: usize) {
        let node = &self.nodes[k];
        // The loop hears of it once the claim it is in is over.
        if node.alive && node.reaped && !node.refusing && node.claim.is_none() {
            self.lease_lost(k);
        }
    }

    /// A new lease (nothing adopted: the old one was reaped); the ledger's claims it no longer
    /// supervises are stale (leftovers killed), and every run it supervised is let go without
    /// a write, its processes killed: the store under the new token holds none of them.
    fn lease_lost(&mut self, k: usize) {
        let token = self.next_token;
        self.next_token += 1;
        let node = &mut self.nodes[k];
        (node.token, node.reaped, node.heartbeat_at) = (token, false, self.now);
        for (id, claimed_under) in self.nodes[k].ledger.clone() {
            if self.nodes[k].supervised.contains(&id) {
                continue; // held by its memory: abandoned below
            }
            assert_ne!(leases::claim_fate(false, claimed_under, None), ClaimFate::Held);
            self.procs.remove(&(k, id));
            self.nodes[k].ledger.remove(&id);
        }
        for id in self.nodes[k].supervised.clone() {
            self.abandon(k, id);
        }
        self.nodes[k].inbox.push(Msg::Wake);
    }

    /// Node `k` stops supervising run `id`, which it no longer holds, and kills its process
    /// here; nothing is written (the new owner's writes are the ones that count), and what it
    /// held of the run is dropped (`HeldWrites::forget`): it was the lost claim's.
    pub(super) fn abandon(&mut self, k: usize, id: Uuid) {
        self.procs.remove(&(k, id));
        let node = &mut self.nodes[k];
        node.supervised.remove(&id);
        node.ledger.remove(&id);
        node.held.forget(id);
    }

    /// Node `k` stops its run `id`'s process: the shim records the signal; its watcher tells
    /// the node.
    pub(super) fn signal(&mut self, k: usize, id: Uuid) {
        let Some((attempt, _)) = self.procs.remove(&(k, id)) else { return };
        self.exits.insert((k, id, attempt), Exit::Signal(15));
        self.nodes[k].inbox.push(Msg::Ended { run: id, attempt, exit: Exit::Signal(15) });
    }

    /// After each action: time passes, the leases of live nodes whose writes land are renewed,
    /// and due wake-ups are posted.
    pub(super) fn renew(&mut self) {
        let now = self.now;
        for node in self.nodes.iter_mut().filter(|n| n.alive && !n.reaped) {
            if !node.refusing {
                node.heartbeat_at = now;
            }
            if node.wakeups.take_due(now) {
                node.inbox.push(Msg::Queued);
            }
        }
    }
}
