//! A dependency: a run waits for another run to end in a way it names before it may be claimed.
//! The rule that settles one is pure: the store applies it in the transaction of the other
//! run's end, so a dependency holds across restarts and nodes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{RunState, short_id};

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

/// One dependency of a run, as surfaces show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dependency {
    /// The run waited for.
    pub run: Uuid,
    pub when: When,
    /// Its name in `{after.NAME.*}` templates, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The state of the run waited for now (None once retention forgot it).
    pub state: Option<RunState>,
    pub settled: Settled,
}

impl Dependency {
    /// "1a2b3c4d (ok, running)" — what `run list` and `run status` print.
    pub fn describe(&self) -> String {
        let state = self.state.map_or("forgotten", RunState::as_str);
        let name = self.name.as_deref().map(|n| format!("{n}=")).unwrap_or_default();
        format!("{name}{} ({}, {state})", short_id(&self.run), self.when)
    }
}

/// The values a dependency gives its waiting run's templates: `{after.NAME.KIND}`.
pub const AFTER_VALUES: [&str; 3] = ["run_id", "trained_weights", "run_dir"];

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
