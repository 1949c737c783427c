//! A sweep as the store keeps it, and what a member run knows of its sweep.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::Millis;

/// A run's link to its sweep, carried in the run's params: its sweep and its place in it
/// (member `k`, from 0, whose parameters are [`super::SweepSpec::member`]`(k)`). Not a member
/// ([`super::Member`] is): it is what the run knows, written with it at submission, so a run
/// read alone (`run status`, a claim) says whose member it is without a read of its sweep.
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
}
