//! Which members `sweep resume` re-runs: pure, from each member as the resume read it.
//!
//! A member is re-run, as its next attempt (from its last resumable checkpoint), when its sweep's
//! stop ended it (it was pending, cancelled then, or in flight, stopped then), or when it failed
//! with attempts left under its retry policy. A member that completed, one hyperband stopped,
//! one a user stopped on its own, and one that failed with no attempt left keep their result.

use std::collections::BTreeSet;

use uuid::Uuid;

use super::member::{Member, StoppedBy};
use crate::model::{Run, RunState};

/// Why a resume re-runs a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RerunCause {
    /// Its sweep's stop cancelled it before it started, or stopped it.
    SweepStop,
    /// It failed with attempts left under its retry policy.
    RetriesLeft,
}

/// The resume's decision about one member: it re-runs member `k`'s run `run`, at the version
/// it was read at (the re-run lands only while it still is), for `cause`. The store marks it so
/// (`sweep_members.rerun_version`) before anything is queued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rerun {
    pub k: u64,
    pub run: Uuid,
    pub version: i64,
    pub cause: RerunCause,
}

/// The members a resume re-runs, in order of k: of `members` (read as the resume read them),
/// those its sweep's stop ended, and those that failed whose k is in `retries_left` (their
/// run's retry policy allows another attempt: [`retries_left`]).
pub fn reruns(members: &[Member], retries_left: &BTreeSet<u64>) -> Vec<Rerun> {
    members
        .iter()
        .filter_map(|member| {
            let cause = match (member.state, member.stopped_by) {
                (RunState::Stopped, Some(StoppedBy::SweepStop)) => RerunCause::SweepStop,
                (RunState::Failed, _) if retries_left.contains(&member.k) => RerunCause::RetriesLeft,
                _ => return None,
            };
            Some(Rerun { k: member.k, run: member.run, version: member.version, cause })
        })
        .collect()
}

/// Why a resume re-runs a member, as its run's event says it.
pub fn rerun_reason(cause: RerunCause, sweep: &Uuid) -> String {
    let sweep = crate::model::short_id(sweep);
    match cause {
        RerunCause::SweepStop => format!("sweep {sweep} resumed: its stop had ended this member"),
        RerunCause::RetriesLeft => format!("sweep {sweep} resumed: this member failed with attempts left"),
    }
}

/// Whether the run's retry policy allows another attempt (without one, a run has one attempt).
pub fn retries_left(run: &Run) -> bool {
    run.spec.retry.as_ref().is_some_and(|policy| run.charged_attempts() < i64::from(policy.max_attempts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RunParams;
    use crate::model::workflow::Workflow;

    fn run(state: RunState, attempt: i64, retry: &str) -> Run {
        let yaml = format!("name: t\nstages:\n  - {{name: a, argv: [x]}}\n{retry}");
        // The spec as the store reads it back (the model's own type, not the workflow parser's
        // checks, which live a layer above).
        let spec: Workflow = serde_yaml::from_str(&yaml).unwrap();
        let mut run = Run::queued(Uuid::new_v4(), spec, "/tmp/r".into(), 0, RunParams::default());
        run.state = state;
        run.attempt = attempt;
        run.version = 7;
        run
    }

    /// Every kind of ended member, and whether a resume re-runs it.
    #[test]
    fn a_resume_re_runs_what_the_stop_ended_and_failures_with_attempts_left() {
        let three = "retry: {max_attempts: 3}";
        let cases: [(Run, bool, bool, Option<RerunCause>); 10] = [
            (run(RunState::Stopped, 1, ""), true, false, Some(RerunCause::SweepStop)),
            (run(RunState::Stopped, 2, three), true, false, Some(RerunCause::SweepStop)),
            // A user's own stop, and hyperband's, stand.
            (run(RunState::Stopped, 1, ""), false, false, None),
            (run(RunState::Stopped, 1, ""), true, true, None),
            (run(RunState::Stopped, 1, three), false, true, None),
            (run(RunState::Failed, 1, three), false, false, Some(RerunCause::RetriesLeft)),
            (run(RunState::Failed, 3, three), false, false, None),
            (run(RunState::Failed, 1, ""), false, false, None),
            (run(RunState::Completed, 1, three), true, false, None),
            // Still open (a member a stop could not reach yet): it is no re-run.
            (run(RunState::Pending, 1, three), true, false, None),
        ];
        for (run, stopped_by_sweep, early_terminated, expected) in &cases {
            // Hyperband's mark stands over the sweep's stop (the store reads it so).
            let stopped_by = match (early_terminated, stopped_by_sweep) {
                (true, _) => Some(StoppedBy::Hyperband),
                (false, true) => Some(StoppedBy::SweepStop),
                (false, false) => None,
            };
            let member = Member {
                sweep: Uuid::nil(),
                k: 4,
                run: run.id,
                version: run.version,
                state: run.state,
                attempt: run.attempt,
                reason: None,
                stopped_by,
                started_at: None,
                ended_at: None,
                suggestion: None,
                rerun_marked: false,
                tally: None,
            };
            let retrying: BTreeSet<u64> = retries_left(run).then_some(4).into_iter().collect();
            let chosen = reruns(&[member], &retrying);
            assert_eq!(
                chosen.first().map(|r| r.cause),
                *expected,
                "{} attempt {} {stopped_by_sweep} {early_terminated}",
                run.state,
                run.attempt
            );
            if let Some(rerun) = chosen.first() {
                assert_eq!((rerun.k, rerun.run, rerun.version), (4, run.id, 7));
            }
        }
    }
}
