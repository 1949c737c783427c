//! A dependency: a run waits for another run to end in a way it names, or for a sweep to end
//! with a winner, before it may be claimed. The rules that settle one are pure: the store
//! applies them in the transaction of the other run's end (or the sweep's), so a dependency
//! holds across restarts and nodes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::sweep::SweepState;
use super::{RunState, short_id};

/// What a dependency waits for: a run, or a sweep (for its winner).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AwaitedKind {
    Run,
    Sweep,
}

impl AwaitedKind {
    pub const ALL: [AwaitedKind; 2] = [AwaitedKind::Run, AwaitedKind::Sweep];

    pub fn as_str(self) -> &'static str {
        match self {
            AwaitedKind::Run => "run",
            AwaitedKind::Sweep => "sweep",
        }
    }

    /// The values a named dependency of this kind gives: `{after.NAME.KIND}`.
    pub fn values(self) -> &'static [&'static str] {
        match self {
            AwaitedKind::Run => &AFTER_VALUES,
            AwaitedKind::Sweep => &SWEEP_VALUES,
        }
    }
}

impl FromStr for AwaitedKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AwaitedKind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| {
            format!("'{}' is not what a dependency waits for (run, sweep)", crate::text::one_line(s))
        })
    }
}

/// How the run waited for must end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum When {
    /// It completed (`--after`).
    #[default]
    Ok,
    /// It ended, however (`--after-any`).
    Any,
    /// It failed (`--after-failed`: a cleanup or an alert).
    Failed,
}

impl When {
    pub const ALL: [When; 3] = [When::Ok, When::Any, When::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            When::Ok => "ok",
            When::Any => "any",
            When::Failed => "failed",
        }
    }
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for When {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        When::ALL.into_iter().find(|w| w.as_str() == s).ok_or_else(|| {
            format!("'{}' is not a dependency condition (ok, any, failed)", crate::text::one_line(s))
        })
    }
}

/// Where one dependency stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Settled {
    /// The run waited for has not ended.
    Waiting,
    /// It ended as the condition asks.
    Met,
    /// It ended otherwise: the waiting run can never start.
    Unmet,
}

impl Settled {
    pub fn as_str(self) -> &'static str {
        match self {
            Settled::Waiting => "waiting",
            Settled::Met => "met",
            Settled::Unmet => "unmet",
        }
    }
}

/// What the state of the run waited for means for a dependency with condition `when`. Only an
/// end settles it: a retrying or requeued run has not ended, so its dependents keep waiting.
pub fn settle(when: When, state: RunState) -> Settled {
    use RunState as S;
    match (when, state) {
        (_, S::Pending | S::Starting | S::Running | S::Stopping | S::Retrying) => Settled::Waiting,
        (When::Ok, S::Completed) | (When::Any, _) | (When::Failed, S::Failed) => Settled::Met,
        (When::Ok, S::Failed | S::Stopped) | (When::Failed, S::Completed | S::Stopped) => Settled::Unmet,
    }
}

/// Why a waiting run failed, for a dependency `after` that ended in `state` and so never met
/// `when`: "dependency 1a2b3c4d failed".
pub fn unmet_reason(after: &Uuid, when: When, state: RunState) -> String {
    let id = short_id(after);
    match (when, state) {
        (_, RunState::Stopped) => format!("dependency {id} was stopped"),
        (When::Failed, RunState::Completed) => {
            format!("dependency {id} completed (this run waited for it to fail)")
        }
        (_, state) => format!("dependency {id} {state}"),
    }
}

/// What the state of a sweep waited for means for a dependency on it: met once it ended
/// (`done`) with a winner; unmet once it was stopped, or ended with no member that reported its
/// metric. A sweep at its target has not ended: its running members may still win.
pub fn settle_sweep(state: SweepState, has_winner: bool) -> Settled {
    match (state, has_winner) {
        (SweepState::Live | SweepState::Target, _) => Settled::Waiting,
        (SweepState::Done, true) => Settled::Met,
        (SweepState::Stopped, _) | (SweepState::Done, false) => Settled::Unmet,
    }
}

