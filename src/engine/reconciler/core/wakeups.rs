//! When a retry's backoff ends, so the loop claims then rather than at the next scan. Two
//! sources: the `not_before` of the runs this loop queued again itself (a retry, a lost node's
//! runs), kept as it writes them; and the store's earliest backoff end among the pending runs
//! this node could take (its labels), after its last look at the queue (`ClaimStore::next_backoff_end`), read at start and after
//! each claim pass (a wake-up or NOTIFY is followed by one), which finds the runs another node
//! queued again, or this daemon did before it restarted. The loop wakes at the earliest of the
//! two. Bounded: past `MAX` own waits the latest are dropped; the store's answer and the scan,
//! which stays the fallback, find those.

use std::collections::BTreeSet;
use std::time::Duration;

use uuid::Uuid;

use crate::model::Millis;

/// How many waits are kept at most.
pub const MAX: usize = 256;

/// How long the loop sleeps with no backoff to wait for (the scan comes first anyway).
pub const IDLE: Duration = Duration::from_secs(3600);

/// Past the due time: a clock read a little early still finds the run claimable.
const MARGIN: Duration = Duration::from_millis(5);

/// The retry waits the loop knows of, earliest first.
#[derive(Debug, Default)]
pub struct Wakeups {
    due: BTreeSet<(Millis, Uuid)>,
    /// The store's earliest backoff end after the last look at the queue.
    stored: Option<Millis>,
}

impl Wakeups {
    /// `run` may be claimed from `not_before` on.
    pub fn add(&mut self, run: Uuid, not_before: Millis) {
        self.due.insert((not_before, run));
        while self.due.len() > MAX {
            self.due.pop_last();
        }
    }

    /// What the store said after a look at the queue: the earliest backoff end after the look
    /// among the pending runs (None: none backs off). It replaces the store's previous answer.
    pub fn stored(&mut self, earliest: Option<Millis>) {
        self.stored = earliest;
    }

    /// When the loop should wake next for a retry, if it knows of one.
    pub fn next(&self) -> Option<Millis> {
        wake_at(self.due.first().map(|(at, _)| *at), self.stored)
    }

    /// Forgets the waits over at `now`; true if any was, and the queue should be looked at.
    pub fn take_due(&mut self, now: Millis) -> bool {
        let later = self.due.split_off(&(now.saturating_add(1), Uuid::nil()));
        let stored_due = self.stored.is_some_and(|at| at <= now);
        if stored_due {
            self.stored = None;
        }
        let any = !self.due.is_empty() || stored_due;
        self.due = later;
        any
    }
}

/// When the loop wakes next to claim: the earliest backoff end it knows of, its own requeues'
/// (`own`) or the store's (`stored`); None when neither knows of one (the scan alone).
pub fn wake_at(own: Option<Millis>, stored: Option<Millis>) -> Option<Millis> {
    match (own, stored) {
        (Some(own), Some(stored)) => Some(own.min(stored)),
        (one, other) => one.or(other),
    }
}

/// How long the loop sleeps for the wake-up at `at`, at `now`: until just past it (at once if
/// it is over), `IDLE` at most (a longer backoff is slept in turns), and `IDLE` with none.
pub fn sleep_for(at: Option<Millis>, now: Millis) -> Duration {
    match at {
        Some(at) => (Duration::from_millis(at.saturating_sub(now).max(0) as u64) + MARGIN).min(IDLE),
        None => IDLE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    #[test]
    fn the_loop_wakes_at_the_earliest_backoff_end_it_knows_of() {
        let mut waits = Wakeups::default();
        assert_eq!(waits.next(), None, "none known: the scan alone");
        waits.add(id(1), 5_000);
        waits.add(id(2), 2_000);
        waits.add(id(3), 9_000);
        // (now) -> any over, next wake-up
        let table = [
            (1_999, false, Some(2_000)),
            (2_000, true, Some(5_000)),
            (8_000, true, Some(9_000)),
            (9_500, true, None),
            (10_000, false, None),
        ];
        for (i, (now, any, next)) in table.into_iter().enumerate() {
            assert_eq!((waits.take_due(now), waits.next()), (any, next), "row {i}");
        }
    }

    #[test]
    fn the_wake_up_is_the_earliest_of_its_own_requeues_and_the_stores() {
        // (own, stored) -> wake at: another node's requeue, or one from before a restart, is
        // known through the store alone.
        let table = [
            (None, None, None),
            (Some(5_000), None, Some(5_000)),
            (None, Some(3_000), Some(3_000)),
            (Some(5_000), Some(3_000), Some(3_000)),
            (Some(2_000), Some(3_000), Some(2_000)),
            (Some(4_000), Some(4_000), Some(4_000)),
        ];
        for (i, (own, stored, want)) in table.into_iter().enumerate() {
            assert_eq!(wake_at(own, stored), want, "row {i}");
        }
    }

    #[test]
    fn the_stores_answer_wakes_the_loop_once_and_is_replaced_by_the_next() {
        let mut waits = Wakeups::default();
        waits.add(id(1), 8_000);
        waits.stored(Some(3_000));
        // (now, the store's answer after a look then, if one) -> any over, next wake-up
        let table = [
            (2_000, None, false, Some(3_000)),
            (3_000, None, true, Some(8_000)),
            // The claim pass that followed read the next one.
            (3_000, Some(Some(6_000)), false, Some(6_000)),
            // Another node took that run meanwhile: the store says none backs off now.
            (4_000, Some(None), false, Some(8_000)),
            (8_000, None, true, None),
        ];
        for (i, (now, answer, any, next)) in table.into_iter().enumerate() {
            if let Some(answer) = answer {
                waits.stored(answer);
            }
            assert_eq!((waits.take_due(now), waits.next()), (any, next), "row {i}");
        }
    }

    #[test]
    fn the_loop_sleeps_until_just_past_the_wake_up_or_at_once_when_it_is_over() {
        // (wake at, now) -> sleep
        let table = [
            (None, 1_000, IDLE),
            (Some(1_500), 1_000, Duration::from_millis(505)),
            (Some(1_000), 1_000, MARGIN),
            (Some(500), 1_000, MARGIN),
            (Some(Millis::MIN), Millis::MAX, MARGIN),
            (Some(Millis::MAX), 0, IDLE),
        ];
        for (i, (at, now, want)) in table.into_iter().enumerate() {
            assert_eq!(sleep_for(at, now), want, "row {i}");
        }
    }

    #[test]
    fn past_its_bound_the_latest_waits_are_left_to_the_scan() {
        let mut waits = Wakeups::default();
        for n in 0..(MAX as u128 + 10) {
            waits.add(id(n), 1_000 + n as Millis);
        }
        waits.add(id(9_999), 10);
        assert_eq!(waits.due.len(), MAX);
        assert_eq!(waits.next(), Some(10), "an earlier wait still goes first");
        assert_eq!(waits.due.last().map(|(at, _)| *at), Some(1_000 + MAX as Millis - 2));
    }
}
