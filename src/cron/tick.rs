//! Which due times of a schedule have passed since it last fired or was checked, and what the
//! daemon does about them: fire once for the latest, count the others as missed, or skip while
//! the previous test runs. Pure: the clock is a parameter.

use chrono::{DateTime, Utc};

use super::Cron;

/// Due times counted past this are not counted: a `* * * * *` schedule whose daemon was down
/// for a year still costs at most this many croner searches (about a week of minutes).
pub const MAX_COUNTED_DUE_TIMES: usize = 10_000;

/// What the daemon should do for one schedule at one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    /// Nothing is due.
    Idle { next: Option<DateTime<Utc>> },
    /// Enqueue one test for `due_at`, the latest due time. `missed` earlier due times passed
    /// without a test (the daemon was down); they get no tests of their own, only a record.
    Fire { due_at: DateTime<Utc>, missed: usize, next: Option<DateTime<Utc>> },
    /// Something is due but the schedule's previous test still runs: record the due time as
    /// skipped ("previous test still running") and enqueue nothing.
    Skip { due_at: DateTime<Utc>, missed: usize, next: Option<DateTime<Utc>> },
}

impl Tick {
    /// The first due time after this check.
    pub fn next(&self) -> Option<DateTime<Utc>> {
        match self {
            Tick::Idle { next } | Tick::Fire { next, .. } | Tick::Skip { next, .. } => *next,
        }
    }
}

/// Decides what is due in `(last_fired_or_checked, now]`.
///
/// The caller stores `now` as the new `last_fired_or_checked` after every tick, whatever it
/// returned: after a `Skip` too, since a skipped due time must not fire once the running test
/// ends. A new schedule starts from its creation time. `missed` stops growing at
/// `MAX_COUNTED_DUE_TIMES - 1`. If the clock went back (`now` before `last`), nothing is due and
/// `next` comes after `last`, since the due times up to `last` were already handled.
pub fn tick(
    cron: &Cron,
    last_fired_or_checked: DateTime<Utc>,
    now: DateTime<Utc>,
    test_running: bool,
) -> Tick {
    let next = cron.next_after(now.max(last_fired_or_checked));
    let Some(due) = due_between(cron, last_fired_or_checked, now) else {
        return Tick::Idle { next };
    };
    let missed = due.count.saturating_sub(1);
    if test_running {
        Tick::Skip { due_at: due.latest, missed, next }
    } else {
        Tick::Fire { due_at: due.latest, missed, next }
    }
}

/// The due times in `(last, now]`: how many (up to the cap) and the latest.
struct Due {
    latest: DateTime<Utc>,
    count: usize,
}