/// Why a waiting run failed, for a sweep that ended in `state` without a winner for it
/// (`why`: the sweep's reason): "sweep 1a2b3c4d was stopped".
pub fn sweep_unmet_reason(sweep: &Uuid, state: SweepState, why: Option<&str>) -> String {
    let id = short_id(sweep);
    match (state, why) {
        (SweepState::Stopped, _) => format!("sweep {id} was stopped"),
        (SweepState::Done, Some(why)) => format!("sweep {id} ended without a winner ({why})"),
        (SweepState::Done, None) => format!("sweep {id} ended without a winner"),
        (state, _) => format!("sweep {id} is {state}"),
    }
}

/// What a dependency waits for, with its state now (None once retention forgot a run).
/// Written as `{"run": ID, "state": …}` or `{"sweep": ID, "state": …}` beside the dependency's
/// other fields.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Awaited {
    Run { run: Uuid, state: Option<RunState> },
    Sweep { sweep: Uuid, state: Option<SweepState> },
}

impl Awaited {
    /// The id of the run or sweep waited for.
    pub fn id(&self) -> Uuid {
        match self {
            Awaited::Run { run, .. } => *run,
            Awaited::Sweep { sweep, .. } => *sweep,
        }
    }

    pub fn kind(&self) -> AwaitedKind {
        match self {
            Awaited::Run { .. } => AwaitedKind::Run,
            Awaited::Sweep { .. } => AwaitedKind::Sweep,
        }
    }
}

/// One dependency of a run, as surfaces show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dependency {
    /// The run or sweep waited for, and its state.
    #[serde(flatten)]
    pub awaited: Awaited,
    pub when: When,
    /// Its name in `{after.NAME.*}` templates, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub settled: Settled,
}

impl Dependency {
    /// "1a2b3c4d (ok, running)", "tune=sweep 1a2b3c4d (live)" — what `run status` prints.
    pub fn describe(&self) -> String {
        let name = self.name.as_deref().map(|n| format!("{n}=")).unwrap_or_default();
        match self.awaited {
            Awaited::Run { run, state } => {
                let state = state.map_or("forgotten", RunState::as_str);
                format!("{name}{} ({}, {state})", short_id(&run), self.when)
            }
            Awaited::Sweep { sweep, state } => {
                let state = state.map_or("forgotten", SweepState::as_str);
                format!("{name}sweep {} ({state})", short_id(&sweep))
            }
        }
    }

    /// "1a2b3c4d ok", "sweep 1a2b3c4d" — what `run list` prints of a waiting run.
    pub fn brief(&self) -> String {
        match self.awaited {
            Awaited::Run { run, .. } => format!("{} {}", short_id(&run), self.when),
            Awaited::Sweep { sweep, .. } => format!("sweep {}", short_id(&sweep)),
        }
    }
}

/// The values a dependency on a run gives its waiting run's templates: `{after.NAME.KIND}`.
pub const AFTER_VALUES: [&str; 3] = ["run_id", "trained_weights", "run_dir"];

/// The values a dependency on a sweep gives: its winner's id, trained weights (as for a run),
/// run directory, and best value of the sweep's metric.
pub const SWEEP_VALUES: [&str; 4] = ["best_run_id", "best_trained_weights", "best_run_dir", "best_value"];

/// The template variable of value `kind` of the dependency named `name`.
pub fn after_var(name: &str, kind: &str) -> String {
    format!("after.{name}.{kind}")
}

/// The environment variable a stage gets for `after.NAME.KIND`: `LACHESIS_AFTER_NAME_KIND`,
/// upper-cased, anything not a letter or digit as `_`.
pub fn after_env(name: &str, kind: &str) -> String {
    let clean: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    format!("LACHESIS_AFTER_{clean}_{}", kind.to_ascii_uppercase())
}

