//! Several nodes on one store: the core's claim decisions (`claim::look`, the picker,
//! `claim::drained_after`), node leases (`leases::reap`, `leases::claim_fate`) and retry
//! wake-ups (`wakeups`) against a model of a shared store, with wake-ups lost or arriving while
//! another node's claim holds its locks, nodes dying (their leases expiring, another node
//! requeueing their runs) and restarting. A claim is two steps, its read with its locks and its
//! commit, so other nodes act in between. Whatever the order:
//! - a run is supervised by one live node at most, the one whose token holds it;
//! - no pool unit of a node is used by two live processes on it;
//! - every run ends exactly once, and once nodes live and scan, every run ends;
//! - no wake-up is lost: when no claim is under way and no node has a look due, no pending
//!   run that a live node has room for waits, if that node looked after the run became
//!   claimable (a NOTIFY lost on the way is the scan's to cover, not a look that missed it).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use uuid::Uuid;

use super::claim::{Look, Pick, Picker, drained_after, look};
use super::leases::{self, ClaimFate};
use super::wakeups::Wakeups;
use crate::engine::reconciler::core::testing;
use crate::model::{Millis, Pools, Run, RunState};

const NODES: usize = 3;
const MAX_PARALLEL: usize = 2;
const LEASE: Millis = 10_000;
/// The store's claim locks every row of the page it reads, not only the runs it takes: the
/// lost wake-up between nodes that end-to-end tests found late. Set it to see the sim fail.
const LOCK_WHOLE_PAGE: bool = false;

/// A run as the store holds it.
struct Row {
    run: Run,
    seq: usize,
    /// The node it is pinned to by its labels, if any.
    pin: Option<usize>,
    /// The token that holds it while in flight.
    owner: Option<i64>,
    /// The node whose claim under way locks it.
    locked_by: Option<usize>,
    /// Since when a claim may take it (submitted, or its backoff over).
    claimable_since: Millis,
    ends: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Poke {
    /// A submission on this node's socket: its run is there to claim.
    Queued,
    /// A NOTIFY, a fallback scan, or a slot freed: look, asking first if the queue was drained.
    Wake,
}

/// A claim read and locked, not yet committed.
struct ClaimTx {
    taken: Vec<(Uuid, crate::model::RunParams)>,
    lost: usize,
    free: usize,
    looked_at: Millis,
}

struct Node {
    alive: bool,
    token: i64,
    /// Its lease as the store holds it: renewed while alive, reaped once expired.
    heartbeat_at: Millis,
    reaped: bool,
    /// The daemon's memory, lost when it dies.
    supervised: BTreeSet<Uuid>,
    inbox: Vec<Poke>,
    drained: bool,
    claim: Option<ClaimTx>,
    wakeups: Wakeups,
    /// When it last read the queue (a claim's look).
    looked_at: Option<Millis>,
    /// Its claim ledger, on its disk: survives its death.
    ledger: BTreeMap<Uuid, i64>,
    pools: Pools,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    /// The `n`th run is submitted on node `via`; its NOTIFY is lost on the way to the nodes in
    /// the mask.
    Submit(usize, usize, u8),
    /// Node `k` handles what it was told: commits its claim under way, or starts one.
    Handle(usize),
    /// Node `k`'s fallback scan: reaps expired leases, then looks.
    Scan(usize),
    /// The `n`th run's stage exits 0.
    Finish(usize),
    Kill(usize),
    Restart(usize),
    /// A lease's time passes: the dead nodes' leases expire.
    Expire,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => (0..6usize, 0..NODES, any::<u8>()).prop_map(|(n, via, lost)| Event::Submit(n, via, lost)),
        6 => (0..NODES).prop_map(Event::Handle),
        1 => (0..NODES).prop_map(Event::Scan),
        3 => (0..6usize).prop_map(Event::Finish),
        1 => (0..NODES).prop_map(Event::Kill),
        1 => (0..NODES).prop_map(Event::Restart),
        1 => Just(Event::Expire),
    ]
}

/// A queued run: (gpus it needs, the node it is pinned to).
fn queued() -> impl Strategy<Value = (u32, Option<usize>)> {
    (0..=2u32, prop_oneof![3 => Just(None), 1 => (0..NODES).prop_map(Some)])
}

