//! Why a sweep ended, as listings say it: its target reached, its run_cap done, stopped by its
//! user, or every member ended; nothing while it runs. Read from the sweep's row (its state, its
//! recorded winner and its file), never from the words of its stored reason.

use serde::Serialize;

use crate::model::sweep::{SweepRecord, SweepSpec, SweepState};

/// The reason `stop_sweep` records: the one stored reason a sweep's end is told by, compared
/// whole (a stopped sweep keeps it through its `done`).
pub(super) const STOP_REQUESTED: &str = "stop requested";

/// Why a sweep ended (or is ending: a sweep at its target lets its started members finish).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "because", rename_all = "snake_case")]
pub enum SweepEnd {
    /// A member's reading reached the metric's target; `member` and `value` are the winner's,
    /// once the sweep is done and recorded it.
    TargetReached {
        metric: String,
        target: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        member: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        value: Option<f64>,
    },
    /// Every one of the `members` its `run_cap` allowed has ended.
    RunCapDone { members: u64 },
    /// Its user stopped it.
    StoppedByUser,
    /// Every one of its `members` has ended.
    EveryMemberEnded { members: u64 },
}

impl SweepEnd {
    /// Why `sweep` ended; None while it is live.
    pub fn of(sweep: &SweepRecord) -> Option<SweepEnd> {
        let stopped = sweep.reason.as_deref() == Some(STOP_REQUESTED);
        match sweep.state {
            SweepState::Live => None,
            SweepState::Stopped => Some(SweepEnd::StoppedByUser),
            SweepState::Done if stopped => Some(SweepEnd::StoppedByUser),
            SweepState::Target | SweepState::Done => {
                let spec = SweepSpec::parse(&sweep.file).ok();
                let metric = spec.as_ref().and_then(|spec| spec.metric.as_ref());
                let winner = sweep.winner.as_ref();
                let reached = sweep.state == SweepState::Target
                    || winner.zip(metric).is_some_and(|(winner, metric)| metric.reaches_target(winner.value));
                if let (true, Some(metric), Some(target)) = (reached, metric, metric.and_then(|m| m.target)) {
                    return Some(SweepEnd::TargetReached {
                        metric: metric.name.clone(),
                        target,
                        member: winner.map(|w| w.k),
                        value: winner.map(|w| w.value),
                    });
                }
                Some(match spec.and_then(|spec| spec.run_cap) {
                    Some(_) => SweepEnd::RunCapDone { members: sweep.members },
                    None => SweepEnd::EveryMemberEnded { members: sweep.members },
                })
            }
        }
    }
}

impl std::fmt::Display for SweepEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::model::sweep::python_float;
        match self {
            SweepEnd::TargetReached { metric, target, member: Some(k), value: Some(value) } => write!(
                f,
                "target reached: member {k}'s {metric} {} (target {})",
                python_float(*value),
                python_float(*target)
            ),
            SweepEnd::TargetReached { metric, target, .. } => {
                write!(f, "target reached: {metric} (target {})", python_float(*target))
            }
            SweepEnd::RunCapDone { members } => write!(f, "run_cap done: {members} members ended"),
            SweepEnd::StoppedByUser => f.write_str("stopped by user"),
            SweepEnd::EveryMemberEnded { members } => write!(f, "every member ended ({members})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sweep::SweepWinner;

    fn sweep(file: &str, state: SweepState, reason: Option<&str>, winner: Option<(u64, f64)>) -> SweepRecord {
        SweepRecord {
            id: uuid::Uuid::nil(),
            file: file.into(),
            config: serde_json::Value::Null,
            workflow: "w".into(),
            members: 4,
            max_live: None,
            state,
            reason: reason.map(str::to_string),
            winner: winner.map(|(k, value)| SweepWinner { k, run: uuid::Uuid::nil(), value }),
            member_setup: None,
            created_at: 0,
            updated_at: 0,
        }
    }

    /// A sweep's file, state, stored reason and winner (k, value), and what the listing says.
    type Case = (&'static str, SweepState, Option<&'static str>, Option<(u64, f64)>, Option<&'static str>);

    /// Every state a sweep's row can be in, and what the listing says of it.
    #[test]
    fn a_sweep_s_end_is_read_from_its_state_winner_and_file() {
        let grid =
            "method: grid\nworkflow: w\nmetric: {name: loss}\nparameters:\n  lr: {values: [1, 2, 3, 4]}\n";
        let target = "method: grid\nworkflow: w\nmetric: {name: loss, target: 0.25}\nparameters:\n  lr: {values: [1, 2, 3, 4]}\n";
        let capped = "method: random\nworkflow: w\nrun_cap: 4\nparameters:\n  lr: {distribution: uniform, min: 0.1, max: 1.0}\n";
        let reached = "member 3 reached the target: loss 0.2 (target 0.25)";
        let cases: [Case; 10] = [
            (grid, SweepState::Live, None, None, None),
            (target, SweepState::Live, None, None, None),
            (target, SweepState::Target, Some(reached), None, Some("target reached: loss (target 0.25)")),
            (
                target,
                SweepState::Done,
                Some(reached),
                Some((3, 0.2)),
                Some("target reached: member 3's loss 0.2 (target 0.25)"),
            ),
            (target, SweepState::Done, None, Some((1, 0.5)), Some("every member ended (4)")),
            (grid, SweepState::Stopped, Some(STOP_REQUESTED), None, Some("stopped by user")),
            (grid, SweepState::Done, Some(STOP_REQUESTED), None, Some("stopped by user")),
            (grid, SweepState::Done, None, Some((0, 1.0)), Some("every member ended (4)")),
            (grid, SweepState::Done, Some("no member reported loss"), None, Some("every member ended (4)")),
            (capped, SweepState::Done, Some("it has no metric"), None, Some("run_cap done: 4 members ended")),
        ];
        for (file, state, reason, winner, expected) in cases {
            let row = sweep(file, state, reason, winner);
            let said = SweepEnd::of(&row).map(|end| end.to_string());
            assert_eq!(said.as_deref(), expected, "{state} {reason:?} {winner:?}");
        }
        // A file that no longer parses still ends: by its state alone.
        let unreadable = sweep("method: [", SweepState::Done, None, None);
        assert_eq!(SweepEnd::of(&unreadable), Some(SweepEnd::EveryMemberEnded { members: 4 }));
        let json = serde_json::to_value(SweepEnd::of(&sweep(grid, SweepState::Stopped, None, None))).unwrap();
        assert_eq!(json, serde_json::json!({"because": "stopped_by_user"}));
    }
}
