//! Held writes, decided: a message whose write could not land is held first in its run's
//! queue, every later message of that run behind it; a claim that could not land waits too.
//! Rounds replay each run's messages in their order (runs in the order they were first held),
//! after a wait that doubles from 1 s to 30 s while rounds fail; an episode of failing writes
//! turns the daemon unhealthy once, and healthy once everything held has landed. Generic over
//! the message `M` and the store's fault `F`: the shell (`reconciler/held.rs`) handles,
//! publishes the health and sets the timers.

use std::collections::VecDeque;
use std::time::Duration;

use uuid::Uuid;

use crate::model::Millis;

/// The first wait before held writes are tried again.
pub const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait between two rounds, however long the store refuses.
pub const LONGEST_WAIT: Duration = Duration::from_secs(30);

/// The wait before the next round after `failed_rounds` rounds in a row that did not land:
/// 1 s, doubling, at most 30 s.
pub fn retry_wait(failed_rounds: u32) -> Duration {
    FIRST_WAIT.saturating_mul(1u32 << failed_rounds.min(16)).min(LONGEST_WAIT)
}

/// What a change to the held writes did to the daemon's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Writes started failing: the first hold of an episode.
    Unhealthy,
    /// Everything held has landed.
    Healthy,
    Same,
}

/// The episode of failing writes under way: since when, the last fault and its error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failing<F> {
    pub since: Millis,
    pub fault: F,
    pub error: String,
}

/// What is held.
#[derive(Debug)]
pub struct HeldWrites<M, F> {
    /// Per run, its messages whose writes could not land, oldest first, with the ones that came
    /// after them; runs in the order they were first held.
    queues: Vec<(Uuid, VecDeque<M>)>,
    /// A claim could not land: the next round claims again (and the loop does not before).
    pub claim: bool,
    pub failing: Option<Failing<F>>,
    /// Rounds in a row in which something could not land.
    failed_rounds: u32,
    /// When the next round is due, while its timer runs.
    pub due: Option<Millis>,
    /// The run a round is replaying, and whether its handler held a write of its own (the
    /// round then leaves the run for the next one).
    marked: Option<Uuid>,
    pub held_marked: bool,
    /// A round is under way: it has the next one due when it ends.
    pub replaying: bool,
}

impl<M, F: Clone> Default for HeldWrites<M, F> {
    fn default() -> Self {
        HeldWrites {
            queues: Vec::new(),
            claim: false,
            failing: None,
            failed_rounds: 0,
            due: None,
            marked: None,
            held_marked: false,
            replaying: false,
        }
    }
}

impl<M, F: Clone> HeldWrites<M, F> {
    fn queue(&mut self, run: Uuid) -> Option<&mut VecDeque<M>> {
        self.queues.iter_mut().find(|(id, _)| *id == run).map(|(_, queue)| queue)
    }

    /// Puts `msg` behind its run's held messages; gives it back when the run has none.
    pub fn behind(&mut self, run: Uuid, msg: M) -> Option<M> {
        match self.queue(run) {
            Some(queue) => {
                queue.push_back(msg);
                None
            }
            None => Some(msg),
        }
    }

    /// Holds `msg` first in its run's queue, for `fault`, at `now`. Says whether the run was
    /// held already, and what this did to the health.
    pub fn hold(&mut self, run: Uuid, msg: M, fault: F, error: String, now: Millis) -> (bool, Turn) {
        self.held_marked |= self.marked == Some(run);
        let already = match self.queue(run) {
            Some(queue) => {
                queue.push_front(msg);
                true
            }
            None => {
                self.queues.push((run, VecDeque::from([msg])));
                false
            }
        };
        (already, self.failed(fault, error, now))
    }

    /// A claim could not land for `fault`.
    pub fn hold_claim(&mut self, fault: F, error: String, now: Millis) -> (bool, Turn) {
        let already = std::mem::replace(&mut self.claim, true);
        (already, self.failed(fault, error, now))
    }

    fn failed(&mut self, fault: F, error: String, now: Millis) -> Turn {
        let turn = match &self.failing {
            Some(_) => Turn::Same,
            None => Turn::Unhealthy,
        };
        let since = self.failing.as_ref().map_or(now, |f| f.since);
        self.failing = Some(Failing { since, fault, error });
        turn
    }

    /// The runs held, in the order they were first held.
    pub fn runs(&self) -> Vec<Uuid> {
        self.queues.iter().map(|(id, _)| *id).collect()
    }

    /// How many runs and messages are held.
    pub fn counts(&self) -> (usize, usize) {
        (self.queues.len(), self.queues.iter().map(|(_, q)| q.len()).sum())
    }

    /// The next message of `run` a round replays.
    pub fn pop(&mut self, run: Uuid) -> Option<M> {
        self.queue(run).and_then(VecDeque::pop_front)
    }

    /// Drops every message held of `run`, a run this node no longer holds (its lease was lost,
    /// or a write was fenced): they are its lost claim's, and replayed they would land under
    /// the node's next token on whatever it holds of the run then, a later attempt it claimed
    /// again included. Says how many were dropped.
    pub fn forget(&mut self, run: Uuid) -> usize {
        let dropped = self.queue(run).map_or(0, |queue| queue.len());
        self.queues.retain(|(id, _)| *id != run);
        dropped
    }

    /// Drops the queue of `run` once empty; says whether it did.
    pub fn landed(&mut self, run: Uuid) -> bool {
        let before = self.queues.len();
        self.queues.retain(|(id, queue)| *id != run || !queue.is_empty());
        self.queues.len() < before
    }

    /// The run a round replays now (None between runs).
    pub fn mark(&mut self, run: Option<Uuid>) {
        self.marked = run;
        self.held_marked = false;
    }