struct Sim {
    rows: BTreeMap<Uuid, Row>,
    order: Vec<Uuid>,
    submitted: BTreeSet<Uuid>,
    nodes: Vec<Node>,
    /// Live stage processes, by machine: the run, its attempt, its units.
    procs: BTreeMap<(usize, Uuid), (i64, BTreeSet<String>)>,
    /// Exit files left by processes that ended: machine, run, attempt.
    exits: BTreeSet<(usize, Uuid, i64)>,
    next_token: i64,
    now: Millis,
}

impl Sim {
    fn new(runs: &[(u32, Option<usize>)]) -> Sim {
        let mut rows = BTreeMap::new();
        let mut order = Vec::new();
        for (n, &(gpus, pin)) in runs.iter().enumerate() {
            let tail = format!(
                "needs: {{gpu: {gpus}}}\nretry: {{max_attempts: 3, backoff: 1s, on_node_lost: true}}\n"
            );
            let mut run = testing::run(n as u128 + 1, &tail, RunState::Pending, 0, None);
            run.params.needs = run.spec.needs.clone();
            order.push(run.id);
            let row = Row { run, seq: n, pin, owner: None, locked_by: None, claimable_since: 0, ends: 0 };
            rows.insert(order[n], row);
        }
        let nodes = (0..NODES)
            .map(|k| Node {
                alive: true,
                token: k as i64 + 1,
                heartbeat_at: 0,
                reaped: false,
                supervised: BTreeSet::new(),
                inbox: vec![Poke::Wake],
                drained: true,
                claim: None,
                wakeups: Wakeups::default(),
                looked_at: None,
                ledger: BTreeMap::new(),
                pools: Pools::from_specs(&["gpu=0,1".parse().unwrap()], None).unwrap(),
            })
            .collect();
        Sim {
            rows,
            order,
            submitted: BTreeSet::new(),
            nodes,
            procs: BTreeMap::new(),
            exits: BTreeSet::new(),
            next_token: NODES as i64 + 1,
            now: 0,
        }
    }

    /// Pending and past its backoff.
    fn claimable(&self, id: Uuid) -> bool {
        let run = &self.rows[&id].run;
        self.submitted.contains(&id)
            && run.state == RunState::Pending
            && run.not_before.is_none_or(|at| at <= self.now)
    }

    /// Units held by the runs node `k` supervises.
    fn held(&self, k: usize) -> BTreeSet<String> {
        let ids = self.nodes[k].supervised.iter();
        ids.flat_map(|id| crate::model::pool::resources(self.rows[id].run.units()).collect::<Vec<_>>())
            .collect()
    }

    /// The queue as a claim reads it: claimable runs in queue order.
    fn queue(&self) -> Vec<Uuid> {
        let mut queue: Vec<Uuid> = self.order.iter().copied().filter(|id| self.claimable(*id)).collect();
        queue.sort_by_key(|id| (-self.rows[id].run.priority, self.rows[id].seq));
        queue
    }

    /// After each action: time passes, live leases are renewed, due wake-ups are posted, and
    /// what must hold whatever the order is checked.
    fn tick(&mut self) {
        self.now += 1_000;
        let now = self.now;
        for node in self.nodes.iter_mut().filter(|n| n.alive && !n.reaped) {
            node.heartbeat_at = now;
            if node.wakeups.take_due(now) {
                node.inbox.push(Poke::Queued);
            }
        }
        self.check();
    }

    fn check(&self) {
        let mut by_run: BTreeMap<Uuid, usize> = BTreeMap::new();
        for (k, node) in self.nodes.iter().enumerate().filter(|(_, n)| n.alive) {
            for id in &node.supervised {
                assert!(by_run.insert(*id, k).is_none(), "run {id} supervised by two live nodes");
                assert_eq!(
                    self.rows[id].owner,
                    Some(node.token),
                    "node {k} supervises a run its token does not hold"
                );
            }
        }
        for k in (0..NODES).filter(|k| self.nodes[*k].alive) {
            let mut used = BTreeSet::new();
            for ((_, run), (_, units)) in self.procs.range((k, Uuid::nil())..=(k, Uuid::max())) {
                for unit in units {
                    assert!(used.insert(unit.clone()), "unit {unit} of node {k} used twice (run {run})");
                }
            }
        }
        for row in self.rows.values() {
            assert!(row.ends <= 1, "run {} ended {} times", row.run.id, row.ends);
        }
    }

