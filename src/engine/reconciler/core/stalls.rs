//! The stall watchdog: a running run whose step has not moved for its workflow's
//! `stall_timeout`, counted from the last recorded change (so a restarted daemon keeps the
//! clock), fails, or is retried when the policy says `retry_on_stall` and attempts are left.

use crate::model::progress::span;
use crate::model::{Millis, ProgressPoint, Run, RunState};
use crate::workflow::retry::{RetryDecision, after_stall};

/// What a run's stall clock asks at a moment.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No stall timeout, or the run is not running.
    None,
    /// Not stalled yet: look again at this time.
    Until(Millis),
    Fail {
        reason: String,
    },
    Retry {
        reason: String,
    },
}

/// The stall decision for `run` at `now`: its clock runs from `clock_from` (its last recorded
/// change, or when it reached `running`), and `last` is its last step.
pub fn decide(run: &Run, clock_from: Millis, last: Option<ProgressPoint>, now: Millis) -> Verdict {
    let Some(timeout) = run.spec.stall_timeout else { return Verdict::None };
    if run.state != RunState::Running {
        return Verdict::None;
    }
    let deadline = clock_from.saturating_add(timeout.0.as_millis() as Millis);
    if now < deadline {
        return Verdict::Until(deadline);
    }
    let at = match last {
        Some(p) => format!("at step {} {}", p.step, super::stage_end::of_total(p.total)),
        None => "no step reported yet".to_string(),
    };
    let reason = format!("stalled: no progress for {} ({at})", span(timeout.0));
    let policy = run.spec.retry.as_ref();
    // Like every retry, a stall counts the attempts charged: a preemption's requeue is none.
    match after_stall(policy, run.charged_attempts()) {
        RetryDecision::RetryIn(wait) => {
            let reason = format!(
                "{reason} (transient by the retry policy): {}",
                super::retries::next_attempt_words(run, wait)
            );
            Verdict::Retry { reason }
        }
        RetryDecision::Fail => Verdict::Fail { reason },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::reconciler::core::testing::run;
    use RunState as S;

    const STALL: &str = "stall_timeout: 10m\n";
    const RETRIED: &str =
        "stall_timeout: 10m\nretry: {max_attempts: 2, backoff: 30s, retry_on_stall: true}\n";
    const MIN: Millis = 60_000;

    fn at(step: i64, total: Option<i64>) -> Option<ProgressPoint> {
        Some(ProgressPoint { attempt: 1, step, total, at: 0 })
    }

    #[test]
    fn a_run_whose_step_stands_still_past_its_timeout_fails_or_is_retried() {
        let fail = |s: &str| Verdict::Fail { reason: s.into() };
        // (workflow tail, state, attempt, preemptions, clock from, last step, now) -> verdict
        let table = [
            ("", S::Running, 1, 0, 0, None, 99 * MIN, Verdict::None),
            (STALL, S::Starting, 1, 0, 0, None, 99 * MIN, Verdict::None),
            (STALL, S::Stopping, 1, 0, 0, None, 99 * MIN, Verdict::None),
            (STALL, S::Running, 1, 0, 5 * MIN, at(40, Some(100)), 14 * MIN, Verdict::Until(15 * MIN)),
            (STALL, S::Running, 1, 0, 5 * MIN, at(40, Some(100)), 15 * MIN, fail("stalled: no progress for 10m (at step 40 of 100)")),
            (STALL, S::Running, 1, 0, 0, at(7, None), 10 * MIN, fail("stalled: no progress for 10m (at step 7 of an unknown total)")),
            (STALL, S::Running, 1, 0, 0, None, 10 * MIN, fail("stalled: no progress for 10m (no step reported yet)")),
            (
                RETRIED,
                S::Running,
                1,
                0,
                0,
                None,
                10 * MIN,
                Verdict::Retry {
                    reason: "stalled: no progress for 10m (no step reported yet) (transient by the retry policy): attempt 2 of 2 starts in 30s".into(),
                },
            ),
            (RETRIED, S::Running, 2, 0, 0, None, 10 * MIN, fail("stalled: no progress for 10m (no step reported yet)")),
            // A preemption's requeue charged no attempt: attempt 2 after one is still the first.
            (
                RETRIED,
                S::Running,
                2,
                1,
                0,
                None,
                10 * MIN,
                Verdict::Retry {
                    reason: "stalled: no progress for 10m (no step reported yet) (transient by the retry policy): attempt 3 (2 of 2 by the retry policy, preemptions not counted) starts in 30s".into(),
                },
            ),
            (RETRIED, S::Running, 3, 1, 0, None, 10 * MIN, fail("stalled: no progress for 10m (no step reported yet)")),
        ];
        for (i, (tail, state, attempt, preemptions, clock_from, last, now, want)) in
            table.into_iter().enumerate()
        {
            let mut stalled = run(1, tail, state, 0, Some(0));
            (stalled.attempt, stalled.preemptions) = (attempt, preemptions);
            assert_eq!(decide(&stalled, clock_from, last, now), want, "row {i}");
        }
    }
}
