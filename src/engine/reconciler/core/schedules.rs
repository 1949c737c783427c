//! Schedules: what a due schedule records (`crate::cron::tick` decides whether it fires, skips
//! or idles), and when the loop next needs to look.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::cron::Tick;

/// The event a schedule's tick records: one catch-up test for any number of due times missed
/// while no daemon ran, a skip while its previous test still runs. None when nothing was due.
/// `test` is the test a firing enqueues.
pub fn note(tick: &Tick, test: Uuid) -> Option<String> {
    match *tick {
        Tick::Idle { .. } => None,
        Tick::Fire { due_at, missed, .. } if missed > 0 => Some(format!(
            "caught up: {} due times passed while no daemon ran; enqueued one test ({test}) for {due_at}",
            missed + 1
        )),
        Tick::Fire { due_at, .. } => Some(format!("fired for {due_at}: enqueued test {test}")),
        Tick::Skip { due_at, missed, .. } => Some(format!(
            "skipped {} due time{} up to {due_at}: the previous test is still running",
            missed + 1,
            if missed > 0 { "s" } else { "" }
        )),
    }
}

/// The earlier of two next due times (None: never).
pub fn earliest(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_tick_records_what_it_did_in_words() {
        let at = |h| Utc.with_ymd_and_hms(2026, 11, 28, h, 0, 0).unwrap();
        let test = Uuid::from_u128(1);
        let table = [
            (Tick::Idle { next: Some(at(3)) }, None),
            (
                Tick::Fire { due_at: at(2), missed: 0, next: Some(at(3)) },
                Some("fired for 2026-11-28 02:00:00 UTC: enqueued test 00000000-0000-0000-0000-000000000001"),
            ),
            (
                Tick::Fire { due_at: at(2), missed: 2, next: None },
                Some(
                    "caught up: 3 due times passed while no daemon ran; enqueued one test (00000000-0000-0000-0000-000000000001) for 2026-11-28 02:00:00 UTC",
                ),
            ),
            (
                Tick::Skip { due_at: at(2), missed: 0, next: None },
                Some("skipped 1 due time up to 2026-11-28 02:00:00 UTC: the previous test is still running"),
            ),
            (
                Tick::Skip { due_at: at(2), missed: 1, next: None },
                Some("skipped 2 due times up to 2026-11-28 02:00:00 UTC: the previous test is still running"),
            ),
        ];
        for (tick, want) in table {
            assert_eq!(note(&tick, test).as_deref(), want, "{tick:?}");
        }
        assert_eq!(earliest(Some(at(3)), Some(at(2))), Some(at(2)));
        assert_eq!(earliest(None, Some(at(2))), Some(at(2)));
        assert_eq!(earliest(None, None), None);
    }
}
