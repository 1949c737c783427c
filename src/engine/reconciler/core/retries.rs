//! Retries and resume: when a retrying run whose stages are gone queues again, what its next
//! attempt starts from (its last resumable checkpoint, or step 0 and why), and how long a stage
//! that could not start for a moment (EAGAIN, EMFILE, ENOMEM) waits before its next try.

use std::time::Duration;

use crate::model::{Checkpoint, Millis, NextAttempt, Run, RunParams, Start, next_start};
use crate::workflow::checkpoints::params_for;

/// A retrying run's requeue: not claimed before `not_before`, with the reason it retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requeue {
    pub not_before: Millis,
    pub reason: String,
}

/// The requeue of `run` (retrying, its stages gone) at `now`: after the policy's backoff for
/// the attempts it charged, keeping the reason its retry was decided with.
pub fn requeue(run: &Run, now: Millis) -> Requeue {
    let wait = run.spec.retry.as_ref().map_or(Duration::ZERO, |p| p.backoff_after(run.charged_attempts()));
    let reason = run.reason.clone().unwrap_or_else(|| "retry".into());
    Requeue { not_before: now.saturating_add(wait.as_millis() as Millis), reason }
}

/// For a run with a `checkpoints:` source: its next attempt's params (with the resume point, or
/// without one) and the event that says what it starts from. `resume` is the retry policy's
/// `resume:` (true for a preemption's requeue and a lost node's). None: it names no checkpoints.
pub fn next_attempt(run: &Run, checkpoints: &[Checkpoint], resume: bool) -> Option<(RunParams, String)> {
    run.spec.checkpoints.as_ref()?;
    let start =
        next_start(NextAttempt::Retry { resume }, checkpoints).unwrap_or(Start::Scratch("no checkpoint"));
    Some((params_for(&run.params, &start), start.describe(run.attempt + 1)))
}

/// Whether the retry policy resumes a retried run (no policy: it does).
pub fn resumes(run: &Run) -> bool {
    run.spec.retry.as_ref().is_none_or(|p| p.resume)
}

/// The retry's part of a reason: "attempt 3 of 3 starts in 1m", counted as the retry policy
/// counts (a preemption's requeue charges none); after preemptions, the run's own attempt
/// number beside it: "attempt 4 (3 of 3 by the retry policy, preemptions not counted) starts
/// in 1m".
pub fn next_attempt_words(run: &Run, wait: Duration) -> String {
    let max = run.spec.retry.as_ref().map_or(1, |p| p.max_attempts);
    let (next, charged) = (run.attempt + 1, run.charged_attempts() + 1);
    let which = match next == charged {
        true => format!("attempt {next} of {max}"),
        false => format!("attempt {next} ({charged} of {max} by the retry policy, preemptions not counted)"),
    };
    format!("{which} starts in {}", crate::workflow::Dur(wait))
}

