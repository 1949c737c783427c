//! A node whose store connection refuses writes for a while, as the shell's `held.rs` works
//! over `core::held::HeldWrites`: a stage's end that cannot be recorded is held, every later
//! message of its run behind it; a claim that cannot land waits for the round; its heartbeat
//! fails, so its lease is not renewed and another node may reap it. Once writes land, a round
//! replays the held claim, then each run's messages in order; a write its token no longer holds
//! is refused by fencing (`Fenced`), and the node lets that run go (`abandon_run`).

use uuid::Uuid;

use super::Sim;
use crate::model::Exit;

/// What a node's loop is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Msg {
    /// A submission on this node's socket, or a backoff over: its run is there to claim.
    Queued,
    /// A NOTIFY, a fallback scan, or a slot freed: look, asking first if the queue was drained.
    Wake,
    /// A stage's watcher: the run's process exited. `attempt` is the model's, to check whose
    /// end is recorded: the shell's message does not carry it.
    Ended { run: Uuid, attempt: i64, exit: Exit },
}

/// The store's fault, as `HeldWrites` keeps it: one kind is enough here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Fault;

/// Why a write did not land.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The store refuses writes: held, and tried again.
    Refused,
    /// Another token holds the run now: decided again, never retried.
    Fenced,
}

impl Sim {
    /// Handles `msg` of run `run`, or holds it: behind earlier messages of its run still held,
    /// or because its write could not land (`handle_or_hold`).
    pub(super) fn handle_or_hold(&mut self, k: usize, msg: Msg) {
        let Msg::Ended { run, .. } = msg else { unreachable!("only ends are a run's") };
        let Some(msg) = self.nodes[k].held.behind(run, msg) else { return };
        let result = self.on_ended(k, &msg);
        self.or_hold(k, run, result, msg);
    }

    /// The outcome of a message of run `run`: held when refused, the run let go when fenced.
    fn or_hold(&mut self, k: usize, run: Uuid, result: Result<(), Refusal>, msg: Msg) {
        match result {
            Ok(()) => {}
            Err(Refusal::Refused) => {
                let node = &mut self.nodes[k];
                node.held.hold(run, msg, Fault, "writes refused".into(), self.now);
                node.held.next_round(self.now);
            }
            Err(Refusal::Fenced) => self.abandon(k, run),
        }
    }

    /// `Msg::Ended` as `on_ended` handles it: nothing for a run no longer supervised.
    fn on_ended(&mut self, k: usize, msg: &Msg) -> Result<(), Refusal> {
        let &Msg::Ended { run, attempt, exit } = msg else { unreachable!("only ends are held") };
        self.record_end(k, run, exit, attempt)
    }

    /// A claim could not land: the queue waits for the round.
    pub(super) fn hold_claim(&mut self, k: usize) {
        let node = &mut self.nodes[k];
        node.held.hold_claim(Fault, "writes refused".into(), self.now);
        node.held.next_round(self.now);
    }

    /// A round of node `k`'s held writes (its timer fired): the claim that waits, then each
    /// held run's messages in order until one cannot land again. Not while a claim is under
    /// way: the loop is in it.
    pub(super) fn replay(&mut self, k: usize) {
        let node = &mut self.nodes[k];
        let (runs, _) = node.held.counts();
        if !node.alive || node.claim.is_some() || (runs == 0 && !node.held.claim) {
            return;
        }
        node.held.due = None;
        node.held.replaying = true;
        let mut failed = false;
        if node.held.claim {
            node.drained = false;
            if node.refusing {
                node.held.hold_claim(Fault, "writes refused".into(), self.now);
                failed = true;
            } else {
                node.held.claim = false;
                self.begin(k);
            }
        }
        for run in self.nodes[k].held.runs() {
            while let Some(msg) = self.nodes[k].held.pop(run) {
                self.nodes[k].held.mark(Some(run));
                match self.on_ended(k, &msg) {
                    Ok(()) => {}
                    Err(Refusal::Refused) => {
                        self.nodes[k].held.hold(run, msg, Fault, "writes refused".into(), self.now);
                        failed = true;
                        break;
                    }
                    Err(Refusal::Fenced) => self.abandon(k, run),
                }
            }
            self.nodes[k].held.mark(None);
            self.nodes[k].held.landed(run);
        }
        let node = &mut self.nodes[k];
        node.held.replaying = false;
        node.held.round_done(failed);
        node.held.next_round(self.now);
    }
}
