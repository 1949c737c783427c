//! Several nodes on one store: the core's claim decisions (`claim::look`, the picker,
//! `claim::drained_after`), node leases (`leases::reap`, `leases::claim_fate`), retry wake-ups
//! (`wakeups`), held writes (`held::HeldWrites`) and preemption (`preemption::plan`,
//! `victim_move`, `requeue`) against a model of a shared store, modelled on what the shell does
//! with them. Wake-ups are lost or arrive while another node's claim holds its locks; nodes die
//! (their leases expiring, another node reaping their runs) and restart; a node's writes are
//! refused for a while (its ends and claims held, its lease not renewed, so it may be reaped
//! and learn it only when writes land again); an urgent run that does not fit on a node has it
//! preempt runs of its own while other nodes claim that run, die or reap it. A claim is two
//! steps, its read with its locks and its commit, and a preemption a third, so other nodes act
//! in between. Whatever the order:
//! - a run is supervised by one live node at most whose token holds it, and by a node whose
//!   token does not only while its lease is lost and it does not know yet;
//! - no pool unit of a node is used by two live processes on it;
//! - a run is claimed once per attempt, ends exactly once, and each end recorded is its
//!   current attempt's; once nodes live, writes land and nodes scan, every run ends;
//! - a victim is requeued once per preemption decided, and its requeues are counted; victims
//!   are the deciding node's own runs, below the urgent run by the gap; every preemption
//!   decided is requeued, by the victim's node once its stages are gone or by a reaper when
//!   that node was lost while it stopped (`leases::reap`);
//! - no wake-up is lost: when no claim is under way and no node has a look due, no pending
//!   run that a live node has room for waits, if that node looked after the run became
//!   claimable (a NOTIFY lost on the way is the scan's to cover, not a look that missed it).
//!
//! The parts: `store` (the runs as the store holds them), `claim` (a node's claim),
//! `lives` (a node's life and lease), `ends` (a stage's end recorded), `held` (writes
//! refused, held and replayed), `preemption` (victims for a run that does not fit) and
//! `invariants` (what is checked after every step).

mod claim;
mod ends;
mod held;
mod invariants;
mod lives;
mod preemption;
mod store;

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use uuid::Uuid;

use crate::model::{Exit, Millis};
use held::Msg;

const NODES: usize = 3;
const MAX_PARALLEL: usize = 2;
const LEASE: Millis = 10_000;
/// How far above its victims an urgent run's priority must be (`--preempt` on).
const PREEMPT_GAP: i64 = 1;
/// The store's claim locks every row of the page it reads, not only the runs it takes: the
/// lost wake-up between nodes that end-to-end tests found late. Set it to see the sim fail.
const LOCK_WHOLE_PAGE: bool = false;

/// A queued run: the gpus it needs, the node it is pinned to, its priority, preemptible.
type Queued = (u32, Option<usize>, i64, bool);

struct Sim {
    rows: BTreeMap<Uuid, store::Row>,
    order: Vec<Uuid>,
    submitted: BTreeSet<Uuid>,
    nodes: Vec<lives::Node>,
    /// Live stage processes, by machine: the run, its attempt, its units.
    procs: BTreeMap<(usize, Uuid), (i64, BTreeSet<String>)>,
    /// Exit files left by processes that ended: machine, run, attempt.
    exits: BTreeMap<(usize, Uuid, i64), Exit>,
    next_token: i64,
    now: Millis,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    /// The `n`th run is submitted on node `via`; its NOTIFY is lost on the way to the nodes in
    /// the mask.
    Submit(usize, usize, u8),
    /// Node `k` takes its next step: commits its claim under way, decides its preemption, or
    /// handles what it was told (and claims).
    Handle(usize),
    /// Node `k`'s fallback scan: reaps expired leases, then looks.
    Scan(usize),
    /// The `n`th run's stage exits 0.
    Finish(usize),
    Kill(usize),
    Restart(usize),
    /// A lease's time passes: the leases not renewed expire.
    Expire,
    /// Node `k`'s store connection refuses writes, its heartbeat's too.
    Refuse(usize),
    /// Node `k`'s writes land again.
    Accept(usize),
    /// Node `k`'s round of held writes comes.
    Replay(usize),
    /// Node `k`'s heartbeat, which finds its lease lost if it was reaped.
    Beat(usize),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => (0..8usize, 0..NODES, any::<u8>()).prop_map(|(n, via, lost)| Event::Submit(n, via, lost)),
        6 => (0..NODES).prop_map(Event::Handle),
        1 => (0..NODES).prop_map(Event::Scan),
        1 => (0..8usize).prop_map(Event::Finish),
        1 => (0..NODES).prop_map(Event::Kill),
        1 => (0..NODES).prop_map(Event::Restart),
        1 => Just(Event::Expire),
        1 => (0..NODES).prop_map(Event::Refuse),
        1 => (0..NODES).prop_map(Event::Accept),
        2 => (0..NODES).prop_map(Event::Replay),
        1 => (0..NODES).prop_map(Event::Beat),
    ]
}

fn queued() -> impl Strategy<Value = Queued> {
    (
        0..=2u32,
        prop_oneof![1 => Just(None), 1 => (0..NODES).prop_map(Some)],
        prop_oneof![Just(0i64), Just(5), Just(10)],
        prop_oneof![3 => Just(true), 1 => Just(false)],
    )
}

