//! A run: one execution of a workflow, and its state machine — the one table of legal moves.
//! The table is pure; the store applies a move with a conditional write, so this module decides
//! *whether*, never *when*.
//!
//! ```text
//! pending ──claim──▶ starting ──all stages up──▶ running ──complete──▶ completed
//!    │                  │  │                       │  └──fail──▶ failed
//!    │                  │  └──fail──▶ failed       │
//!    │                  └──stop──▶ stopping ◀──stop──┘
//!    └──cancel──▶ stopped            stopping ──all stages gone──▶ stopped
//! ```
//!
//! A pending run whose dependency can no longer be met (see `dependency.rs`):
//! `pending ──dependency unmet──▶ failed`.
//!
//! A deciding stage may finish before the other stages are up (a trainer resumed at its last
//! checkpoint), retries and lost nodes (a workflow's retry policy decides which applies):
//!
//! ```text
//! starting ──complete──▶ completed
//! starting, running ──retry──▶ retrying ──all stages gone──▶ pending (next attempt)
//! starting, running, retrying ──node lost──▶ failed     stopping ──node lost──▶ stopped
//! starting, running, retrying ──requeue──▶ pending (next attempt; its node was lost)
//! retrying ──stop──▶ stopping
//! ```
//!
//! Preemption (a daemon with `--preempt`): a victim gets the normal `stop` (its params name the
//! run it stops for), and once its stages are gone it queues again instead of ending:
//!
//! ```text
//! stopping ──preempted──▶ pending (next attempt, not charged to the retry policy)
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::workflow::Workflow;
use super::{Millis, Stage, UnknownState, now_millis, short_id};

/// A run's place in its life; see `next` for the moves between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    Pending,
    Starting,
    Running,
    Stopping,
    /// A transient failure: the rest of the stages are stopped, then the run queues again.
    Retrying,
    Stopped,
    Completed,
    Failed,
}

impl RunState {
    pub const ALL: [RunState; 8] = [
        RunState::Pending,
        RunState::Starting,
        RunState::Running,
        RunState::Stopping,
        RunState::Retrying,
        RunState::Stopped,
        RunState::Completed,
        RunState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::Starting => "starting",
            RunState::Running => "running",
            RunState::Stopping => "stopping",
            RunState::Retrying => "retrying",
            RunState::Stopped => "stopped",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, RunState::Stopped | RunState::Completed | RunState::Failed)
    }

    /// Claimed and not ended: a daemon holds it (the store's `in_flight_states!` lists these).
    pub fn is_in_flight(self) -> bool {
        !self.is_terminal() && self != RunState::Pending
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState::new("run", s, RunState::ALL.iter().map(|s| s.as_str())))
    }
}

/// Which runs a listing returns: newest first, or pending runs in queue order when asking for
/// `pending`; at most `limit` of them.
#[derive(Clone, Debug, Default)]
pub struct RunQuery {
    pub state: Option<RunState>,
    pub limit: Option<i64>,
}

/// Which runs one page of the runs table shows: newest first, filtered in the query, `limit`
/// of them after the first `offset`.
#[derive(Clone, Debug, Default)]
pub struct RunPage<'a> {
    pub state: Option<RunState>,
    pub workflow: Option<&'a str>,
    pub offset: i64,
    pub limit: i64,
}