    /// Ends a round: `failed` when something could not land. Nothing left held ends the episode.
    pub fn round_done(&mut self, failed: bool) -> Turn {
        self.failed_rounds = if failed { self.failed_rounds.saturating_add(1) } else { 0 };
        match (&self.failing, self.queues.is_empty() && !self.claim) {
            (Some(_), true) => {
                self.failing = None;
                self.failed_rounds = 0;
                Turn::Healthy
            }
            _ => Turn::Same,
        }
    }

    /// When something is held and no round is due yet: the wait before the next one, due from
    /// `now`.
    pub fn next_round(&mut self, now: Millis) -> Option<Duration> {
        if self.due.is_some() || self.replaying || (self.queues.is_empty() && !self.claim) {
            return None;
        }
        let wait = retry_wait(self.failed_rounds);
        self.due = Some(now + wait.as_millis() as Millis);
        Some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Fault {
        Full,
        Away,
        Lasting,
    }

    #[test]
    fn the_wait_doubles_from_a_second_to_half_a_minute() {
        let waits: Vec<u64> = (0..8).map(|n| retry_wait(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(retry_wait(u32::MAX), LONGEST_WAIT);
    }

    #[test]
    fn a_runs_messages_replay_in_their_order_behind_the_first_that_could_not_land() {
        let mut held: HeldWrites<&str, Fault> = HeldWrites::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        assert_eq!(held.behind(a, "a1"), Some("a1"), "nothing held: handled at once");
        assert_eq!(held.hold(b, "b1", Fault::Full, "disk full".into(), 5), (false, Turn::Unhealthy));
        assert_eq!(held.hold(a, "a1", Fault::Full, "disk full".into(), 6), (false, Turn::Same));
        assert_eq!(held.behind(a, "a2"), None);
        assert_eq!(held.behind(a, "a3"), None);
        // A replayed message that cannot land again goes back first, before those behind it.
        assert_eq!(held.pop(a), Some("a1"));
        assert_eq!(held.hold(a, "a1", Fault::Away, "away".into(), 7), (true, Turn::Same));
        assert_eq!(held.runs(), [b, a], "runs in the order first held");
        assert_eq!(held.counts(), (2, 4));
        let order: Vec<_> = std::iter::from_fn(|| held.pop(a)).collect();
        assert_eq!(order, ["a1", "a2", "a3"]);
        assert_eq!(held.failing, Some(Failing { since: 5, fault: Fault::Away, error: "away".into() }));
    }

    #[test]
    fn an_episode_turns_unhealthy_once_and_healthy_once_everything_landed() {
        let mut held: HeldWrites<&str, Fault> = HeldWrites::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        held.hold(a, "a", Fault::Full, "disk full".into(), 0);
        held.hold(b, "b", Fault::Lasting, "readonly".into(), 0);
        // (round failed, a lands, b lands, claim waits) -> the turn, the next wait in s
        assert_eq!(held.next_round(0), Some(FIRST_WAIT));
        assert_eq!(held.next_round(0), None, "one round at a time");
        held.due = None;
        while held.pop(a).is_some() {}
        assert!(held.landed(a));
        assert_eq!(held.round_done(true), Turn::Same);
        assert_eq!(held.next_round(0), Some(Duration::from_secs(2)), "the wait grows while rounds fail");
        held.due = None;
        assert_eq!(held.hold_claim(Fault::Away, "pool timed out".into(), 0), (false, Turn::Same));
        while held.pop(b).is_some() {}
        assert!(held.landed(b));
        assert_eq!(held.round_done(false), Turn::Same, "the claim still waits");
        held.claim = false;
        assert_eq!(held.round_done(false), Turn::Healthy);
        assert_eq!(held.next_round(0), None, "nothing held, no round");
        assert_eq!(held.hold(a, "a", Fault::Away, "x".into(), 9).1, Turn::Unhealthy, "a new episode");
        assert_eq!(held.next_round(9), Some(FIRST_WAIT), "which starts at the first wait again");
        assert_eq!(held.due, Some(9 + 1_000));
    }

    #[test]
    fn a_run_let_go_has_its_held_messages_dropped_and_the_others_kept() {
        let mut held: HeldWrites<&str, Fault> = HeldWrites::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        held.hold(a, "a1", Fault::Away, "away".into(), 0);
        assert_eq!(held.behind(a, "a2"), None);
        held.hold(b, "b1", Fault::Away, "away".into(), 0);
        assert_eq!(held.forget(a), 2);
        assert_eq!(held.forget(a), 0, "nothing left of it");
        assert_eq!(held.pop(a), None, "nothing of it replays");
        assert_eq!(held.behind(a, "a3"), Some("a3"), "its next message is handled at once");
        assert_eq!((held.runs(), held.counts()), (vec![b], (1, 1)));
        while held.pop(b).is_some() {}
        held.landed(b);
        assert_eq!(held.round_done(false), Turn::Healthy, "the episode ends with the last held");
    }

    #[test]
    fn a_replayed_handler_that_holds_its_own_write_leaves_its_run_for_the_next_round() {
        let mut held: HeldWrites<&str, Fault> = HeldWrites::default();
        let a = Uuid::from_u128(1);
        held.hold(a, "a", Fault::Full, "full".into(), 0);
        held.mark(Some(a));
        let msg = held.pop(a).unwrap();
        // Its handler held a write of its own (a note, say) for the same run.
        held.hold(a, msg, Fault::Full, "full".into(), 1);
        assert!(held.held_marked);
        held.mark(None);
        assert!(!held.held_marked);
        assert!(!held.landed(a));
    }
}
