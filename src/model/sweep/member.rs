//! A sweep's member, the one member type of the model and the store: member k of a sweep is
//! run `run`, in a state, at an attempt; how it ended, what its sweep's decisions did to it,
//! its values and (where a read asked) its readings at a glance. The decisions about members
//! (`pbt::decide`, `resume::reruns`) take it, with what they need beyond it named apart.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::spec::SweepSpec;
use crate::model::{Millis, RunState};

/// A sweep's member as the store reads it: its run's state, why it ended and its current
/// attempt's times, which of its sweep's decisions stopped it, the values a bayes sweep
/// suggested for it, and (read by `SweepStore::member_tallies` only) its readings of its
/// sweep's metric at a glance.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub sweep: Uuid,
    pub k: u64,
    pub run: Uuid,
    /// Its run's version as read: a decision about the member lands only while it still is.
    pub version: i64,
    pub state: RunState,
    pub attempt: i64,
    pub reason: Option<String>,
    /// Which of its sweep's decisions stopped it, if one did.
    pub stopped_by: Option<StoppedBy>,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    /// Its values by parameter path, for a member a bayes sweep suggested (a grid's or random
    /// sweep's are its file's member k: [`Member::values`]).
    pub suggestion: Option<Value>,
    /// A `sweep resume` marked it to run again and it is not queued yet: it counts as in
    /// flight, though its run still reads ended.
    pub rerun_marked: bool,
    /// Its readings of its sweep's metric, when the read asked for them.
    pub tally: Option<Tally>,
}

/// Which of its sweep's decisions stopped a member (beside its run's own end, which its state
/// and reason say).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoppedBy {
    /// Its sweep's hyperband (`SweepMemberStore::early_terminate`, marked with the stop). It
    /// stands over a later stop of the sweep that met the member still stopping.
    Hyperband,
    /// The sweep's stop (`sweep stop`), which met the member not ended yet (marked with the
    /// sweep's move; a `sweep resume` clears it).
    SweepStop,
}

/// A member's readings of its sweep's metric as its series holds them: how many, the lowest and
/// the highest.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tally {
    pub readings: u64,
    pub low: Option<f64>,
    pub high: Option<f64>,
}

impl Member {
    /// Its sweep's hyperband stopped it (the mark, whatever its run's state now).
    pub fn early_terminated(&self) -> bool {
        self.stopped_by == Some(StoppedBy::Hyperband)
    }

    /// How it ended, or where it is.
    pub fn outcome(&self) -> MemberOutcome {
        MemberOutcome::of(self.state, self.early_terminated())
    }

    /// It has started at least once, so it may have readings (one never started has none).
    pub fn started(&self) -> bool {
        self.started_at.is_some() || self.attempt > 1
    }

    /// Its values by parameter path as it was made: a bayes member's as suggested (kept with
    /// it), else the file's member k (a pbt member's exploits change them later: its
    /// `ExploitRecord`s say how).
    pub fn values(&self, spec: &SweepSpec) -> BTreeMap<String, Value> {
        match &self.suggestion {
            Some(Value::Object(values)) => values.clone().into_iter().collect(),
            _ => spec.member(self.k).map(|m| m.values()).unwrap_or_default(),
        }
    }
}

/// How a member ended, or where it is: what a sweep's tallies count (the morning report's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberOutcome {
    Completed,
    /// Stopped by its sweep's hyperband (the member's `early_terminated`, written with the stop).
    EarlyTerminated,
    Failed,
    /// Stopped otherwise: by a user, by a stop of the sweep, or cancelled before it started
    /// (the sweep reached its target).
    Stopped,
    /// In flight: starting, running, stopping or retrying.
    Running,
    Pending,
}

impl MemberOutcome {
    pub const ALL: [MemberOutcome; 6] = [
        MemberOutcome::Completed,
        MemberOutcome::EarlyTerminated,
        MemberOutcome::Failed,
        MemberOutcome::Stopped,
        MemberOutcome::Running,
        MemberOutcome::Pending,
    ];

    /// The outcome of a member in `state`, which its sweep's hyperband stopped or not.
    pub fn of(state: RunState, early_terminated: bool) -> MemberOutcome {
        match state {
            RunState::Completed => MemberOutcome::Completed,
            RunState::Failed => MemberOutcome::Failed,
            RunState::Stopped if early_terminated => MemberOutcome::EarlyTerminated,
            RunState::Stopped => MemberOutcome::Stopped,
            RunState::Pending => MemberOutcome::Pending,
            RunState::Starting | RunState::Running | RunState::Stopping | RunState::Retrying => {
                MemberOutcome::Running
            }
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MemberOutcome::Completed => "completed",
            MemberOutcome::EarlyTerminated => "early_terminated",
            MemberOutcome::Failed => "failed",
            MemberOutcome::Stopped => "stopped",
            MemberOutcome::Running => "running",
            MemberOutcome::Pending => "pending",
        }
    }

    /// As people read it: `early-terminated`.
    pub fn label(self) -> &'static str {
        match self {
            MemberOutcome::EarlyTerminated => "early-terminated",
            other => other.as_str(),
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every run state of a member, and whether hyperband stopped it: a stop is hyperband's only
    /// when it is the member's state and its mark, whatever the reason's words.
    #[test]
    fn a_member_s_outcome_is_its_state_with_hyperband_s_stops_apart() {
        use super::MemberOutcome::{self, *};
        use crate::model::RunState;
        let cases = [
            (RunState::Completed, false, Completed),
            (RunState::Completed, true, Completed),
            (RunState::Failed, false, Failed),
            (RunState::Stopped, true, EarlyTerminated),
            (RunState::Stopped, false, Stopped),
            (RunState::Pending, false, Pending),
            (RunState::Starting, false, Running),
            (RunState::Running, false, Running),
            (RunState::Stopping, true, Running),
            (RunState::Retrying, false, Running),
        ];
        for (state, marked, want) in cases {
            assert_eq!(MemberOutcome::of(state, marked), want, "{state} {marked}");
        }
        for state in RunState::ALL {
            for marked in [false, true] {
                assert!(MemberOutcome::ALL.contains(&MemberOutcome::of(state, marked)));
            }
        }
        assert_eq!(EarlyTerminated.label(), "early-terminated");
        assert_eq!(EarlyTerminated.as_str(), "early_terminated");
    }
}