/// One execution of a workflow.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub id: Uuid,
    pub workflow: String,
    pub env_name: Option<String>,
    pub state: RunState,
    /// Bumped by every write; the optimistic-concurrency token of the conditional updates.
    pub version: i64,
    pub priority: i64,
    pub attempt: i64,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    /// Why the run is in its state, in words (failure cause, who stopped it).
    pub reason: Option<String>,
    pub run_dir: PathBuf,
    /// The workflow as it was when the run was submitted: later edits don't change queued runs.
    pub spec: Workflow,
    /// Template variables given at submission (`--var`), and config values (`--set`).
    pub params: RunParams,
    /// The node that claimed the run (kept after it ends, to say where it ran).
    #[serde(default)]
    pub node: Option<String>,
    /// The fencing token of the claim: the owner's writes must still carry it.
    #[serde(default)]
    pub fence: Option<i64>,
    /// A retry's backoff: the run is not claimed before this time.
    #[serde(default)]
    pub not_before: Option<Millis>,
    /// When the run was held: a held pending run is never claimed until it is released.
    #[serde(default)]
    pub held_at: Option<Millis>,
    /// How many of its dependencies are not met yet: a run is claimed only at 0.
    #[serde(default)]
    pub deps_open: i64,
    /// How many times it was stopped for a run of higher priority and queued again; these
    /// attempts are not charged to its retry policy.
    #[serde(default)]
    pub preemptions: i64,
    /// The work those stops lost, summed (ms): each attempt's time since its last resumable
    /// checkpoint, which the next attempt redoes.
    #[serde(default)]
    pub preempted_work: Millis,
}

impl Run {
    /// A run queued now: the first attempt, owned by no node yet.
    pub fn queued(id: Uuid, spec: Workflow, run_dir: PathBuf, priority: i64, params: RunParams) -> Run {
        let now = now_millis();
        Run {
            id,
            workflow: spec.name.clone(),
            env_name: None,
            state: RunState::Pending,
            version: 0,
            priority,
            attempt: 1,
            created_at: now,
            updated_at: now,
            started_at: None,
            ended_at: None,
            reason: None,
            run_dir,
            spec,
            params,
            node: None,
            fence: None,
            not_before: None,
            held_at: None,
            deps_open: 0,
            preemptions: 0,
            preempted_work: 0,
        }
    }

    /// Its stages as they start: not started, each logging under the run directory.
    pub fn pending_stages(&self) -> Vec<Stage> {
        let stages = self.spec.stages.iter().enumerate();
        stages
            .map(|(idx, s)| Stage::pending(self.id, idx, &s.name, self.run_dir.join(s.log_file())))
            .collect()
    }

    pub fn short_id(&self) -> String {
        short_id(&self.id)
    }

    /// The attempts its retry policy counts: a preemption's requeue charges none.
    pub fn charged_attempts(&self) -> i64 {
        (self.attempt - self.preemptions).max(1)
    }

    /// The run that preempted it, while it stops for that run (a `stopping` run only).
    pub fn preempted_by(&self) -> Option<Uuid> {
        self.params.preempted_by.filter(|_| self.state == RunState::Stopping)
    }

    /// The interval of the pbt exploit it stops for, while it stops for one (a `stopping`
    /// run only).
    pub fn exploit_interval(&self) -> Option<i64> {
        self.params.exploit_interval.filter(|_| self.state == RunState::Stopping)
    }

    /// Where it goes once its stages are gone, while it stops.
    pub fn after_stop(&self) -> AfterStop {
        if self.preempted_by().is_some() {
            AfterStop::Preempted
        } else if self.exploit_interval().is_some() {
            AfterStop::Exploited
        } else {
            AfterStop::Stopped
        }
    }

    /// The units of its node's pools its claim assigned it, by pool.
    pub fn units(&self) -> &super::pool::Assignment {
        &self.params.units
    }

    /// The values its stages' templates are expanded with: those resolved at submission and
    /// claim, and its units as `pool.NAME` = "1,2" (derived, never read back).
    pub fn template_values(&self) -> BTreeMap<String, String> {
        let mut values = self.params.resolved.clone();
        super::pool::record(&mut values, &self.params.units);
        values
    }
}

