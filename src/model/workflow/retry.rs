//! A workflow's retry policy: which failures are transient, how many attempts a run gets and
//! how long it waits between them. Pure; the node that owns the run applies the decision.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Dur;

const DEFAULT_BACKOFF: Duration = Duration::from_secs(10);
const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(600);
/// The shortest wait between attempts: a zero backoff would retry in a hot loop.
pub const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// The most attempts a run may get, the first one included.
pub const MAX_ATTEMPTS: u32 = 100;

/// Written under `retry:` in a workflow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included.
    pub max_attempts: u32,
    /// The wait before the second attempt; it doubles for each later one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Dur>,
    /// The longest wait between attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_max: Option<Dur>,
    /// Exit codes that mean "transient" (an NCCL timeout, a preempted trainer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_on_exit_codes: Vec<i32>,
    /// Whether a run whose node was lost is queued again (while attempts are left).
    #[serde(default = "yes")]
    pub on_node_lost: bool,
    /// Whether a run that stalled (no progress for `stall_timeout`) is queued again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retry_on_stall: bool,
    /// Whether a run stopped at its `time_limit` is queued again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retry_on_time_limit: bool,
    /// Whether a retry resumes from the last resumable checkpoint (`checkpoints:`).
    #[serde(default = "yes")]
    pub resume: bool,
}

fn yes() -> bool {
    true
}

impl RetryPolicy {
    /// The wait before the next attempt if a stage's `exit` during attempt `attempt` is
    /// transient and attempts are left; None means the run fails.
    pub fn after_exit(&self, attempt: i64, exit_code: Option<i32>) -> Option<Duration> {
        let transient = exit_code.is_some_and(|code| self.retry_on_exit_codes.contains(&code));
        (transient && self.attempts_left(attempt)).then(|| self.backoff_after(attempt))
    }

    /// The wait before the next attempt when attempt `attempt` lost its node.
    pub fn after_node_lost(&self, attempt: i64) -> Option<Duration> {
        (self.on_node_lost && self.attempts_left(attempt)).then(|| self.backoff_after(attempt))
    }

    /// The wait before the next attempt when attempt `attempt` stalled.
    pub fn after_stall(&self, attempt: i64) -> Option<Duration> {
        (self.retry_on_stall && self.attempts_left(attempt)).then(|| self.backoff_after(attempt))
    }

    /// The wait before the next attempt when attempt `attempt` reached its time limit.
    pub fn after_time_limit(&self, attempt: i64) -> Option<Duration> {
        (self.retry_on_time_limit && self.attempts_left(attempt)).then(|| self.backoff_after(attempt))
    }

    fn attempts_left(&self, attempt: i64) -> bool {
        attempt < i64::from(self.max_attempts)
    }

    /// `backoff`, doubled for each attempt after the first, capped at `backoff_max`.
    pub fn backoff_after(&self, attempt: i64) -> Duration {
        let base = self.backoff.map_or(DEFAULT_BACKOFF, |d| d.0);
        let max = self.backoff_max.map_or(DEFAULT_BACKOFF_MAX, |d| d.0);
        let doublings = u32::try_from(attempt.saturating_sub(1)).unwrap_or(u32::MAX).min(20);
        base.saturating_mul(1 << doublings).min(max)
    }

    /// Checks the policy; errors are (field, problem).
    pub(crate) fn validate(&self) -> Result<(), (String, String)> {
        if self.max_attempts == 0 {
            return Err(("retry.max_attempts".into(), "must be at least 1 (the first attempt)".into()));
        }
        if self.max_attempts > MAX_ATTEMPTS {
            return Err(("retry.max_attempts".into(), format!("must be at most {MAX_ATTEMPTS}")));
        }
        for (field, wait) in [("retry.backoff", self.backoff), ("retry.backoff_max", self.backoff_max)] {
            if let Some(wait) = wait
                && wait.0 < MIN_BACKOFF
            {
                return Err((
                    field.into(),
                    format!("{wait} is shorter than the minimum of {}", Dur(MIN_BACKOFF)),
                ));
            }
        }
        if let Some(code) = self.retry_on_exit_codes.iter().find(|c| !(1..=255).contains(*c)) {
            return Err((
                "retry.retry_on_exit_codes".into(),
                format!("{code} is not a failing exit code (1 to 255)"),
            ));
        }
        if let (Some(base), Some(max)) = (self.backoff, self.backoff_max)
            && base > max
        {
            return Err(("retry.backoff_max".into(), format!("{max} is shorter than the backoff {base}")));
        }
        Ok(())
    }
}

/// What becomes of a run whose stage failed or whose node was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryDecision {
    Fail,
    RetryIn(Duration),
}

/// The decision for an exit, with or without a policy.
/// Only exit codes can be transient: a signal is never retried by this rule.
pub fn after_exit(policy: Option<&RetryPolicy>, attempt: i64, exit_code: Option<i32>) -> RetryDecision {
    policy.and_then(|p| p.after_exit(attempt, exit_code)).map_or(RetryDecision::Fail, RetryDecision::RetryIn)
}