/// Whether a value taken from another run's output may reach a template: a value in a log was
/// written by whatever the run ran (a dataset, a model), so only a plain URI or path passes.
/// The problem, when there is one, reads after "VALUE: ".
pub fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("is empty".into());
    }
    if value.len() > 4096 {
        return Err("is longer than 4096 bytes".into());
    }
    for c in value.chars() {
        let problem = match c {
            '\n' | '\r' => "contains a newline",
            c if c.is_whitespace() => "contains whitespace",
            c if c.is_control() => "contains a control character",
            '\'' | '"' => "contains a quote",
            '`' => "contains a backquote",
            ';' => "contains ';'",
            '|' => "contains '|'",
            '$' => "contains '$'",
            '&' | '<' | '>' | '\\' => "contains a shell metacharacter",
            _ => continue,
        };
        return Err(problem.into());
    }
    Ok(())
}

/// A name a dependency may have: what a stage or port name may be, so it reads in a template.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{}' is not a dependency name (letters, digits, '-' or '_', at most 64)",
            crate::text::one_line(name)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunState as S;

    /// The whole rule, written out: condition × state of the run waited for.
    const TABLE: [(When, RunState, Settled); 24] = [
        (When::Ok, S::Pending, Settled::Waiting),
        (When::Ok, S::Starting, Settled::Waiting),
        (When::Ok, S::Running, Settled::Waiting),
        (When::Ok, S::Stopping, Settled::Waiting),
        (When::Ok, S::Retrying, Settled::Waiting),
        (When::Ok, S::Stopped, Settled::Unmet),
        (When::Ok, S::Completed, Settled::Met),
        (When::Ok, S::Failed, Settled::Unmet),
        (When::Any, S::Pending, Settled::Waiting),
        (When::Any, S::Starting, Settled::Waiting),
        (When::Any, S::Running, Settled::Waiting),
        (When::Any, S::Stopping, Settled::Waiting),
        (When::Any, S::Retrying, Settled::Waiting),
        (When::Any, S::Stopped, Settled::Met),
        (When::Any, S::Completed, Settled::Met),
        (When::Any, S::Failed, Settled::Met),
        (When::Failed, S::Pending, Settled::Waiting),
        (When::Failed, S::Starting, Settled::Waiting),
        (When::Failed, S::Running, Settled::Waiting),
        (When::Failed, S::Stopping, Settled::Waiting),
        (When::Failed, S::Retrying, Settled::Waiting),
        (When::Failed, S::Stopped, Settled::Unmet),
        (When::Failed, S::Completed, Settled::Unmet),
        (When::Failed, S::Failed, Settled::Met),
    ];

    #[test]
    fn every_condition_and_state_settles_as_the_table_says() {
        for when in When::ALL {
            for state in RunState::ALL {
                let want = TABLE.iter().find(|(w, s, _)| *w == when && *s == state).map(|t| t.2);
                assert_eq!(Some(settle(when, state)), want, "{when} × {state}");
            }
        }
        assert_eq!(TABLE.len(), When::ALL.len() * RunState::ALL.len());
    }

    #[test]
    fn only_an_end_settles() {
        for when in When::ALL {
            for state in RunState::ALL {
                assert_eq!(settle(when, state) == Settled::Waiting, !state.is_terminal(), "{when} × {state}");
            }
        }
    }

    #[test]
    fn reasons_name_the_short_id_and_the_end() {
        let id = Uuid::parse_str("1a2b3c4d-0000-4000-8000-000000000000").unwrap();
        assert_eq!(unmet_reason(&id, When::Ok, S::Failed), "dependency 1a2b3c4d failed");
        assert_eq!(unmet_reason(&id, When::Ok, S::Stopped), "dependency 1a2b3c4d was stopped");
        assert_eq!(
            unmet_reason(&id, When::Failed, S::Completed),
            "dependency 1a2b3c4d completed (this run waited for it to fail)"
        );
    }

    /// The sweep rule, written out: state × whether it has a winner.
    #[test]
    fn a_sweep_dependency_is_met_only_by_an_end_with_a_winner() {
        use SweepState as W;
        let table = [
            (W::Live, false, Settled::Waiting),
            (W::Live, true, Settled::Waiting),
            (W::Target, false, Settled::Waiting),
            (W::Target, true, Settled::Waiting),
            (W::Stopped, false, Settled::Unmet),
            (W::Stopped, true, Settled::Unmet),
            (W::Done, false, Settled::Unmet),
            (W::Done, true, Settled::Met),
        ];
        for state in SweepState::ALL {
            for winner in [false, true] {
                let want = table.iter().find(|(s, w, _)| *s == state && *w == winner).map(|t| t.2);
                assert_eq!(Some(settle_sweep(state, winner)), want, "{state} × {winner}");
            }
        }
        let id = Uuid::parse_str("1a2b3c4d-0000-4000-8000-000000000000").unwrap();
        assert_eq!(sweep_unmet_reason(&id, W::Stopped, Some("stop requested")), "sweep 1a2b3c4d was stopped");
        assert_eq!(
            sweep_unmet_reason(&id, W::Done, Some("no member reported loss")),
            "sweep 1a2b3c4d ended without a winner (no member reported loss)"
        );
    }

    #[test]
    fn a_dependency_reads_as_json_with_its_run_or_sweep() {
        let run = Uuid::from_u128(1);
        let dep = Dependency {
            awaited: Awaited::Run { run, state: Some(S::Running) },
            when: When::Any,
            name: None,
            settled: Settled::Waiting,
        };
        let json = serde_json::to_value(&dep).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"run": run, "state": "running", "when": "any", "settled": "waiting"})
        );
        assert_eq!(serde_json::from_value::<Dependency>(json).unwrap(), dep);
        let sweep = Dependency {
            awaited: Awaited::Sweep { sweep: run, state: Some(SweepState::Live) },
            when: When::Ok,
            name: Some("tune".into()),
            settled: Settled::Waiting,
        };
        let json = serde_json::to_value(&sweep).unwrap();
        assert_eq!(json["sweep"], serde_json::json!(run));
        assert_eq!(json["state"], "live");
        assert_eq!(serde_json::from_value::<Dependency>(json).unwrap(), sweep);
        assert_eq!(sweep.describe(), "tune=sweep 00000000 (live)");
        assert_eq!(sweep.brief(), "sweep 00000000");
        for kind in AwaitedKind::ALL {
            assert_eq!(kind.as_str().parse::<AwaitedKind>(), Ok(kind));
        }
    }

    #[test]
    fn values_from_logs_are_plain_uris_or_paths() {
        assert!(check_value("tinker://abc/sampler_weights/final").is_ok());
        assert!(check_value("/home/u/.lachesis/runs/x").is_ok());
        for (value, problem) in [
            ("tinker://a\nrm -rf /", "contains a newline"),
            ("tinker://a;rm", "contains ';'"),
            ("a b", "contains whitespace"),
            ("a|b", "contains '|'"),
            ("$(id)", "contains '$'"),
            ("`id`", "contains a backquote"),
            ("'x'", "contains a quote"),
            ("", "is empty"),
        ] {
            assert_eq!(check_value(value), Err(problem.to_string()), "{value:?}");
        }
    }

    #[test]
    fn env_names_are_upper_case_with_underscores() {
        assert_eq!(after_env("train", "trained_weights"), "LACHESIS_AFTER_TRAIN_TRAINED_WEIGHTS");
        assert_eq!(after_env("eval-1", "run_id"), "LACHESIS_AFTER_EVAL_1_RUN_ID");
    }
}