    /// No wake-up lost: checked when nothing is under way and no look is due.
    fn check_no_wakeup_lost(&self) {
        let quiet = self.nodes.iter().filter(|n| n.alive).all(|n| n.claim.is_none() && n.inbox.is_empty());
        if !quiet {
            return;
        }
        for id in self.queue() {
            let row = &self.rows[&id];
            for (k, node) in self.nodes.iter().enumerate().filter(|(_, n)| n.alive && !n.reaped) {
                if node.looked_at.is_none_or(|at| at < row.claimable_since) {
                    continue; // it was never told: the scan's to find
                }
                let pools = node.pools.clone();
                let mut picker = self.picker(k, &pools);
                if matches!(
                    picker.pick(&row.run, row.pin.is_none_or(|p| p == k), &mut |_, _| None),
                    Pick::Take { .. }
                ) {
                    panic!(
                        "a lost wake-up: run {id} waits, though node {k} looked after it was queued and has room"
                    );
                }
            }
        }
    }

    fn picker<'a>(&self, k: usize, pools: &'a Pools) -> Picker<'a> {
        Picker {
            free: MAX_PARALLEL.saturating_sub(self.nodes[k].supervised.len()),
            preempting: false,
            floor: None,
            held: self.held(k),
            pools,
            sweeps: BTreeMap::new(),
            runs_dir: std::path::Path::new("/runs"),
            taken: 0,
            blocked: None,
        }
    }

    fn submit(&mut self, n: usize, via: usize, lost: u8) {
        let Some(&id) = self.order.get(n) else { return };
        if !self.submitted.insert(id) {
            return;
        }
        self.rows.get_mut(&id).unwrap().claimable_since = self.now;
        for (k, node) in self.nodes.iter_mut().enumerate().filter(|(_, n)| n.alive) {
            if k == via {
                node.inbox.push(Poke::Queued);
            } else if lost & (1 << k) == 0 {
                node.inbox.push(Poke::Wake);
            }
        }
    }

    /// Node `k` commits its claim under way, or handles its pokes with a claim's first step.
    fn handle(&mut self, k: usize) {
        if !self.nodes[k].alive {
            return;
        }
        if self.nodes[k].claim.is_some() {
            return self.commit(k);
        }
        let pokes = std::mem::take(&mut self.nodes[k].inbox);
        if pokes.is_empty() {
            return;
        }
        if pokes.contains(&Poke::Queued) {
            self.nodes[k].drained = false;
        }
        self.begin(k);
    }

    /// A claim's read: `claim::look`, then the picker over the queue, locking what it takes
    /// (or, with the bug, the whole page, skipping rows another claim locked).
    fn begin(&mut self, k: usize) {
        let free = MAX_PARALLEL.saturating_sub(self.nodes[k].supervised.len());
        match look(free, false, self.nodes[k].drained) {
            Look::Nothing => return,
            // `runs_waiting` reads without locks: a locked row still counts.
            Look::AskFirst if self.queue().is_empty() => {
                self.nodes[k].looked_at = Some(self.now);
                return;
            }
            Look::AskFirst | Look::Claim => {}
        }
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
                Pick::Take { params, .. } if locked_elsewhere => {
                    let _ = params;
                    lost += 1;
                }
                Pick::Take { params, .. } => {
                    self.rows.get_mut(&id).unwrap().locked_by = Some(k);
                    taken.push((id, *params));
                }
                Pick::Skip if LOCK_WHOLE_PAGE => self.rows.get_mut(&id).unwrap().locked_by = Some(k),
                Pick::Skip => {}
                Pick::Stop => break,
            }
        }
        self.nodes[k].looked_at = Some(self.now);
        self.nodes[k].claim = Some(ClaimTx { taken, lost, free, looked_at: self.now });
    }

    /// A claim's commit: each taken run in flight under the node's token, its stage started on
    /// the node's machine with its units; locks released.
    fn commit(&mut self, k: usize) {
        let Some(tx) = self.nodes[k].claim.take() else { return };
        for row in self.rows.values_mut().filter(|r| r.locked_by == Some(k)) {
            row.locked_by = None;
        }
        let token = self.nodes[k].token;
        for (id, params) in &tx.taken {
            let row = self.rows.get_mut(id).unwrap();
            row.run.params = params.clone();
            row.run.state = RunState::Running;
            row.run.not_before = None;
            row.owner = Some(token);
            let units = crate::model::pool::resources(row.run.units()).collect();
            let attempt = row.run.attempt;
            let node = &mut self.nodes[k];
            node.supervised.insert(*id);
            node.ledger.insert(*id, token);
            self.procs.insert((k, *id), (attempt, units));
        }
        let node = &mut self.nodes[k];
        node.drained = drained_after(tx.taken.len(), tx.free, false, tx.lost);
        node.looked_at = Some(tx.looked_at);
        if tx.lost > 0 {
            node.inbox.push(Poke::Queued);
        }
    }

    /// The run's current attempt exits 0 on the machine running it; its node records it if
    /// it is alive and supervises it.
    fn finish(&mut self, n: usize) {
        let Some(&id) = self.order.get(n) else { return };
        let attempt = self.rows[&id].run.attempt;
        let Some(k) = (0..NODES).find(|k| self.procs.get(&(*k, id)).is_some_and(|(a, _)| *a == attempt))
        else {
            return;
        };
        self.procs.remove(&(k, id));
        self.exits.insert((k, id, attempt));
        if self.nodes[k].alive && self.nodes[k].supervised.contains(&id) {
            self.record_end(k, id);
        }
    }

    /// Node `k` records run `id` completed and looks at the queue for the slot it freed.
    fn record_end(&mut self, k: usize, id: Uuid) {
        let row = self.rows.get_mut(&id).unwrap();
        if row.owner != Some(self.nodes[k].token) || !row.run.state.is_in_flight() {
            return;
        }
        row.run.state = RunState::Completed;
        row.ends += 1;
        row.owner = None;
        let node = &mut self.nodes[k];
        node.supervised.remove(&id);
        node.ledger.remove(&id);
        node.inbox.push(Poke::Wake);
    }

    /// The daemon dies: its memory and its claim under way go (the transaction rolls back);
    /// its stages run on; its lease lapses.
    fn kill(&mut self, k: usize) {
        let node = &mut self.nodes[k];
        node.alive = false;
        node.supervised.clear();
        node.inbox.clear();
        node.claim = None;
        node.wakeups = Wakeups::default();
        for row in self.rows.values_mut().filter(|r| r.locked_by == Some(k)) {
            row.locked_by = None;
        }
    }

    /// Node `k`'s scan: it reaps the nodes whose lease expired (`leases::reap`: each run
    /// queued again by its retry policy or failed), then looks at the queue.
    fn scan(&mut self, k: usize) {
        if !self.nodes[k].alive || self.nodes[k].reaped {
            return;
        }
        for lost in 0..NODES {
            let node = &self.nodes[lost];
            if node.reaped
                || !leases::is_lost(&lost.to_string(), &k.to_string(), node.heartbeat_at, LEASE, self.now)
            {
                continue;
            }
            let token = node.token;
            self.nodes[lost].reaped = true;
            let why = format!("node lost: node '{lost}'");
            for id in self.order.clone() {
                let row = self.rows.get_mut(&id).unwrap();
                if row.owner != Some(token) || !row.run.state.is_in_flight() {
                    continue;
                }
                row.owner = None;
                match leases::reap(&row.run, &why, self.now) {
                    leases::Reap::Requeue { not_before, .. } => {
                        row.run.state = RunState::Pending;
                        row.run.attempt += 1;
                        row.run.not_before = Some(not_before);
                        row.run.params.units = Default::default();
                        row.claimable_since = not_before;
                        self.nodes[k].wakeups.add(id, not_before);
                    }
                    leases::Reap::Fail { .. } => {
                        row.run.state = RunState::Failed;
                        row.ends += 1;
                    }
                    leases::Reap::Release => {}
                }
            }
        }
        self.nodes[k].inbox.push(Poke::Wake);
    }

    /// Node `k` comes back: a new lease (adopting its runs when the old one was never reaped),
    /// then each claim of its ledger by `leases::claim_fate`: supervised again (its stage
    /// re-attached or its exit file recorded), or its leftover processes killed.
    fn restart(&mut self, k: usize) {
        if self.nodes[k].alive && !self.nodes[k].reaped {
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
        node.inbox.push(Poke::Wake);
        for (id, claimed_under) in self.nodes[k].ledger.clone() {
            let row = &self.rows[&id];
            let held = row.owner == Some(token) && row.run.state.is_in_flight();
            match leases::claim_fate(held, claimed_under, previous) {
                ClaimFate::Held => {
                    self.nodes[k].supervised.insert(id);
                    self.nodes[k].ledger.insert(id, token);
                    let attempt = row.run.attempt;
                    if !self.procs.contains_key(&(k, id)) && self.exits.contains(&(k, id, attempt)) {
                        self.record_end(k, id);
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

    fn expire(&mut self) {
        self.now += LEASE + 1_000;
    }

    fn happen(&mut self, event: Event) {
        match event {
            Event::Submit(n, via, lost) => self.submit(n, via, lost),
            Event::Handle(k) => self.handle(k),
            Event::Scan(k) => self.scan(k),
            Event::Finish(n) => self.finish(n),
            Event::Kill(k) => self.kill(k),
            Event::Restart(k) => self.restart(k),
            Event::Expire => self.expire(),
        }
        self.tick();
        self.check_no_wakeup_lost();
    }

    /// Each live node handles everything it was told, claims included, until all are quiet.
    fn settle(&mut self) {
        for _ in 0..50 {
            for k in 0..NODES {
                self.happen(Event::Handle(k));
            }
        }
    }
}

/// Plays `events` on the queue `runs`, then brings every node back and lets the work finish.
fn play(runs: &[(u32, Option<usize>)], events: &[Event]) {
    let mut sim = Sim::new(runs);
    for &event in events {
        sim.happen(event);
    }
    for k in 0..NODES {
        if !sim.nodes[k].alive {
            sim.happen(Event::Restart(k));
        }
    }
    for n in 0..runs.len() {
        sim.happen(Event::Submit(n, 0, 0));
    }
    for _ in 0..30 {
        sim.settle();
        for k in 0..NODES {
            sim.happen(Event::Scan(k));
        }
        sim.settle();
        for n in 0..runs.len() {
            sim.happen(Event::Finish(n));
        }
        if sim.rows.values().all(|r| r.run.state.is_terminal()) {
            break;
        }
    }
    for row in sim.rows.values() {
        assert!(row.run.state.is_terminal(), "run {} never ended: {:?}", row.run.id, row.run.state);
        assert_eq!(row.ends, 1, "run {} ended {} times", row.run.id, row.ends);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Random queues, pokes lost or mid-claim, nodes dying and restarting.
    #[test]
    fn nodes_sharing_a_store_lose_no_run_and_no_wakeup(
        runs in prop::collection::vec(queued(), 1..=6),
        events in prop::collection::vec(event(), 0..80),
    ) {
        play(&runs, &events);
    }
}

/// A wake-up arriving while another node's claim holds its locks: the run pinned to the woken
/// node is read (it is not the other claim's) and claimed at once, not at the next scan.
#[test]
fn a_wakeup_during_another_nodes_claim_is_not_lost() {
    play(
        &[(0, None), (0, None), (0, Some(1))],
        &[
            Event::Handle(0),
            Event::Handle(1),
            Event::Handle(2),
            Event::Handle(0),
            Event::Handle(1),
            Event::Handle(2),
            Event::Submit(0, 0, 0b110),
            Event::Submit(2, 0, 0),
            Event::Handle(0),
            Event::Handle(1),
            Event::Handle(0),
            Event::Handle(1),
        ],
    );
}
