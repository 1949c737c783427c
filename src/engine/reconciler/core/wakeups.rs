//! When a retry's backoff ends: the loop keeps the `not_before` of the runs it queued again (a
//! retry, a lost node's runs) and wakes to claim at the earliest, rather than at the next
//! scan. Bounded: past `MAX` waits the latest are dropped, and the scan, which stays the
//! fallback, finds those.

use std::collections::BTreeSet;

use uuid::Uuid;

use crate::model::Millis;

/// How many waits are kept at most.
pub const MAX: usize = 256;

/// The retry waits the loop knows of, earliest first.
#[derive(Debug, Default)]
pub struct Wakeups {
    due: BTreeSet<(Millis, Uuid)>,
}

impl Wakeups {
    /// `run` may be claimed from `not_before` on.
    pub fn add(&mut self, run: Uuid, not_before: Millis) {
        self.due.insert((not_before, run));
        while self.due.len() > MAX {
            self.due.pop_last();
        }
    }

    /// When the loop should wake next for a retry, if it knows of one.
    pub fn next(&self) -> Option<Millis> {
        self.due.first().map(|(at, _)| *at)
    }

    /// Forgets the waits over at `now`; true if any was, and the queue should be looked at.
    pub fn take_due(&mut self, now: Millis) -> bool {
        let later = self.due.split_off(&(now.saturating_add(1), Uuid::nil()));
        let any = !self.due.is_empty();
        self.due = later;
        any
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
