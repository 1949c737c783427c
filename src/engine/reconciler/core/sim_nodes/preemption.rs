//! Preemption on one node of several, as the shell's `preempt_for` does it after a claim that
//! could not place a run: nothing while a preemption of its own is under way; else the
//! shortage against what its runs hold, its runs as holders, `preemption::plan`, and for each
//! victim `victim_move` written under its token (refused: the claim is held and decides again
//! at the round), then the stop signal. Its own step, after the claim's commit: other nodes may
//! claim the urgent run, reap this node or die meanwhile, as they may between the shell's
//! writes. The victim is requeued by its stage's end (`ends`).

use super::{PREEMPT_GAP, Sim};
use crate::engine::reconciler::core::preemption::{self, Action, Blocked};
use crate::model::{RunState, RunTrigger};

impl Sim {
    /// Node `k` preempts for `blocked`, the run its last claim could not place.
    pub(super) fn preempt_for(&mut self, k: usize, blocked: Blocked) {
        let supervised: Vec<_> = self.nodes[k].supervised.iter().copied().collect();
        if preemption::under_way(supervised.iter().map(|id| self.run(*id)), false) {
            return;
        }
        let slots_short = supervised.len() >= super::MAX_PARALLEL;
        let held = self.units_held(k);
        let pools = &self.nodes[k].pools;
        let shortage = preemption::shortage(&blocked, pools, &held, slots_short, PREEMPT_GAP, self.now);
        let holders: Vec<_> = supervised
            .iter()
            .filter_map(|id| preemption::holder(self.run(*id), slots_short, self.now))
            .collect();
        let actions = preemption::plan(blocked.id, &shortage, &holders, |id| Some(self.run(id)));
        // Nothing short, the urgent run fits here: no victim.
        assert!(
            actions.is_empty() || !preemption::short_pools(&shortage).is_empty(),
            "victims for a run that fits"
        );
        for action in actions {
            let Action::Stop { victim, urgent, short } = action else {
                panic!("no workflow here names a preempt_signal: {action:?}")
            };
            let run = self.run(victim);
            // What the core guarantees: victims are the node's own, below the urgent run by
            // the gap at least.
            assert!(
                self.nodes[k].supervised.contains(&victim),
                "node {k} preempts a run it does not supervise"
            );
            assert!(
                run.priority + PREEMPT_GAP <= blocked.priority,
                "run {victim} of priority {} preempted for one of {}",
                run.priority,
                blocked.priority
            );
            let Some(decided) = preemption::victim_move(run, urgent, &short, None, self.now) else {
                continue;
            };
            if self.nodes[k].refusing {
                return self.hold_claim(k);
            }
            if self.rows[&victim].owner != Some(self.nodes[k].token) {
                return; // fenced: the heartbeat finds the lease lost
            }
            self.apply(victim, RunTrigger::Stop);
            let row = self.rows.get_mut(&victim).unwrap();
            assert_eq!(row.run.state, RunState::Stopping);
            row.run.params = decided.params;
            row.decided += 1;
            self.signal(k, victim);
        }
    }
}