/// Where a stopping run goes once its stages are gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterStop {
    /// `stopped`: a user's stop, a sweep's, a time limit.
    Stopped,
    /// Queued again: it stopped for a run of higher priority.
    Preempted,
    /// Queued again: a pbt exploit continues it from another member's checkpoint.
    Exploited,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunParams {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, serde_json::Value>,
    /// What the run asks of the claiming node's pools: the workflow's `needs:` with the run's
    /// own (`--needs`) over them. The units it got are `units`.
    #[serde(default, skip_serializing_if = "super::Needs::is_empty")]
    pub needs: super::Needs,
    /// The units of the claiming node's pools it holds, by pool (`gpu` → 1, 2), written with
    /// its claim; its stages see them as `{pool.gpu}` and `CUDA_VISIBLE_DEVICES`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub units: super::pool::Assignment,
    /// The run it stops for, written with a preemption's move to `stopping`: a restarted daemon
    /// then queues it again rather than stopping it for good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_by: Option<Uuid>,
    /// When that preemption was decided (its victim told to stop): a stage of it lost without
    /// an exit status counts its work to then plus its grace, not to when a restarted daemon
    /// noticed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_at: Option<super::Millis>,
    /// The interval of its pbt sweep's exploit that stops it, written with the exploit's
    /// decision: once its stages are gone it is queued again to continue from the donor's
    /// checkpoint (`RunTrigger::Exploited`) rather than ending stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exploit_interval: Option<i64>,
    /// Values resolved at claim time (ports picked, paths), so a restarted daemon expands the same.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resolved: BTreeMap<String, String>,
    /// The names of its named dependencies: their values are read when it is claimed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// The sweep it is a member of, and which member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<super::sweep::MemberOf>,
}

/// What can happen to a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunTrigger {
    /// A daemon took a pending run and is about to start its first stage.
    Claim,
    /// A pending run was stopped before it started.
    Cancel,
    /// The last stage came up.
    AllStagesUp,
    /// The completion rule says the run succeeded.
    Complete,
    /// A stage failed to start, exited when it should not have, or vanished.
    Fail,
    /// Someone asked a started run to stop.
    Stop,
    /// Every stage of a stopping (or retrying) run is gone.
    AllStagesGone,
    /// A stage failed in a way the retry policy calls transient, and attempts are left.
    Retry,
    /// The run's node stopped heartbeating; another node gives up on the run.
    NodeLost,
    /// The run's node stopped heartbeating and the retry policy queues the run again.
    Requeue,
    /// A user asked a failed or stopped run to go on, as its next attempt (`run resume`).
    Resume,
    /// A run it waits for ended in a way that can never meet its dependency.
    Unmet,
    /// Every stage of a run stopped for a run of higher priority is gone: it queues again.
    Preempted,
    /// Every stage of a pbt sweep's member stopped by an exploit is gone: it queues again, to
    /// continue from another member's checkpoint.
    Exploited,
}

impl RunTrigger {
    pub const ALL: [RunTrigger; 14] = [
        RunTrigger::Claim,
        RunTrigger::Cancel,
        RunTrigger::AllStagesUp,
        RunTrigger::Complete,
        RunTrigger::Fail,
        RunTrigger::Stop,
        RunTrigger::AllStagesGone,
        RunTrigger::Retry,
        RunTrigger::NodeLost,
        RunTrigger::Requeue,
        RunTrigger::Resume,
        RunTrigger::Unmet,
        RunTrigger::Preempted,
        RunTrigger::Exploited,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunTrigger::Claim => "claim",
            RunTrigger::Cancel => "cancel",
            RunTrigger::AllStagesUp => "all stages up",
            RunTrigger::Complete => "complete",
            RunTrigger::Fail => "fail",
            RunTrigger::Stop => "stop",
            RunTrigger::AllStagesGone => "all stages gone",
            RunTrigger::Retry => "retry",
            RunTrigger::NodeLost => "node lost",
            RunTrigger::Requeue => "requeue",
            RunTrigger::Resume => "resume",
            RunTrigger::Unmet => "dependency unmet",
            RunTrigger::Preempted => "preempted",
            RunTrigger::Exploited => "exploited",
        }
    }
}

impl fmt::Display for RunTrigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a {from} run cannot {trigger}")]
pub struct IllegalTransition {
    pub from: RunState,
    pub trigger: RunTrigger,
}

