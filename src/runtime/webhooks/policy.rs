//! How long and how often the outbox's poster tries a delivery, and how much of the outbox is
//! kept: defaults a user may change through the daemon's environment.

use std::time::Duration;

use super::RetryPolicy;

/// The first wait after a failed attempt (it doubles each time, up to `MAX_BACKOFF`).
pub const BACKOFF_VAR: &str = "LACHESIS_WEBHOOK_BACKOFF";
/// How long a delivery is retried before it is marked failed.
pub const RETRY_FOR_VAR: &str = "LACHESIS_WEBHOOK_RETRY_FOR";
/// The most deliveries the outbox keeps (pending ones are never pruned).
pub const OUTBOX_CAP_VAR: &str = "LACHESIS_WEBHOOK_OUTBOX_CAP";

const FIRST_BACKOFF: Duration = Duration::from_secs(2);
/// The longest wait between two attempts, and the most a receiver's `Retry-After` is honoured.
const MAX_BACKOFF: Duration = Duration::from_secs(600);
const RETRY_FOR: Duration = Duration::from_secs(24 * 3600);
/// Delivered rows are forgotten after a week.
const KEEP_DELIVERED: Duration = Duration::from_secs(7 * 24 * 3600);
const OUTBOX_CAP: i64 = 10_000;

#[derive(Debug, thiserror::Error)]
#[error("{var}='{value}': {problem}")]
pub struct PolicyError {
    var: &'static str,
    value: String,
    problem: String,
}

/// The outbox's retry and retention settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxPolicy {
    /// Waits between attempts (`attempts` is unused: the window bounds the retries).
    pub backoff: RetryPolicy,
    /// A delivery not delivered this long after its window opened is marked failed.
    pub retry_for: Duration,
    pub keep_delivered: Duration,
    /// Ended deliveries beyond this many rows in all are pruned, oldest first.
    pub cap: i64,
}

impl Default for OutboxPolicy {
    fn default() -> Self {
        OutboxPolicy {
            backoff: RetryPolicy {
                attempts: u32::MAX,
                first_backoff: FIRST_BACKOFF,
                max_backoff: MAX_BACKOFF,
                factor: 2,
            },
            retry_for: RETRY_FOR,
            keep_delivered: KEEP_DELIVERED,
            cap: OUTBOX_CAP,
        }
    }
}

impl OutboxPolicy {
    /// The defaults, with `LACHESIS_WEBHOOK_BACKOFF`, `LACHESIS_WEBHOOK_RETRY_FOR` (durations:
    /// `500ms`, `24h`) and `LACHESIS_WEBHOOK_OUTBOX_CAP` (a count) where set.
    pub fn from_environ() -> Result<OutboxPolicy, PolicyError> {
        OutboxPolicy::from_lookup(crate::environ::var)
    }

    fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<OutboxPolicy, PolicyError> {
        let mut policy = OutboxPolicy::default();
        let duration = |name: &'static str, value: String| {
            humantime::parse_duration(value.trim())
                .map_err(|e| PolicyError { var: name, value: value.clone(), problem: e.to_string() })
                .and_then(|d| match d.is_zero() {
                    true => Err(PolicyError { var: name, value, problem: "must be more than 0".into() }),
                    false => Ok(d),
                })
        };
        if let Some(value) = var(BACKOFF_VAR) {
            policy.backoff.first_backoff = duration(BACKOFF_VAR, value)?;
            policy.backoff.max_backoff = policy.backoff.max_backoff.max(policy.backoff.first_backoff);
        }
        if let Some(value) = var(RETRY_FOR_VAR) {
            policy.retry_for = duration(RETRY_FOR_VAR, value)?;
        }
        if let Some(value) = var(OUTBOX_CAP_VAR) {
            policy.cap = value.trim().parse::<i64>().ok().filter(|&n| n > 0).ok_or_else(|| PolicyError {
                var: OUTBOX_CAP_VAR,
                value,
                problem: "expected a count above 0".into(),
            })?;
        }
        Ok(policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<OutboxPolicy, PolicyError> {
        let pairs: Vec<(String, String)> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        OutboxPolicy::from_lookup(|name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_and_overrides() {
        let policy = from(&[]).unwrap();
        assert_eq!((policy.retry_for, policy.cap), (Duration::from_secs(86_400), 10_000));
        assert_eq!(policy.backoff.backoff(1), Duration::from_secs(2));
        assert_eq!(policy.backoff.backoff(30), Duration::from_secs(600));
        let policy = from(&[(BACKOFF_VAR, "50ms"), (RETRY_FOR_VAR, "2m"), (OUTBOX_CAP_VAR, "7")]).unwrap();
        assert_eq!(policy.backoff.backoff(2), Duration::from_millis(100));
        assert_eq!((policy.retry_for, policy.cap), (Duration::from_secs(120), 7));
    }

    #[test]
    fn bad_values_are_refused_in_one_line() {
        for (var, value) in [(BACKOFF_VAR, "soon"), (RETRY_FOR_VAR, "0s"), (OUTBOX_CAP_VAR, "-1")] {
            let err = from(&[(var, value)]).unwrap_err().to_string();
            assert!(err.starts_with(&format!("{var}='{value}': ")) && !err.contains('\n'), "{err}");
        }
    }
}