/// The decision for a lost node, with or without a policy.
pub fn after_node_lost(policy: Option<&RetryPolicy>, attempt: i64) -> RetryDecision {
    policy.and_then(|p| p.after_node_lost(attempt)).map_or(RetryDecision::Fail, RetryDecision::RetryIn)
}

/// The decision for a time limit reached, with or without a policy.
pub fn after_time_limit(policy: Option<&RetryPolicy>, attempt: i64) -> RetryDecision {
    policy.and_then(|p| p.after_time_limit(attempt)).map_or(RetryDecision::Fail, RetryDecision::RetryIn)
}

/// The decision for a stall, with or without a policy.
pub fn after_stall(policy: Option<&RetryPolicy>, attempt: i64) -> RetryDecision {
    policy.and_then(|p| p.after_stall(attempt)).map_or(RetryDecision::Fail, RetryDecision::RetryIn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_attempts: u32, codes: &[i32]) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            backoff: Some(Dur(Duration::from_secs(5))),
            backoff_max: Some(Dur(Duration::from_secs(30))),
            retry_on_exit_codes: codes.to_vec(),
            on_node_lost: true,
            retry_on_stall: false,
            retry_on_time_limit: false,
            resume: true,
        }
    }

    #[test]
    fn stalls_are_retried_only_when_the_policy_names_them() {
        let p = policy(2, &[]);
        assert_eq!(after_stall(Some(&p), 1), RetryDecision::Fail);
        let yes = RetryPolicy { retry_on_stall: true, ..p };
        assert_eq!(after_stall(Some(&yes), 1), RetryDecision::RetryIn(Duration::from_secs(5)));
        assert_eq!(after_stall(Some(&yes), 2), RetryDecision::Fail, "second of two");
        assert_eq!(after_stall(None, 1), RetryDecision::Fail);
    }

    #[test]
    fn only_listed_codes_are_retried_while_attempts_are_left() {
        let p = policy(3, &[75]);
        assert_eq!(after_exit(Some(&p), 1, Some(75)), RetryDecision::RetryIn(Duration::from_secs(5)));
        assert_eq!(after_exit(Some(&p), 2, Some(75)), RetryDecision::RetryIn(Duration::from_secs(10)));
        assert_eq!(after_exit(Some(&p), 3, Some(75)), RetryDecision::Fail, "third of three");
        assert_eq!(after_exit(Some(&p), 1, Some(1)), RetryDecision::Fail, "not transient");
        assert_eq!(after_exit(Some(&p), 1, None), RetryDecision::Fail, "signals aren't codes");
        assert_eq!(after_exit(Some(&p), 1, None), RetryDecision::Fail, "vanished stage");
        assert_eq!(after_exit(None, 1, Some(75)), RetryDecision::Fail, "no policy");
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let p = policy(10, &[]);
        let waits: Vec<u64> = (1..=5).map(|a| p.backoff_after(a).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 30, 30]);
        assert_eq!(p.backoff_after(i64::MAX), Duration::from_secs(30), "no overflow");
        let defaults = RetryPolicy { backoff: None, backoff_max: None, ..p };
        assert_eq!(defaults.backoff_after(1), DEFAULT_BACKOFF);
        assert_eq!(defaults.backoff_after(50), DEFAULT_BACKOFF_MAX);
    }

    #[test]
    fn node_loss_requeues_only_when_the_policy_says_so() {
        let p = policy(2, &[]);
        assert_eq!(after_node_lost(Some(&p), 1), RetryDecision::RetryIn(Duration::from_secs(5)));
        assert_eq!(after_node_lost(Some(&p), 2), RetryDecision::Fail);
        let no = RetryPolicy { on_node_lost: false, ..p };
        assert_eq!(after_node_lost(Some(&no), 1), RetryDecision::Fail);
        assert_eq!(after_node_lost(None, 1), RetryDecision::Fail);
    }

    #[test]
    fn bad_policies_name_their_field() {
        assert_eq!(policy(0, &[]).validate().unwrap_err().0, "retry.max_attempts");
        assert_eq!(policy(2, &[0]).validate().unwrap_err().0, "retry.retry_on_exit_codes");
        assert_eq!(policy(2, &[256]).validate().unwrap_err().0, "retry.retry_on_exit_codes");
        let inverted = RetryPolicy { backoff: Some(Dur(Duration::from_secs(60))), ..policy(2, &[]) };
        assert_eq!(inverted.validate().unwrap_err().0, "retry.backoff_max");
        assert!(policy(3, &[75, 124]).validate().is_ok());
        assert_eq!(policy(MAX_ATTEMPTS + 1, &[]).validate().unwrap_err().0, "retry.max_attempts");
        let hot = RetryPolicy { backoff: Some(Dur(Duration::ZERO)), ..policy(2, &[]) };
        assert_eq!(hot.validate().unwrap_err().0, "retry.backoff");
        let hot = RetryPolicy {
            backoff: None,
            backoff_max: Some(Dur(Duration::from_millis(10))),
            ..policy(2, &[])
        };
        assert_eq!(hot.validate().unwrap_err().0, "retry.backoff_max");
    }
}
