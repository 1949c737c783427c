//! The shared store of the model: each run as the store holds it (its state by the run table,
//! the token that holds it, the claim that locks it, since when a claim may take it) and what
//! the model counts of it (its ends, its preemptions decided and requeued), with the reads every
//! node makes of it: which runs are claimable, in what order, and what a node's runs hold.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::{NODES, Queued, Sim};
use crate::engine::reconciler::core::testing;
use crate::model::{Pools, Run, RunState, RunTrigger};

/// A run as the store holds it.
pub(super) struct Row {
    pub run: Run,
    pub seq: usize,
    /// The node it is pinned to by its labels, if any.
    pub pin: Option<usize>,
    /// The token that holds it while in flight.
    pub owner: Option<i64>,
    /// The node whose claim under way locks it.
    pub locked_by: Option<usize>,
    /// Since when a claim may take it (submitted, or its backoff over).
    pub claimable_since: crate::model::Millis,
    /// Moves to an end: one at most, ever.
    pub ends: u32,
    /// Preemptions decided (the victim's move to `stopping`), and its requeues after them.
    pub decided: u32,
    pub requeued: u32,
}

impl Sim {
    pub(super) fn new(runs: &[Queued]) -> Sim {
        let mut rows = BTreeMap::new();
        let mut order = Vec::new();
        for (n, &(gpus, pin, priority, preemptible)) in runs.iter().enumerate() {
            let tail = format!(
                "needs: {{gpu: {gpus}}}\npreemptible: {preemptible}\nmin_runtime: 1s\n\
                 retry: {{max_attempts: 3, backoff: 1s, on_node_lost: true}}\n"
            );
            let mut run = testing::run(n as u128 + 1, &tail, RunState::Pending, priority, None);
            run.params.needs = run.spec.needs.clone();
            order.push(run.id);
            let row = Row {
                run,
                seq: n,
                pin,
                owner: None,
                locked_by: None,
                claimable_since: 0,
                ends: 0,
                decided: 0,
                requeued: 0,
            };
            rows.insert(order[n], row);
        }
        let pools = Pools::from_specs(&["gpu=0,1".parse().unwrap()], None).unwrap();
        Sim {
            rows,
            order,
            submitted: BTreeSet::new(),
            nodes: (0..NODES).map(|k| super::lives::Node::new(k as i64 + 1, pools.clone())).collect(),
            procs: BTreeMap::new(),
            exits: BTreeMap::new(),
            next_token: NODES as i64 + 1,
            now: 0,
        }
    }

    pub(super) fn run(&self, id: Uuid) -> &Run {
        &self.rows[&id].run
    }

    /// Moves run `id` by `trigger`, as the run table allows (a move it refuses is a bug of the
    /// model); an end is counted.
    pub(super) fn apply(&mut self, id: Uuid, trigger: RunTrigger) {
        let row = self.rows.get_mut(&id).unwrap();
        let to = crate::model::run::next(row.run.state, trigger).unwrap();
        row.run.state = to;
        row.run.version += 1;
        if to.is_terminal() {
            row.ends += 1;
            row.owner = None;
        }
    }

    /// Pending and past its backoff.
    pub(super) fn claimable(&self, id: Uuid) -> bool {
        let run = self.run(id);
        self.submitted.contains(&id)
            && run.state == RunState::Pending
            && run.not_before.is_none_or(|at| at <= self.now)
    }

    /// The queue as a claim reads it: claimable runs in queue order.
    pub(super) fn queue(&self) -> Vec<Uuid> {
        let mut queue: Vec<Uuid> = self.order.iter().copied().filter(|id| self.claimable(*id)).collect();
        queue.sort_by_key(|id| (-self.rows[id].run.priority, self.rows[id].seq));
        queue
    }

    /// Units held by the runs node `k` supervises (a stopping victim's included).
    pub(super) fn units_held(&self, k: usize) -> BTreeSet<String> {
        let ids = self.nodes[k].supervised.iter();
        ids.flat_map(|id| crate::model::pool::resources(self.run(*id).units()).collect::<Vec<_>>()).collect()
    }
}
