//! The morning report's sweeps: each sweep active in the window (not done yet, or whose state
//! moved in it) with its members by outcome, its best member so far, and what early
//! termination saved. Two reads however many sweeps and members: the sweeps (an index range,
//! at most [`REPORT_SWEEPS`]), then every member of them with its readings' count, lowest and
//! highest, aggregated in SQL (`SweepStore::member_tallies`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

use super::MemberStatus;
use crate::engine::service::{Result, Service};
use crate::model::sweep::{
    Goal, Member, MemberOutcome, SweepRecord, SweepSpec, SweepState, Tally, python_float, var_text,
};
use crate::model::{Millis, RunState};

/// The most sweeps one report lists; more are counted and said.
pub const REPORT_SWEEPS: i64 = 50;

/// One sweep in the report.
#[derive(Clone, Debug, Serialize)]
pub struct ReportSweep {
    pub id: Uuid,
    pub workflow: String,
    pub state: SweepState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How many members it has.
    pub members: u64,
    /// The metric members are compared by, and its goal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<Goal>,
    /// Its members by outcome: `completed`, `early_terminated`, `failed`, `stopped`, `running`,
    /// `pending` (every key, zeros included).
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Its best member so far by the goal (members without a reading are not ranked), its best
    /// reading `best`; as JSON its k, run, state, best reading (`value`) and parameters.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "best_member")]
    pub best: Option<MemberStatus>,
    pub early_termination: EarlyTermination,
    /// A pbt sweep's exploits so far (its losers continued from its winners' checkpoints).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exploits: Option<u64>,
}

/// The report's best member as its JSON has it: the member's best reading is its `value`.
fn best_member<S: serde::Serializer>(
    best: &Option<MemberStatus>,
    out: S,
) -> std::result::Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Best<'a> {
        k: u64,
        run: Uuid,
        state: RunState,
        value: Option<f64>,
        parameters: &'a BTreeMap<String, serde_json::Value>,
    }
    let best = best.as_ref().map(|m| Best {
        k: m.k,
        run: m.run,
        state: m.state,
        value: m.best,
        parameters: &m.parameters,
    });
    best.serialize(out)
}

/// What early termination cost and saved: the members hyperband stopped, the time they ran,
/// and an estimate of the member time their stop saved.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EarlyTermination {
    /// Members stopped by hyperband.
    pub members: u64,
    /// The time they ran (their current attempts', start to stop), ms.
    pub run_ms: i64,
    /// How many readings a member makes when it runs to its end: the median of the sweep's
    /// completed members' (none while no member completed with readings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_readings: Option<u64>,
    /// The member time not spent, estimated: for each stopped member, the readings it did not
    /// make (`full_readings` less its own) at the pace it made its own (its run time per
    /// reading), summed; ms. None without `full_readings`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saved_ms: Option<i64>,
}

impl ReportSweep {
    /// `3 completed, 2 early-terminated, 1 running`: the outcomes that have members.
    pub fn members_line(&self) -> String {
        let parts: Vec<String> = MemberOutcome::ALL
            .iter()
            .filter_map(|o| {
                self.outcomes.get(o.as_str()).filter(|n| **n > 0).map(|n| format!("{n} {}", o.label()))
            })
            .collect();
        if parts.is_empty() { "none".into() } else { parts.join(", ") }
    }

    /// `member 2: reward 0.93 (lr=0.001, steps=20)`.
    pub fn best_line(&self) -> Option<String> {
        let best = self.best.as_ref()?;
        let parameters: Vec<String> =
            best.parameters.iter().map(|(name, value)| format!("{name}={}", var_text(value))).collect();
        Some(format!(
            "member {}: {} {} ({})",
            best.k,
            self.metric.as_deref().unwrap_or("value"),
            python_float(best.best?),
            parameters.join(", ")
        ))
    }

    /// `2 stopped after 1m 10s; ≈ 3m 20s of member time saved`, or none when hyperband stopped
    /// no member.
    pub fn early_termination_line(&self) -> Option<String> {
        if let Some(exploits) = self.exploits {
            // A pbt sweep stops no member: its losers continue from the winners instead.
            return Some(format!(
                "pbt: {exploits} exploits (losers continued from the winners' checkpoints)"
            ));
        }
        let early = &self.early_termination;
        if early.members == 0 {
            return None;
        }
        let ran = crate::model::progress::span(Duration::from_millis(early.run_ms.max(0) as u64));
        Some(match early.saved_ms {
            Some(saved) => format!(
                "{} stopped after {ran}; ≈ {} of member time saved",
                early.members,
                crate::model::progress::span(Duration::from_millis(saved.max(0) as u64))
            ),
            None => format!(
                "{} stopped after {ran} (no member completed yet to estimate the saving)",
                early.members
            ),
        })
    }
}

