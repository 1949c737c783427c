//! When a reading of a run's step counts: only while the run is starting or running, only
//! when the step or total changed (a reading without a total keeps the last one known), and a
//! first reading of step 0 is not progress: the stall clock still runs from `running`.

use crate::model::{Millis, ProgressPoint, RunState};
use crate::workflow::progress::Reading;

/// What a reading does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counts {
    /// Nothing: the run is not under way, or nothing changed.
    No,
    /// Record `point`; when `moves_clock`, the stall clock runs from it.
    Record { point: ProgressPoint, moves_clock: bool },
}

/// What `reading` of attempt `attempt` of a run in `state` does at `now`, after `last`.
pub fn reading(
    state: RunState,
    attempt: i64,
    last: Option<ProgressPoint>,
    reading: Reading,
    now: Millis,
) -> Counts {
    if !matches!(state, RunState::Starting | RunState::Running) {
        return Counts::No;
    }
    let step = reading.step.min(i64::MAX as u64) as i64;
    let total = reading.total.map(|t| t.min(i64::MAX as u64) as i64).or(last.and_then(|p| p.total));
    if last.is_some_and(|p| p.step == step && p.total == total) {
        return Counts::No;
    }
    let point = ProgressPoint { attempt, step, total, at: now };
    Counts::Record { point, moves_clock: last.is_some() || step > 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunState as S;

    fn point(step: i64, total: Option<i64>, at: Millis) -> Option<ProgressPoint> {
        Some(ProgressPoint { attempt: 2, step, total, at })
    }

    fn read(step: u64, total: Option<u64>) -> Reading {
        Reading { step, total }
    }

    #[test]
    fn a_reading_counts_when_its_run_is_under_way_and_its_step_moved() {
        let record = |step, total, moves_clock| Counts::Record {
            point: ProgressPoint { attempt: 2, step, total, at: 50 },
            moves_clock,
        };
        // (state, last, reading) -> what it does at 50
        let table = [
            (S::Running, None, read(3, Some(10)), record(3, Some(10), true)),
            (S::Starting, None, read(3, Some(10)), record(3, Some(10), true)),
            // A first step 0 is recorded, but the stall clock still runs from `running`.
            (S::Running, None, read(0, Some(10)), record(0, Some(10), false)),
            (S::Running, point(0, Some(10), 9), read(1, Some(10)), record(1, Some(10), true)),
            // The same step and total again: nothing.
            (S::Running, point(3, Some(10), 9), read(3, Some(10)), Counts::No),
            (S::Running, point(3, Some(10), 9), read(3, None), Counts::No),
            // A total read later, or a new one, is a change.
            (S::Running, point(3, None, 9), read(3, Some(12)), record(3, Some(12), true)),
            // A reading without a total keeps the last one known.
            (S::Running, point(3, Some(10), 9), read(4, None), record(4, Some(10), true)),
            // A step going back (a resumed attempt) is recorded too.
            (S::Running, point(7, Some(10), 9), read(5, Some(10)), record(5, Some(10), true)),
            // A run no longer under way takes no reading (one that landed after its end).
            (S::Retrying, None, read(4, Some(10)), Counts::No),
            (S::Failed, point(3, Some(10), 9), read(4, Some(10)), Counts::No),
            (S::Stopping, None, read(4, Some(10)), Counts::No),
            (S::Pending, None, read(4, Some(10)), Counts::No),
        ];
        for (i, (state, last, got, want)) in table.into_iter().enumerate() {
            assert_eq!(reading(state, 2, last, got, 50), want, "row {i}");
        }
        let huge = reading(S::Running, 2, None, read(u64::MAX, Some(u64::MAX)), 50);
        assert_eq!(huge, record(i64::MAX, Some(i64::MAX), true), "kept within the store's integers");
    }
}