/// The state `event` moves a run in state `from` to, or why it can't.
pub fn next(from: RunState, trigger: RunTrigger) -> Result<RunState, IllegalTransition> {
    use RunState as S;
    use RunTrigger as E;
    let to = match (from, trigger) {
        (S::Pending, E::Claim) => S::Starting,
        (S::Pending, E::Cancel) => S::Stopped,
        (S::Pending, E::Unmet) => S::Failed,
        (S::Starting, E::AllStagesUp) => S::Running,
        (S::Starting | S::Running, E::Fail) => S::Failed,
        // A deciding stage may finish its work before the others are up (a trainer resumed
        // at its last checkpoint): that completes the run as it would a running one.
        (S::Starting | S::Running, E::Complete) => S::Completed,
        (S::Starting | S::Running | S::Retrying, E::Stop) => S::Stopping,
        (S::Stopping, E::AllStagesGone) => S::Stopped,
        (S::Starting | S::Running, E::Retry) => S::Retrying,
        (S::Retrying, E::AllStagesGone) => S::Pending,
        (S::Starting | S::Running | S::Retrying, E::NodeLost) => S::Failed,
        (S::Stopping, E::NodeLost) => S::Stopped,
        (S::Starting | S::Running | S::Retrying, E::Requeue) => S::Pending,
        (S::Failed | S::Stopped, E::Resume) => S::Pending,
        (S::Stopping, E::Preempted | E::Exploited) => S::Pending,
        _ => return Err(IllegalTransition { from, trigger }),
    };
    Ok(to)
}

