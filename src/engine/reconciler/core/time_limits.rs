//! A run's time limit: when its current attempt reaches it, and what reaching it decides (fail,
//! or retry when the policy retries time limits and attempts are left).

use std::time::Duration;

use crate::model::{Millis, Run, RunState};
use crate::workflow::retry::{RetryDecision, after_time_limit};

/// What a run's time limit asks at a moment.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No limit, or the run is not in an attempt (not started, or already ending).
    None,
    /// Not reached: look again at this time.
    Until(Millis),
    Fail {
        reason: String,
    },
    Retry {
        reason: String,
        wait: Duration,
    },
}

/// When the run's current attempt reaches its limit, if it has one and is under way.
pub fn deadline(run: &Run) -> Option<Millis> {
    let limit = run.spec.time_limit?;
    let started = run.started_at?;
    matches!(run.state, RunState::Starting | RunState::Running)
        .then(|| started.saturating_add(limit.0.as_millis() as Millis))
}

/// The decision for `run` at `now`.
pub fn decide(run: &Run, now: Millis) -> Verdict {
    let (Some(limit), Some(deadline)) = (run.spec.time_limit, deadline(run)) else { return Verdict::None };
    if now < deadline {
        return Verdict::Until(deadline);
    }
    let reason = format!("time limit {} reached", limit_text(limit.0));
    let policy = run.spec.retry.as_ref();
    match after_time_limit(policy, run.charged_attempts()) {
        RetryDecision::Fail => Verdict::Fail { reason },
        RetryDecision::RetryIn(wait) => {
            let reason = format!(
                "{reason} (retried by the retry policy): {}",
                super::retries::next_attempt_words(run, wait)
            );
            Verdict::Retry { reason, wait }
        }
    }
}

/// A limit as people write it: `10h`, `90m`, `2s` (`text::whole_units`).
pub fn limit_text(limit: Duration) -> String {
    crate::text::whole_units(limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::{Dur, RetryPolicy, Workflow};
    use uuid::Uuid;

    fn run(
        state: RunState,
        limit: Option<u64>,
        started_at: Option<Millis>,
        retry: bool,
        attempt: i64,
    ) -> Run {
        let mut spec =
            Workflow::parse(std::path::Path::new("t.yaml"), "name: t\nstages:\n  - {name: a, argv: [x]}\n")
                .unwrap();
        spec.time_limit = limit.map(|s| Dur(Duration::from_secs(s)));
        spec.retry = Some(RetryPolicy {
            max_attempts: 2,
            backoff: Some(Dur(Duration::from_secs(1))),
            backoff_max: None,
            retry_on_exit_codes: vec![],
            on_node_lost: true,
            retry_on_stall: false,
            retry_on_time_limit: retry,
            resume: true,
        });
        let mut run = Run::queued(Uuid::nil(), spec, "/tmp/r".into(), 0, Default::default());
        run.state = state;
        run.started_at = started_at;
        run.attempt = attempt;
        run
    }

    #[test]
    fn the_limit_is_decided_from_the_attempts_start() {
        use RunState::*;
        let fail = |s: &str| Verdict::Fail { reason: s.into() };
        let h10 = 36_000;
        let retried = "time limit 2s reached (retried by the retry policy): attempt 2 of 2 starts in 1s";
        // (state, limit s, started at, retry_on_time_limit, attempt, now) -> verdict
        let table = [
            (Running, None, Some(0), false, 1, 99_999_999, Verdict::None),
            (Pending, Some(2), None, false, 1, 5_000, Verdict::None),
            (Stopping, Some(2), Some(0), false, 1, 5_000, Verdict::None),
            (Failed, Some(2), Some(0), false, 1, 5_000, Verdict::None),
            (Starting, Some(2), Some(1_000), false, 1, 2_999, Verdict::Until(3_000)),
            (Running, Some(2), Some(1_000), false, 1, 3_000, fail("time limit 2s reached")),
            (Starting, Some(h10), Some(0), false, 1, h10 as i64 * 1000, fail("time limit 10h reached")),
            (Running, Some(90 * 60), Some(0), false, 1, 6_000_000, fail("time limit 90m reached")),
            (
                Running,
                Some(2),
                Some(0),
                true,
                1,
                2_000,
                Verdict::Retry { reason: retried.into(), wait: Duration::from_secs(1) },
            ),
            // The last attempt fails even when time limits are retried.
            (Running, Some(2), Some(0), true, 2, 2_000, fail("time limit 2s reached")),
        ];
        for (i, (state, limit, started, retry, attempt, now, want)) in table.into_iter().enumerate() {
            assert_eq!(decide(&run(state, limit, started, retry, attempt), now), want, "row {i}");
        }
    }
}
