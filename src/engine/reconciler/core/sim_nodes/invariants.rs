//! What must hold after every step, whatever the order of events: who supervises a run, which
//! units a machine's processes use, how often a run ends and a victim is requeued; and, at a
//! quiet moment, that no wake-up was lost.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::{NODES, Sim};
use crate::engine::reconciler::core::claim::Pick;

impl Sim {
    pub(super) fn check(&self) {
        let mut holder: BTreeMap<Uuid, usize> = BTreeMap::new();
        for (k, node) in self.nodes.iter().enumerate().filter(|(_, n)| n.alive) {
            for id in &node.supervised {
                if self.rows[id].owner != Some(node.token) {
                    // Fenced off: it may not know yet, only until its heartbeat says so.
                    assert!(
                        node.reaped,
                        "node {k} supervises run {id} its token does not hold, its lease intact"
                    );
                    continue;
                }
                assert!(holder.insert(*id, k).is_none(), "run {id} supervised by two live nodes holding it");
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
            let id = row.run.id;
            assert!(row.ends <= 1, "run {id} ended {} times", row.ends);
            assert!(
                row.requeued <= row.decided,
                "run {id} requeued {} times for {} preemptions",
                row.requeued,
                row.decided
            );
            assert_eq!(row.run.preemptions, i64::from(row.requeued), "run {id}: each requeue counted once");
        }
    }

    /// No wake-up lost: checked when nothing is under way and no look is due. A node whose
    /// writes are refused has its claim held: it is not asked to have looked.
    pub(super) fn check_no_wakeup_lost(&self) {
        if self.nodes.iter().any(|n| n.alive && n.busy()) {
            return;
        }
        for id in self.queue() {
            let row = &self.rows[&id];
            for (k, node) in self.nodes.iter().enumerate() {
                if !node.leased(self.now) || node.looked_at.is_none_or(|at| at < row.claimable_since) {
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
}