/// What early termination saved, from the members of one sweep: see [`EarlyTermination`].
pub fn early_termination(members: &[Member]) -> EarlyTermination {
    let outcome = |m: &Member| m.outcome();
    let readings = |m: &Member| m.tally.map_or(0, |t| t.readings);
    let mut full: Vec<u64> = members
        .iter()
        .filter(|m| outcome(m) == MemberOutcome::Completed && readings(m) > 0)
        .map(readings)
        .collect();
    full.sort_unstable();
    // The lower median: an estimate that errs towards saving less.
    let full_readings = (!full.is_empty()).then(|| full[(full.len() - 1) / 2]);
    let stopped: Vec<&Member> =
        members.iter().filter(|m| outcome(m) == MemberOutcome::EarlyTerminated).collect();
    let ran = |m: &Member| match (m.started_at, m.ended_at) {
        (Some(start), Some(end)) => (end - start).max(0),
        _ => 0,
    };
    let saved_ms = full_readings.map(|full| {
        stopped
            .iter()
            .filter(|m| readings(m) > 0)
            .map(|m| {
                let left = full.saturating_sub(readings(m));
                (ran(m) as f64 / readings(m) as f64 * left as f64).round() as i64
            })
            .sum()
    });
    EarlyTermination {
        members: stopped.len() as u64,
        run_ms: stopped.iter().map(|m| ran(m)).sum(),
        full_readings,
        saved_ms,
    }
}

/// One sweep's row from its record and its members' tallies.
fn report_sweep(sweep: &SweepRecord, members: &[Member]) -> ReportSweep {
    let spec = SweepSpec::parse(&sweep.file).ok();
    let metric = spec.as_ref().and_then(|s| s.metric.as_ref());
    let mut outcomes: BTreeMap<&'static str, u64> =
        MemberOutcome::ALL.iter().map(|o| (o.as_str(), 0)).collect();
    for member in members {
        *outcomes.entry(member.outcome().as_str()).or_default() += 1;
    }
    let best = metric.and_then(|metric| {
        let value_of = |m: &Member| {
            let Tally { low, high, .. } = m.tally?;
            match metric.goal {
                Goal::Minimize => low,
                Goal::Maximize => high,
            }
        };
        let better = |a: f64, b: f64| match metric.goal {
            Goal::Minimize => a < b,
            Goal::Maximize => a > b,
        };
        let mut best: Option<(&Member, f64)> = None;
        // Members come by k: the first of equals stays, as on the leaderboard.
        for member in members {
            let Some(value) = value_of(member).filter(|v| v.is_finite()) else { continue };
            if best.is_none_or(|(_, held)| better(value, held)) {
                best = Some((member, value));
            }
        }
        let (member, value) = best?;
        Some(MemberStatus {
            best: Some(value),
            iterations: member.tally.map_or(0, |t| t.readings) as usize,
            ..MemberStatus::of(member, member.values(spec.as_ref()?))
        })
    });
    ReportSweep {
        id: sweep.id,
        workflow: sweep.workflow.clone(),
        state: sweep.state,
        reason: sweep.reason.clone(),
        members: sweep.members,
        metric: metric.map(|m| m.name.clone()),
        goal: metric.map(|m| m.goal),
        outcomes,
        best,
        early_termination: early_termination(members),
        exploits: None,
    }
}