fn due_between(cron: &Cron, last: DateTime<Utc>, now: DateTime<Utc>) -> Option<Due> {
    let mut count = 0;
    let mut latest = None;
    let mut cursor = last;
    while count < MAX_COUNTED_DUE_TIMES {
        match cron.next_after(cursor) {
            Some(t) if t <= now => {
                count += 1;
                latest = Some(t);
                cursor = t;
            }
            _ => break,
        }
    }
    let mut latest = latest?;
    if count == MAX_COUNTED_DUE_TIMES {
        // Counting stopped early, so the latest due time is found by searching back from now.
        latest = cron.latest_at_or_before(now).filter(|t| *t > latest).unwrap_or(latest);
    }
    Some(Due { latest, count })
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    // The parent's test helpers: an instant in UTC, an expression, one in a zone.
    use crate::cron::tests::{cron, cron_in, utc};

    // 2025-01-06 is a Monday.
    const MON: u32 = 6;

    #[test]
    fn idle_when_nothing_is_due() {
        let c = cron("0 3 * * *");
        let tick = tick(&c, utc(2025, 1, 6, 4, 0), utc(2025, 1, 6, 12, 0), false);
        assert_eq!(tick, Tick::Idle { next: Some(utc(2025, 1, 7, 3, 0)) });
    }

    #[test]
    fn fires_once_with_no_misses() {
        let c = cron("0 3 * * *");
        let tick = tick(&c, utc(2025, 1, 6, 2, 59), utc(2025, 1, 6, 3, 1), false);
        assert_eq!(
            tick,
            Tick::Fire { due_at: utc(2025, 1, 6, 3, 0), missed: 0, next: Some(utc(2025, 1, 7, 3, 0)) }
        );
    }

    #[test]
    fn catch_up_after_downtime_is_one_test() {
        let c = cron("0 3 * * *");
        // Monday 00:00 to Thursday 12:00: due Monday, Tuesday, Wednesday and Thursday at 03:00.
        let tick = tick(&c, utc(2025, 1, MON, 0, 0), utc(2025, 1, MON + 3, 12, 0), false);
        assert_eq!(
            tick,
            Tick::Fire {
                due_at: utc(2025, 1, MON + 3, 3, 0),
                missed: 3,
                next: Some(utc(2025, 1, MON + 4, 3, 0))
            }
        );
        // Down over three due times: one Fire, two missed.
        let tick = tick_of(&c, utc(2025, 1, MON, 4, 0), utc(2025, 1, MON + 3, 3, 30));
        assert!(matches!(tick, Tick::Fire { missed: 2, .. }), "{tick:?}");
    }

    fn tick_of(c: &Cron, last: DateTime<Utc>, now: DateTime<Utc>) -> Tick {
        tick(c, last, now, false)
    }

    #[test]
    fn due_time_boundaries() {
        let c = cron("0 3 * * *");
        let due = utc(2025, 1, 6, 3, 0);
        // now == due time: it fires.
        let at = tick_of(&c, due - TimeDelta::minutes(1), due);
        assert_eq!(at, Tick::Fire { due_at: due, missed: 0, next: Some(utc(2025, 1, 7, 3, 0)) });
        // last == due time: already handled, no second fire.
        assert_eq!(
            tick_of(&c, due, due + TimeDelta::minutes(1)),
            Tick::Idle { next: Some(utc(2025, 1, 7, 3, 0)) }
        );
        assert_eq!(tick_of(&c, due, due), Tick::Idle { next: Some(utc(2025, 1, 7, 3, 0)) });
        // A hair before the due time: not yet.
        assert_eq!(
            tick_of(&c, due - TimeDelta::minutes(1), due - TimeDelta::milliseconds(1)),
            Tick::Idle { next: Some(due) }
        );
    }

    #[test]
    fn skips_while_the_previous_test_runs() {
        let c = cron("0 3 * * *");
        let running = tick(&c, utc(2025, 1, 6, 2, 0), utc(2025, 1, 6, 3, 0), true);
        assert_eq!(
            running,
            Tick::Skip { due_at: utc(2025, 1, 6, 3, 0), missed: 0, next: Some(utc(2025, 1, 7, 3, 0)) }
        );
        // Catch-up while running is one Skip too.
        let running = tick(&c, utc(2025, 1, MON, 0, 0), utc(2025, 1, MON + 3, 12, 0), true);
        assert!(matches!(running, Tick::Skip { missed: 3, .. }), "{running:?}");
        // Nothing due while running is just Idle.
        let idle = tick(&c, utc(2025, 1, 6, 4, 0), utc(2025, 1, 6, 5, 0), true);
        assert!(matches!(idle, Tick::Idle { .. }));
    }

    #[test]
    fn clock_going_back_fires_nothing() {
        let c = cron("0 3 * * *");
        let tick = tick_of(&c, utc(2025, 1, 8, 12, 0), utc(2025, 1, 6, 12, 0));
        assert_eq!(tick, Tick::Idle { next: Some(utc(2025, 1, 9, 3, 0)) });
    }

    #[test]
    fn a_year_of_minutes_is_one_bounded_fire() {
        let c = cron("* * * * *");
        let now = utc(2026, 1, 1, 0, 0) + TimeDelta::seconds(30);
        let started = std::time::Instant::now();
        let tick = tick_of(&c, utc(2025, 1, 1, 0, 0), now);
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        assert_eq!(
            tick,
            Tick::Fire {
                due_at: utc(2026, 1, 1, 0, 0),
                missed: MAX_COUNTED_DUE_TIMES - 1,
                next: Some(utc(2026, 1, 1, 0, 1))
            }
        );
        assert_eq!(tick.next(), Some(utc(2026, 1, 1, 0, 1)));
    }

    #[test]
    fn catch_up_in_a_time_zone() {
        let c = cron_in("0 3 * * *", "Europe/Paris");
        let tick = tick_of(&c, utc(2025, 3, 28, 12, 0), utc(2025, 3, 31, 12, 0));
        assert_eq!(
            tick,
            Tick::Fire { due_at: utc(2025, 3, 31, 1, 0), missed: 2, next: Some(utc(2025, 4, 1, 1, 0)) }
        );
    }
}