/// What a stop request does to a run in `from`, by the table: cancel a pending run, stop a
/// started (or retrying) one. None where neither applies: stopping already, or ended.
pub fn stop_trigger(from: RunState) -> Option<RunTrigger> {
    [RunTrigger::Cancel, RunTrigger::Stop].into_iter().find(|trigger| next(from, *trigger).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunState as S;
    use RunTrigger as E;
    use proptest::prelude::*;

    /// The whole table, written out: every (state, trigger) pair not listed here must be refused.
    const LEGAL: [(RunState, RunTrigger, RunState); 26] = [
        (S::Pending, E::Claim, S::Starting),
        (S::Pending, E::Cancel, S::Stopped),
        (S::Pending, E::Unmet, S::Failed),
        (S::Starting, E::AllStagesUp, S::Running),
        (S::Starting, E::Fail, S::Failed),
        (S::Starting, E::Stop, S::Stopping),
        (S::Starting, E::Complete, S::Completed),
        (S::Running, E::Complete, S::Completed),
        (S::Running, E::Fail, S::Failed),
        (S::Running, E::Stop, S::Stopping),
        (S::Stopping, E::AllStagesGone, S::Stopped),
        (S::Starting, E::Retry, S::Retrying),
        (S::Running, E::Retry, S::Retrying),
        (S::Retrying, E::AllStagesGone, S::Pending),
        (S::Retrying, E::Stop, S::Stopping),
        (S::Starting, E::NodeLost, S::Failed),
        (S::Running, E::NodeLost, S::Failed),
        (S::Retrying, E::NodeLost, S::Failed),
        (S::Stopping, E::NodeLost, S::Stopped),
        (S::Starting, E::Requeue, S::Pending),
        (S::Running, E::Requeue, S::Pending),
        (S::Retrying, E::Requeue, S::Pending),
        (S::Failed, E::Resume, S::Pending),
        (S::Stopped, E::Resume, S::Pending),
        (S::Stopping, E::Preempted, S::Pending),
        (S::Stopping, E::Exploited, S::Pending),
    ];

    #[test]
    fn every_pair_is_either_listed_or_refused() {
        for from in RunState::ALL {
            for trigger in RunTrigger::ALL {
                let expected = LEGAL.iter().find(|(f, e, _)| *f == from && *e == trigger).map(|t| t.2);
                match (next(from, trigger), expected) {
                    (Ok(to), Some(want)) => assert_eq!(to, want, "{from} --{trigger}-->"),
                    (Err(err), None) => assert_eq!(err, IllegalTransition { from, trigger }),
                    (got, want) => panic!("{from} --{trigger}--> gave {got:?}, table says {want:?}"),
                }
            }
        }
    }

    #[test]
    fn a_stop_request_applies_whatever_the_table_allows() {
        for (from, trigger) in [
            (S::Pending, Some(E::Cancel)),
            (S::Starting, Some(E::Stop)),
            (S::Running, Some(E::Stop)),
            (S::Retrying, Some(E::Stop)),
            (S::Stopping, None),
            (S::Stopped, None),
            (S::Completed, None),
            (S::Failed, None),
        ] {
            assert_eq!(stop_trigger(from), trigger, "{from}");
        }
    }

    #[test]
    fn terminal_states_accept_nothing_but_a_resume() {
        for from in RunState::ALL.into_iter().filter(|s| s.is_terminal()) {
            for trigger in RunTrigger::ALL {
                if trigger == E::Resume && from != S::Completed {
                    assert_eq!(
                        next(from, trigger),
                        Ok(S::Pending),
                        "a {from} run resumes as its next attempt"
                    );
                } else {
                    assert!(next(from, trigger).is_err(), "{from} accepted {trigger}");
                }
            }
        }
    }

    #[test]
    fn illegal_transition_reads_after_failed_to() {
        let err = next(S::Completed, E::Stop).unwrap_err();
        assert_eq!(err.to_string(), "a completed run cannot stop");
    }

    fn any_trigger() -> impl Strategy<Value = RunTrigger> {
        prop::sample::select(RunTrigger::ALL.to_vec())
    }

    proptest! {
        /// Random trigger sequences: within an attempt a run only moves forward; it goes back to
        /// `pending` only as a new attempt (retry, requeue, resume, preemption or pbt exploit); a terminal state is left
        /// only by a resume; refused triggers leave the state unchanged.
        #[test]
        fn random_sequences_respect_the_lifecycle(triggers in prop::collection::vec(any_trigger(), 0..40)) {
            let rank = |s: RunState| match s {
                S::Pending => 0,
                S::Starting => 1,
                S::Running => 2,
                S::Retrying => 3,
                S::Stopping => 4,
                S::Stopped | S::Completed | S::Failed => 5,
            };
            let mut state = S::Pending;
            let mut visited = vec![state];
            for trigger in triggers {
                match next(state, trigger) {
                    Ok(to) => {
                        prop_assert!(!state.is_terminal() || trigger == E::Resume);
                        if to == S::Pending {
                            let again = trigger == E::Requeue
                                || trigger == E::Resume
                                || trigger == E::Preempted
                                || trigger == E::Exploited
                                || (state == S::Retrying && trigger == E::AllStagesGone);
                            prop_assert!(again, "{} --{}--> pending is not a new attempt", state, trigger);
                        } else {
                            prop_assert!(rank(to) > rank(state), "{} -> {} went backwards", state, to);
                        }
                        state = to;
                        visited.push(state);
                    }
                    Err(err) => prop_assert_eq!(err.from, state),
                }
            }
            // A terminal state is left only by a resume, as a new attempt.
            let resumes = visited.windows(2).filter(|w| w[0].is_terminal() && w[1] == S::Pending).count();
            prop_assert!(visited.iter().filter(|s| s.is_terminal()).count() <= 1 + resumes);
            // Reaching `running` or `completed` always went through `starting`.
            if visited.contains(&S::Running) { prop_assert!(visited.contains(&S::Starting)); }
            if visited.contains(&S::Completed) { prop_assert!(visited.contains(&S::Starting)); }
            // Only a started run can be retrying.
            if visited.contains(&S::Retrying) { prop_assert!(visited.contains(&S::Starting)); }
        }
    }
}