/// The wait before starting a stage again after `failures` transient failures in a row:
/// 100 ms, doubling, at most 5 s.
pub fn spawn_backoff(failures: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << failures.min(6))).min(Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::Workflow;
    use uuid::Uuid;

    fn run(yaml_tail: &str, attempt: i64, preemptions: i64) -> Run {
        let yaml = format!("name: t\nstages:\n  - {{name: a, argv: [x]}}\n{yaml_tail}");
        let spec = Workflow::parse(std::path::Path::new("t.yaml"), &yaml).unwrap();
        let mut run = Run::queued(Uuid::nil(), spec, "/tmp/r".into(), 0, RunParams::default());
        run.attempt = attempt;
        run.preemptions = preemptions;
        run.reason = Some("stage 'a' exited 75".into());
        run
    }

    fn checkpoint(step: i64, path: Option<&str>, at: Millis) -> Checkpoint {
        Checkpoint { attempt: 1, step, path: path.map(str::to_string), weights: None, at }
    }

    #[test]
    fn a_retry_waits_the_backoff_of_the_attempts_it_charged() {
        let policy = "retry: {max_attempts: 5, backoff: 10s, retry_on_exit_codes: [75]}\n";
        // (attempt, preemptions, now) -> not before: preemptions charge no attempt, so no
        // longer backoff.
        let table = [(1, 0, 1_000, 11_000), (2, 0, 1_000, 21_000), (3, 1, 0, 20_000), (3, 2, 0, 10_000)];
        for (attempt, preemptions, now, want) in table {
            let got = requeue(&run(policy, attempt, preemptions), now);
            assert_eq!(got.not_before, want, "attempt {attempt}, {preemptions} preemptions");
            assert_eq!(got.reason, "stage 'a' exited 75", "the reason its retry was decided with");
        }
        assert_eq!(requeue(&run("", 1, 0), 7).not_before, 7, "no policy: no wait");
    }

    #[test]
    fn a_retry_says_its_attempt_as_the_policy_counts_it_and_a_stage_end_counts_the_same() {
        let policy = "retry: {max_attempts: 2, backoff: 1s, retry_on_exit_codes: [75]}\n";
        // (attempt, preemptions) -> the words; after a preemption the policy's count is said
        // beside the run's own (never "attempt 3 of 2").
        let table = [
            (1, 0, "attempt 2 of 2 starts in 1s"),
            (2, 1, "attempt 3 (2 of 2 by the retry policy, preemptions not counted) starts in 1s"),
        ];
        for (attempt, preemptions, want) in table {
            let mut failed = run(policy, attempt, preemptions);
            assert_eq!(next_attempt_words(&failed, Duration::from_secs(1)), want);
            // A stage's transient exit retries while the charged attempts allow it.
            failed.state = crate::model::RunState::Running;
            let exit = Some(crate::model::Exit::Code(75));
            let (trigger, reason) =
                crate::engine::reconciler::core::stage_end::failure_move(&failed, "exited 75", exit).unwrap();
            assert_eq!(
                trigger,
                crate::model::RunTrigger::Retry,
                "attempt {attempt}, {preemptions} preemptions"
            );
            assert_eq!(reason, format!("exited 75 (transient by the retry policy): {want}"));
        }
        let mut spent = run(policy, 2, 0);
        spent.state = crate::model::RunState::Running;
        let exit = Some(crate::model::Exit::Code(75));
        let moved =
            crate::engine::reconciler::core::stage_end::failure_move(&spent, "exited 75", exit).unwrap();
        assert_eq!(
            moved,
            (crate::model::RunTrigger::Fail, "exited 75".to_string()),
            "its attempts are spent"
        );
    }

    #[test]
    fn the_next_attempt_resumes_from_the_last_resumable_checkpoint() {
        let source = "checkpoints: {log: {stage: a, pattern: 'ckpt (?P<step>\\d+) (?P<path>\\S+)'}}\n";
        let with = run(source, 2, 0);
        let saved =
            [checkpoint(10, Some("s/10"), 5), checkpoint(20, Some("s/20"), 9), checkpoint(25, None, 12)];
        let (params, note) = next_attempt(&with, &saved, true).unwrap();
        assert_eq!(note, "attempt 3 resumes from step 20 (s/20)");
        assert_eq!(params.resolved.get("resume.step").map(String::as_str), Some("20"));
        let (params, note) = next_attempt(&with, &saved, false).unwrap();
        assert_eq!(note, "attempt 3 starts from step 0: the retry policy says resume: false");
        assert!(!params.resolved.contains_key("resume.step"));
        let (_, note) = next_attempt(&with, &[], true).unwrap();
        assert!(note.starts_with("attempt 3 starts from step 0"), "{note}");
        assert_eq!(next_attempt(&run("", 2, 0), &saved, true), None, "no checkpoints source");
    }

    #[test]
    fn a_stage_that_cannot_start_yet_waits_longer_each_time_within_bounds() {
        let waits: Vec<_> = (0..10).map(spawn_backoff).collect();
        assert_eq!(waits[0], Duration::from_millis(100));
        assert_eq!(waits[1], Duration::from_millis(200));
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        assert_eq!(waits[9], Duration::from_secs(5));
        assert_eq!(spawn_backoff(u32::MAX), Duration::from_secs(5));
    }
}
