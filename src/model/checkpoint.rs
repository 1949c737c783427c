//! A run's checkpoints: what its trainer saved, as recorded from the workflow's `checkpoints:`
//! source, one row per checkpoint across every attempt. Pure.

use serde::{Deserialize, Serialize};

use super::Millis;

/// One checkpoint a trainer wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The attempt that was running when it was recorded.
    pub attempt: i64,
    pub step: i64,
    /// Where training can resume from (a `tinker://…/weights/…` state), if the line had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Weights for inference (a `tinker://…/sampler_weights/…`), if the line had them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights: Option<String>,
    /// When it was recorded (ms since the epoch).
    pub at: Millis,
}

/// A checkpoint as read from its source, before it is recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundCheckpoint {
    pub step: i64,
    pub path: Option<String>,
    pub weights: Option<String>,
    /// Names the line it came from, so a line read again adds nothing.
    pub key: String,
}

impl Checkpoint {
    /// The last checkpoint (of those given, oldest first) that training can resume from.
    pub fn last_resumable(checkpoints: &[Checkpoint]) -> Option<&Checkpoint> {
        checkpoints.iter().rev().find(|c| c.path.is_some())
    }

    /// The last weights path written (the run's trained weights, also for a failed run).
    pub fn last_weights(checkpoints: &[Checkpoint]) -> Option<&str> {
        checkpoints.iter().rev().find_map(|c| c.weights.as_deref())
    }
}

/// Where a resuming attempt starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumePoint {
    pub step: i64,
    pub path: String,
}

/// Why a run gets another attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextAttempt {
    /// The retry policy requeued it; `resume` is the policy's `resume:`.
    Retry { resume: bool },
    /// A user asked for it (`run resume`), from a given step or the last checkpoint.
    Resume { from: Option<i64> },
}

/// What the next attempt starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    Resume(ResumePoint),
    /// From step 0, and why.
    Scratch(&'static str),
}

/// Decides what attempt `attempt` starts from, given the run's checkpoints (oldest first);
/// an error for a `--from` step that has no resumable checkpoint.
pub fn next_start(why: NextAttempt, checkpoints: &[Checkpoint]) -> Result<Start, String> {
    let point = |c: &Checkpoint| {
        c.path.as_ref().map(|path| Start::Resume(ResumePoint { step: c.step, path: path.clone() }))
    };
    match why {
        NextAttempt::Retry { resume: false } => Ok(Start::Scratch("the retry policy says resume: false")),
        NextAttempt::Retry { resume: true } | NextAttempt::Resume { from: None } => {
            Ok(Checkpoint::last_resumable(checkpoints)
                .and_then(point)
                .unwrap_or(Start::Scratch("no checkpoint yet")))
        }
        NextAttempt::Resume { from: Some(step) } => {
            checkpoints.iter().rev().filter(|c| c.step == step).find_map(point).ok_or_else(|| {
                let steps: Vec<String> =
                    checkpoints.iter().filter(|c| c.path.is_some()).map(|c| c.step.to_string()).collect();
                match steps.is_empty() {
                    true => format!("no resumable checkpoint at step {step}: the run has none"),
                    false => {
                        format!("no resumable checkpoint at step {step} (there are: {})", steps.join(", "))
                    }
                }
            })
        }
    }
}

impl Start {
    /// The event: `attempt 2 resumes from step 6 (tinker://…)`.
    pub fn describe(&self, attempt: i64) -> String {
        match self {
            Start::Resume(p) => format!("attempt {attempt} resumes from step {} ({})", p.step, p.path),
            Start::Scratch(why) => format!("attempt {attempt} starts from step 0: {why}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(attempt: i64, step: i64, path: Option<&str>, weights: Option<&str>) -> Checkpoint {
        Checkpoint {
            attempt,
            step,
            path: path.map(str::to_string),
            weights: weights.map(str::to_string),
            at: step,
        }
    }

    #[test]
    fn what_the_next_attempt_starts_from() {
        let rows = [
            saved(1, 2, Some("t://w/2"), Some("t://s/2")),
            saved(1, 4, Some("t://w/4"), None),
            saved(1, 6, None, Some("t://s/6")),
        ];
        let from = |step, path: &str| Ok(Start::Resume(ResumePoint { step, path: path.into() }));
        let table: [(NextAttempt, &[Checkpoint], Result<Start, String>); 7] = [
            (NextAttempt::Retry { resume: true }, &rows, from(4, "t://w/4")),
            (NextAttempt::Retry { resume: true }, &[], Ok(Start::Scratch("no checkpoint yet"))),
            (NextAttempt::Retry { resume: true }, &rows[2..], Ok(Start::Scratch("no checkpoint yet"))),
            (
                NextAttempt::Retry { resume: false },
                &rows,
                Ok(Start::Scratch("the retry policy says resume: false")),
            ),
            (NextAttempt::Resume { from: None }, &rows, from(4, "t://w/4")),
            (NextAttempt::Resume { from: Some(2) }, &rows, from(2, "t://w/2")),
            (
                NextAttempt::Resume { from: Some(6) },
                &rows,
                Err("no resumable checkpoint at step 6 (there are: 2, 4)".into()),
            ),
        ];
        for (why, checkpoints, expected) in table {
            assert_eq!(next_start(why, checkpoints), expected, "{why:?} over {checkpoints:?}");
        }
        assert_eq!(Checkpoint::last_weights(&rows), Some("t://s/6"));
        assert_eq!(
            from(6, "tinker://a/weights/000006").unwrap().describe(2),
            "attempt 2 resumes from step 6 (tinker://a/weights/000006)"
        );
        assert_eq!(
            Start::Scratch("no checkpoint yet").describe(2),
            "attempt 2 starts from step 0: no checkpoint yet"
        );
    }
}
