//! A sweep as the store keeps it, and what a member run knows of its sweep.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::{Millis, RunState};

/// What a member run carries in its params: its sweep and its place in it (member `k`, from
/// 0, whose parameters are [`super::SweepSpec::member`]`(k)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberOf {
    pub sweep: Uuid,
    pub k: u64,
}

impl MemberOf {
    /// "member 3 of sweep 1a2b3c4d".
    pub fn describe(&self) -> String {
        format!("member {} of sweep {}", self.k, crate::model::short_id(&self.sweep))
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

/// The start of the reason of a member its sweep's hyperband stopped: `early-terminated by
/// sweep 1a2b3c4d`.
pub fn early_terminated_by(sweep: &Uuid) -> String {
    format!("early-terminated by sweep {}", crate::model::short_id(sweep))
}

/// Where a sweep is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepState {
    /// Its members run as the queue and `max_live` allow.
    Live,
    /// A member reached the metric's target: its pending members were cancelled, the ones
    /// running finish.
    Target,
    /// A user stopped it: its pending members were cancelled, the running ones stopped.
    Stopped,
    /// Every member has ended (its reason stays: a stopped sweep's says so).
    Done,
}

impl SweepState {
    pub const ALL: [SweepState; 4] =
        [SweepState::Live, SweepState::Target, SweepState::Stopped, SweepState::Done];

    pub fn as_str(self) -> &'static str {
        match self {
            SweepState::Live => "live",
            SweepState::Target => "target",
            SweepState::Stopped => "stopped",
            SweepState::Done => "done",
        }
    }

    /// Whether its members may still be claimed.
    pub fn starts_members(self) -> bool {
        self == SweepState::Live
    }

    /// Whether a sweep in this state may move to `to`: a live sweep may reach its target, be
    /// stopped or end; one at its target may be stopped or end; a stopped one may end; done is
    /// final.
    pub fn may_become(self, to: SweepState) -> bool {
        use SweepState::*;
        matches!((self, to), (Live, Target | Stopped | Done) | (Target, Stopped | Done) | (Stopped, Done))
    }
}

impl std::fmt::Display for SweepState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SweepState {
    type Err = String;
    fn from_str(text: &str) -> Result<SweepState, String> {
        SweepState::ALL
            .into_iter()
            .find(|state| state.as_str() == text)
            .ok_or_else(|| format!("unknown sweep state '{text}'"))
    }
}

/// A sweep's row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepRecord {
    pub id: Uuid,
    /// The sweep file as it was given.
    pub file: String,
    /// The same document as JSON.
    pub config: serde_json::Value,
    pub workflow: String,
    /// How many members it has.
    pub members: u64,
    pub max_live: Option<u32>,
    pub state: SweepState,
    pub reason: Option<String>,
    /// Its best member, recorded when it ended (`done`) with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub winner: Option<super::SweepWinner>,
    pub created_at: Millis,
    pub updated_at: Millis,
    /// What a bayes sweep's later members are made with beyond its file (what its submission
    /// asked of every member, where its `program:` runs: the service's `MemberSetup`, as JSON).
    /// None for grid and random sweeps, whose members are all made at submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_setup: Option<serde_json::Value>,
}

impl SweepRecord {
    pub fn short_id(&self) -> String {
        crate::model::short_id(&self.id)
    }

    /// The metric its members are compared by, as its stored file names it (None: the file
    /// names none, or no longer parses).
    pub fn metric_name(&self) -> Option<String> {
        super::spec::SweepSpec::parse(&self.file).ok()?.metric.map(|metric| metric.name)
    }
}

#[cfg(test)]
mod tests {
    use super::SweepState::{self, *};

    /// The whole table: sweeps move forward only, never back to live, and done is final.
    #[test]
    fn sweep_states_move_only_forward() {
        let allowed = [
            (Live, Target),
            (Live, Stopped),
            (Live, Done),
            (Target, Stopped),
            (Target, Done),
            (Stopped, Done),
        ];
        for from in SweepState::ALL {
            for to in SweepState::ALL {
                assert_eq!(from.may_become(to), allowed.contains(&(from, to)), "{from} -> {to}");
            }
        }
        for state in SweepState::ALL {
            assert_eq!(state.as_str().parse::<SweepState>(), Ok(state));
        }
        let member = super::MemberOf { sweep: uuid::Uuid::nil(), k: 3 };
        assert_eq!(super::early_terminated_by(&member.sweep), "early-terminated by sweep 00000000");
        assert_eq!(member.describe(), "member 3 of sweep 00000000");
    }

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
