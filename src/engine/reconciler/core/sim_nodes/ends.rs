//! A run's stage ending: its process exits on the machine running it (the shim leaves an exit
//! file), its node's watcher tells the node, and the node records the end as `on_ended` does:
//! the move `stage_end::end_move` decides, in one write under the node's token (refused while
//! writes are, fenced when the token no longer holds the run), then what `lifecycle::next_step`
//! asks once the stage is gone: let it go, or requeue a preemption's victim
//! (`preemption::requeue`).

use uuid::Uuid;

use super::Sim;
use super::held::{Msg, Refusal};
use crate::engine::reconciler::core::lifecycle::{StageView, Step, next_step};
use crate::engine::reconciler::core::{preemption, stage_end};
use crate::model::{Exit, ProcessState, RunTrigger};

/// A stage's stop grace.
const GRACE: crate::model::Millis = 30_000;

impl Sim {
    /// Every process of the `n`th run exits 0 (a stale attempt's too, on a node that lost it);
    /// each live node watching one is told.
    pub(super) fn finish(&mut self, n: usize) {
        let Some(&id) = self.order.get(n) else { return };
        for k in 0..super::NODES {
            let Some((attempt, _)) = self.procs.remove(&(k, id)) else { continue };
            self.exits.insert((k, id, attempt), Exit::Code(0));
            if self.nodes[k].alive && self.nodes[k].supervised.contains(&id) {
                self.nodes[k].inbox.push(Msg::Ended { run: id, attempt, exit: Exit::Code(0) });
            }
        }
    }

    /// Node `k` records run `id`'s stage end (`exit`, of the model's `attempt`), then lets the
    /// run go or requeues it, and looks at the queue for the slot it freed.
    pub(super) fn record_end(&mut self, k: usize, id: Uuid, exit: Exit, attempt: i64) -> Result<(), Refusal> {
        if !self.nodes[k].alive || !self.nodes[k].supervised.contains(&id) {
            return Ok(());
        }
        if self.nodes[k].refusing {
            return Err(Refusal::Refused);
        }
        let row = &self.rows[&id];
        if row.owner != Some(self.nodes[k].token) {
            return Err(Refusal::Fenced);
        }
        assert_eq!(
            attempt, row.run.attempt,
            "run {id}: the end of attempt {attempt} recorded on attempt {}",
            row.run.attempt
        );
        let what = if exit == Exit::Code(0) { "exited 0" } else { "was stopped" };
        if let Some((trigger, _)) = stage_end::end_move(&row.run, "trainer", what, Some(exit), None) {
            self.apply(id, trigger);
        }
        let run = self.run(id);
        let gone = [StageView { state: ProcessState::Exited, spawn_due: true }];
        match next_step(run.state, run.after_stop(), &gone) {
            Step::LetGo => {}
            Step::AllStagesGone => self.apply(id, RunTrigger::AllStagesGone),
            Step::RequeuePreempted => {
                self.requeue_victim(id, &[Some(preemption::StageEnd::Exited(self.now))])
            }
            step => panic!("run {id} asks {step:?} once its stage is gone"),
        }
        let node = &mut self.nodes[k];
        node.supervised.remove(&id);
        node.ledger.remove(&id);
        node.inbox.push(Msg::Wake);
        Ok(())
    }

    /// A victim whose stages are gone (`ended`: their ends, as far as known) queued again as
    /// its preemption promised (`preemption::requeue`): its next attempt, claimable at once.
    pub(super) fn requeue_victim(&mut self, id: Uuid, ended: &[Option<preemption::StageEnd>]) {
        let back = preemption::requeue(self.run(id), ended, GRACE, &[], self.now);
        self.apply(id, RunTrigger::Preempted);
        let row = self.rows.get_mut(&id).unwrap();
        row.run.params = back.params;
        row.run.params.units = Default::default();
        row.run.attempt += 1;
        row.run.preemptions += 1;
        row.run.not_before = None;
        row.owner = None;
        row.requeued += 1;
        row.claimable_since = self.now;
    }
}