impl Service {
    /// The sweeps of a report over the window from `since`: at most [`REPORT_SWEEPS`], newest
    /// first, and how many more there are.
    pub(crate) async fn report_sweeps(&self, since: Millis) -> Result<(Vec<ReportSweep>, i64)> {
        let (sweeps, total) = self.store.sweeps_for_report(since, REPORT_SWEEPS).await?;
        if sweeps.is_empty() {
            return Ok((Vec::new(), total));
        }
        let named: Vec<(Uuid, Option<String>)> = sweeps
            .iter()
            .map(|s| (s.id, SweepSpec::parse(&s.file).ok().and_then(|spec| spec.metric).map(|m| m.name)))
            .collect();
        let tallies = self.store.member_tallies(&named).await?;
        let mut rows: Vec<ReportSweep> = sweeps
            .iter()
            .map(|sweep| {
                let from = tallies.partition_point(|t| t.sweep < sweep.id);
                let to = tallies.partition_point(|t| t.sweep <= sweep.id);
                report_sweep(sweep, &tallies[from..to])
            })
            .collect();
        for (row, sweep) in rows.iter_mut().zip(&sweeps) {
            if SweepSpec::parse(&sweep.file).is_ok_and(|spec| spec.method == crate::model::sweep::Method::Pbt)
            {
                row.exploits = Some(self.store.sweep_exploits(sweep.id).await?.len() as u64);
            }
        }
        let more = (total - rows.len() as i64).max(0);
        Ok((rows, more))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(k: u64, state: RunState, reason: Option<&str>, ran_s: i64, readings: u64) -> Member {
        let early_terminated = reason.is_some_and(|r| r.starts_with("early-terminated"));
        Member {
            sweep: Uuid::nil(),
            k,
            run: Uuid::from_u128(k as u128 + 1),
            version: 1,
            state,
            stopped_by: early_terminated.then_some(crate::model::sweep::StoppedBy::Hyperband),
            reason: reason.map(str::to_string),
            attempt: 1,
            started_at: Some(1_000),
            ended_at: Some(1_000 + ran_s * 1000),
            suggestion: None,
            rerun_marked: false,
            tally: Some(Tally {
                readings,
                low: (readings > 0).then_some(1.0 / (k as f64 + 1.0)),
                high: (readings > 0).then_some(k as f64),
            }),
        }
    }

    const STOPPED: &str = "early-terminated by sweep 00000000: best loss 0.9 by iteration 3 is worse than the band-3 threshold 0.4";

    /// Two members stopped at 3 and 6 readings, at 10 s and 5 s a reading, where completed
    /// members make 20 (the lower median of 18, 20, 24): (20 - 3) × 10 s + (20 - 6) × 5 s.
    #[test]
    fn the_saving_is_the_readings_not_made_at_each_stopped_member_s_pace() {
        let members = [
            member(0, RunState::Completed, None, 180, 18),
            member(1, RunState::Completed, None, 200, 20),
            member(2, RunState::Completed, None, 240, 24),
            member(3, RunState::Stopped, Some(STOPPED), 30, 3),
            member(4, RunState::Stopped, Some(STOPPED), 30, 6),
            member(5, RunState::Stopped, Some("stop requested"), 100, 10),
            member(6, RunState::Running, None, 0, 2),
        ];
        let saved = early_termination(&members);
        assert_eq!(
            saved,
            EarlyTermination {
                members: 2,
                run_ms: 60_000,
                full_readings: Some(20),
                saved_ms: Some(17 * 10_000 + 14 * 5_000)
            }
        );
        // No completed member: the count and the time they ran, no estimate.
        let saved = early_termination(&members[3..]);
        assert_eq!((saved.members, saved.run_ms, saved.saved_ms), (2, 60_000, None));
        // A stopped member that ran past the others' length saved nothing, and costs nothing.
        let long =
            [member(0, RunState::Completed, None, 10, 5), member(1, RunState::Stopped, Some(STOPPED), 90, 9)];
        assert_eq!(early_termination(&long).saved_ms, Some(0));
        assert_eq!(early_termination(&[]), EarlyTermination::default());
    }

    #[test]
    fn the_best_member_follows_the_goal_and_the_lines_read_naturally() {
        let file = "method: grid\nworkflow: w\nmetric: {name: loss, goal: minimize}\n\
                    parameters:\n  lr: {values: [0.1, 0.01, 0.001]}\n  steps: {value: 20}\n";
        let mut sweep = SweepRecord {
            id: Uuid::nil(),
            file: file.into(),
            config: serde_json::Value::Null,
            workflow: "w".into(),
            members: 3,
            max_live: None,
            state: SweepState::Live,
            reason: None,
            winner: None,
            created_at: 0,
            updated_at: 0,
            member_setup: None,
        };
        let members = [
            member(0, RunState::Completed, None, 100, 10),
            member(1, RunState::Stopped, Some(STOPPED), 30, 3),
            member(2, RunState::Pending, None, 0, 0),
        ];
        let row = report_sweep(&sweep, &members);
        assert_eq!(row.best.as_ref().map(|b| (b.k, b.best)), Some((1, Some(0.5))), "the lowest loss");
        assert_eq!(row.best_line().unwrap(), "member 1: loss 0.5 (lr=0.01, steps=20)");
        assert_eq!(row.members_line(), "1 completed, 1 early-terminated, 1 pending");
        assert_eq!(row.outcomes.len(), 6, "every outcome is a key");
        assert_eq!(
            row.early_termination_line().unwrap(),
            "1 stopped after 30s; ≈ 1m 10s of member time saved"
        );
        sweep.file = file.replace("minimize", "maximize");
        let row = report_sweep(&sweep, &members);
        assert_eq!(row.best.as_ref().map(|b| (b.k, b.best)), Some((1, Some(1.0))), "the highest");
        // A sweep without a metric ranks nobody; one whose file no longer parses still counts.
        sweep.file = "method: grid\nworkflow: w\nparameters: {lr: {values: [1]}}\n".into();
        assert!(report_sweep(&sweep, &members).best.is_none());
        sweep.file = "not: [a sweep".into();
        let row = report_sweep(&sweep, &members);
        assert!(row.best.is_none() && row.metric.is_none());
        assert_eq!(row.outcomes["completed"], 1);
        assert!(report_sweep(&sweep, &members[2..]).early_termination_line().is_none());
    }
}