impl Sim {
    fn submit(&mut self, n: usize, via: usize, lost: u8) {
        let Some(&id) = self.order.get(n) else { return };
        if !self.submitted.insert(id) {
            return;
        }
        self.rows.get_mut(&id).unwrap().claimable_since = self.now;
        for (k, node) in self.nodes.iter_mut().enumerate().filter(|(_, n)| n.alive) {
            if k == via {
                node.inbox.push(Msg::Queued);
            } else if lost & (1 << k) == 0 {
                node.inbox.push(Msg::Wake);
            }
        }
    }

    /// Node `k`'s next step: its claim under way committed, its preemption decided, or what
    /// it was told handled in order (a stage's end recorded or held), then a claim if it was
    /// poked.
    fn handle(&mut self, k: usize) {
        if !self.nodes[k].alive {
            return;
        }
        if self.nodes[k].claim.is_some() {
            return self.commit(k);
        }
        if let Some(blocked) = self.nodes[k].preempt.take() {
            return self.preempt_for(k, blocked);
        }
        let told = std::mem::take(&mut self.nodes[k].inbox);
        let mut poked = false;
        for msg in told {
            match msg {
                Msg::Queued => {
                    self.nodes[k].drained = false;
                    poked = true;
                }
                Msg::Wake => poked = true,
                msg => self.handle_or_hold(k, msg),
            }
        }
        if poked {
            self.claim_or_wait(k);
        }
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
            Event::Refuse(k) => self.nodes[k].refusing = true,
            Event::Accept(k) => self.nodes[k].refusing = false,
            Event::Replay(k) => self.replay(k),
            Event::Beat(k) => self.beat(k),
        }
        self.now += 1_000;
        self.renew();
        self.check();
        self.check_no_wakeup_lost();
    }

    /// Each live node takes its steps, rounds and heartbeats, until all are quiet.
    fn settle(&mut self) {
        for _ in 0..50 {
            if !self.nodes.iter().any(|n| n.alive && (n.busy() || n.reaped)) {
                return;
            }
            // A heartbeat comes every quarter lease, a round up to 30 s apart: the heartbeat
            // first, so a node reaped meanwhile learns it before its round.
            for k in 0..NODES {
                self.happen(Event::Beat(k));
                self.happen(Event::Handle(k));
                self.happen(Event::Replay(k));
            }
        }
    }
}

/// Plays `events` on the queue `runs`, then lets writes land, brings every node back and lets
/// the work finish; returns the model as it ended.
fn play(runs: &[Queued], events: &[Event]) -> Sim {
    let mut sim = Sim::new(runs);
    for &event in events {
        sim.happen(event);
    }
    for k in 0..NODES {
        sim.happen(Event::Accept(k));
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
        let id = row.run.id;
        assert!(row.run.state.is_terminal(), "run {id} never ended: {:?}", row.run.state);
        assert_eq!(row.ends, 1, "run {id} ended {} times", row.ends);
        assert_eq!(row.decided, row.requeued, "run {id}: a preemption left undone");
    }
    sim
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random queues, pokes lost or mid-claim, nodes dying and restarting, writes refused and
    /// landing again, urgent runs preempting.
    #[test]
    fn nodes_sharing_a_store_lose_no_run_and_no_wakeup(
        runs in prop::collection::vec(queued(), 1..=8),
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
        &[(0, None, 0, false), (0, None, 0, false), (0, Some(1), 0, false)],
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

/// Found modelling the shell's `abandon_run` as it was (the property finds it too, in a few
/// thousand cases): a node whose writes were refused holds its run's end; reaped meanwhile,
/// the run is queued again and, being pinned to the node, claimed again by it under its new
/// lease. The round that follows replayed the lost claim's end onto the new attempt, which
/// completed while its process ran on. A run let go has its held writes dropped now.
#[test]
fn a_held_end_of_a_lost_claim_is_not_recorded_on_the_runs_next_attempt() {
    play(
        &[(0, Some(0), 0, false)],
        &[
            Event::Submit(0, 0, 0),
            Event::Handle(0),
            Event::Handle(0),
            Event::Refuse(0),
            Event::Finish(0),
            Event::Handle(0),
            Event::Expire,
            Event::Scan(1),
            Event::Accept(0),
            Event::Beat(0),
            Event::Handle(0),
            Event::Handle(0),
            Event::Replay(0),
        ],
    );
}

/// A victim whose node is lost while it stops is queued again by the reaper, as its
/// preemption promised (`leases::reap`); it ended stopped, as a stop asked for, until it was.
#[test]
fn a_victim_whose_node_is_lost_while_it_stops_is_queued_again() {
    let sim = play(
        &[(2, Some(0), 0, true), (2, Some(0), 10, false)],
        &[
            Event::Submit(0, 0, 0),
            Event::Handle(0),
            Event::Handle(0),
            Event::Submit(1, 0, 0),
            Event::Handle(0),
            Event::Handle(0),
            Event::Handle(0),
            Event::Kill(0),
            Event::Expire,
            Event::Scan(1),
        ],
    );
    let victim = &sim.rows[&sim.order[0]];
    assert_eq!(victim.decided, 1, "the urgent run preempted it");
    assert_eq!(victim.requeued, 1, "ended {:?} instead", victim.run.state);
}
