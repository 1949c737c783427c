//! A run request: what a caller asks of one run. The command line's flags, a `--from` line, a
//! `POST /runs` body, a pipeline step and `rl_start_training`'s arguments are all this one type,
//! so a field one of them takes, all of them take.
//!
//! Absent fields fall back: to another request's (`over`: a `--from` line over the flags), then
//! to the workflow's. The service checks what needs the catalog, the store or the daemon's pools.

use std::collections::BTreeMap;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::Dur;
use crate::model::{Needs, When};

/// One run, as asked for. Unknown fields are refused, so a typo never passes as a default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// Workflow to run (default: the default workflow)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Environment to train (default: the selected one, for a workflow that runs one)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// Workflow variables for this run, e.g. {"steps": 3}; numbers and booleans are taken as
    /// their text
    #[serde(default, deserialize_with = "texts", skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub vars: BTreeMap<String, String>,
    /// Config fields for this run, e.g. {"group_size": 16}, checked against the field types and
    /// locks
    #[serde(default, deserialize_with = "texts", skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub set: BTreeMap<String, String>,
    /// Higher runs first (default 0)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// Fail the run when its step has not moved for this long (e.g. "30m"); overrides the
    /// workflow's `stall_timeout`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub stall_timeout: Option<Dur>,
    /// Queue it held: not claimed until it is released (default false)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<bool>,
    /// Fail the run when an attempt runs this long (e.g. "10h"); overrides the workflow's
    /// `time_limit`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub time_limit: Option<Dur>,
    /// Units of the daemon's pools, over the workflow's `needs`, e.g. {"gpu": 2}
    #[serde(default, skip_serializing_if = "Needs::is_empty")]
    #[schemars(with = "BTreeMap<String, u32>")]
    pub needs: Needs,
    /// May be preempted by a run of higher priority, on a daemon started with `--preempt`
    /// (default: the workflow's `preemptible`, else false)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptible: Option<bool>,
    /// Runs or sweeps to wait for before this one starts (default: none; in a pipeline, the
    /// previous step)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<DependencySchema>>")]
    pub after: Option<Vec<DependencyRequest>>,
}

/// One run to wait for and how it must end, or one sweep to wait for until it has a winner.
#[derive(Clone, Debug, PartialEq)]
pub struct DependencyRequest {
    pub target: DependencyTarget,
    pub when: When,
    /// What `{after.NAME.*}` calls its values in this run's variables; a step's are named after
    /// the step.
    pub name: Option<String>,
}

/// What a dependency waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DependencyTarget {
    /// An existing run, by its id or a unique prefix (`{"run": ID}`).
    Run(String),
    /// Another step of the same pipeline, by its name (`{"step": NAME}`, or the bare name).
    Step(String),
    /// An existing sweep, by its id or a unique prefix (`{"sweep": ID}`): met once it ends
    /// with a winner.
    Sweep(String),
}

impl DependencyRequest {
    /// `--after [NAME=]ID`: a run by its id or prefix, named for `{after.NAME.*}` when given.
    pub fn from_flag(text: &str, when: When) -> DependencyRequest {
        let (name, run) = named(text);
        DependencyRequest { target: DependencyTarget::Run(run), when, name }
    }

    /// `--after-sweep [NAME=]ID`: a sweep by its id or prefix, named for `{after.NAME.best_*}`
    /// when given.
    pub fn sweep_from_flag(text: &str) -> DependencyRequest {
        let (name, sweep) = named(text);
        DependencyRequest { target: DependencyTarget::Sweep(sweep), when: When::Ok, name }
    }
}

/// `[NAME=]ID`: the name, when given, and the id.
fn named(text: &str) -> (Option<String>, String) {
    match text.split_once('=') {
        Some((name, id)) => (Some(name.trim().to_string()), id.trim().to_string()),
        None => (None, text.trim().to_string()),
    }
}

/// A request that cannot be read, with where in it (`after[0].when`) when known.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{problem}", path.as_ref().map(|p| format!("{p}: ")).unwrap_or_default())]
pub struct InvalidRequest {
    pub path: Option<String>,
    pub problem: String,
}

impl InvalidRequest {
    fn new(path: String, problem: String) -> InvalidRequest {
        // An unknown key's path ends in the key, which the problem already quotes.
        let path = match problem.starts_with("unknown field") {
            true => path.rsplit_once('.').map_or_else(String::new, |(parent, _)| parent.to_string()),
            false => path,
        };
        let path = (!["", "."].contains(&path.as_str())).then(|| crate::text::one_line(&path));
        InvalidRequest { path, problem: crate::text::one_line(&problem) }
    }
}

impl RunRequest {
    /// A request from JSON text (a `--from` line).
    pub fn from_json(text: &str) -> Result<RunRequest, InvalidRequest> {
        let mut reader = serde_json::Deserializer::from_str(text);
        let request: RunRequest = serde_path_to_error::deserialize(&mut reader)
            .map_err(|e| InvalidRequest::new(e.path().to_string(), e.into_inner().to_string()))?;
        reader.end().map_err(|e| InvalidRequest::new(String::new(), e.to_string()))?;
        Ok(request)
    }

    /// A request from a parsed value (a `POST /runs` body, a pipeline step, a tool's arguments).
    pub fn from_value(value: serde_json::Value) -> Result<RunRequest, InvalidRequest> {
        serde_path_to_error::deserialize(value)
            .map_err(|e| InvalidRequest::new(e.path().to_string(), e.into_inner().to_string()))
    }

    /// This request's fields over `base`'s: a value given here wins, variables and config fields
    /// are merged (these win), needs overlaid, dependencies added to the base's.
    pub fn over(self, base: &RunRequest) -> RunRequest {
        let mut vars = base.vars.clone();
        vars.extend(self.vars);
        let mut set = base.set.clone();
        set.extend(self.set);
        let after = match (&base.after, self.after) {
            (None, after) => after,
            (Some(base), None) => Some(base.clone()),
            (Some(base), Some(more)) => Some(base.iter().cloned().chain(more).collect()),
        };
        RunRequest {
            workflow: self.workflow.or_else(|| base.workflow.clone()),
            env: self.env.or_else(|| base.env.clone()),
            vars,
            set,
            priority: self.priority.or(base.priority),
            stall_timeout: self.stall_timeout.or(base.stall_timeout),
            hold: self.hold.or(base.hold),
            time_limit: self.time_limit.or(base.time_limit),
            needs: base.needs.overlaid(&self.needs),
            preemptible: self.preemptible.or(base.preemptible),
            after,
        }
    }

    /// The dependencies asked for (none when absent).
    pub fn dependencies(&self) -> &[DependencyRequest] {
        self.after.as_deref().unwrap_or_default()
    }
}

/// Values as text, the way `--set`/`--var` take them: a string as it is, anything else as its
/// JSON (`3`, `true`, `[1, 2]`).
fn texts<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let values = BTreeMap::<String, serde_json::Value>::deserialize(d)?;
    Ok(values
        .into_iter()
        .map(|(k, v)| {
            let text = match v {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            (k, text)
        })
        .collect())
}

/// A dependency as written: `{"run": ID}`, `{"step": NAME}` or `{"sweep": ID}`, with `when`
/// and `name`.
#[derive(Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct DependencySchema {
    /// A run id (or a unique prefix of it)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run: Option<String>,
    /// In a pipeline: the name of another step (a bare string means the same)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    step: Option<String>,
    /// A sweep id (or a unique prefix of it): waits until the sweep ends with a winner, whose
    /// values are {after.NAME.best_run_id}, {after.NAME.best_trained_weights}, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sweep: Option<String>,
    /// "ok" (it completed; the default), "any" (it ended) or "failed" (it failed); a sweep
    /// takes only "ok"
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    when: Option<When>,
    /// A name for its values in this run's variables ({after.NAME.trained_weights})
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

impl<'de> Deserialize<'de> for DependencyRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Written;
        impl<'de> Visitor<'de> for Written {
            type Value = DependencyRequest;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    r#"a step name or {"run": ID} / {"step": NAME} / {"sweep": ID} with "when" and "name""#,
                )
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<DependencyRequest, E> {
                Ok(DependencyRequest {
                    target: DependencyTarget::Step(name.to_string()),
                    when: When::Ok,
                    name: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<DependencyRequest, A::Error> {
                let written = DependencySchema::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let target = match (written.run, written.step, written.sweep) {
                    (Some(run), None, None) => DependencyTarget::Run(run),
                    (None, Some(step), None) => DependencyTarget::Step(step),
                    (None, None, Some(sweep)) => DependencyTarget::Sweep(sweep),
                    (None, None, None) => {
                        return Err(de::Error::custom(
                            "missing `run` (a run id), `step` (a step name) or `sweep` (a sweep id)",
                        ));
                    }
                    _ => return Err(de::Error::custom("give one of `run`, `step` or `sweep`, not several")),
                };
                let when = written.when.unwrap_or_default();
                if matches!(target, DependencyTarget::Sweep(_)) && when != When::Ok {
                    return Err(de::Error::custom(
                        "a sweep is waited for until it ends with a winner: `when` is ok or absent",
                    ));
                }
                Ok(DependencyRequest { target, when, name: written.name })
            }
        }
        d.deserialize_any(Written)
    }
}

impl Serialize for DependencyRequest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (mut run, mut step, mut sweep) = (None, None, None);
        match &self.target {
            DependencyTarget::Run(id) => run = Some(id.clone()),
            DependencyTarget::Step(name) => step = Some(name.clone()),
            DependencyTarget::Sweep(id) => sweep = Some(id.clone()),
        }
        DependencySchema { run, step, sweep, when: Some(self.when), name: self.name.clone() }.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_survives_the_trip_through_json() {
        let request = RunRequest {
            workflow: Some("demo".into()),
            env: Some("gsm8k".into()),
            vars: [("steps".to_string(), "3".to_string())].into(),
            set: [("group_size".to_string(), "16".to_string()), ("name".to_string(), "a \"b\"".to_string())]
                .into(),
            priority: Some(-2),
            stall_timeout: Some(Dur(std::time::Duration::from_millis(1500))),
            hold: Some(true),
            time_limit: Some(Dur(std::time::Duration::from_secs(36_000))),
            needs: Needs::from_pairs([("gpu".to_string(), 2)]).unwrap(),
            preemptible: Some(true),
            after: Some(vec![
                DependencyRequest {
                    target: DependencyTarget::Run("3f2a".into()),
                    when: When::Failed,
                    name: Some("train".into()),
                },
                DependencyRequest {
                    target: DependencyTarget::Step("eval".into()),
                    when: When::Any,
                    name: None,
                },
                DependencyRequest {
                    target: DependencyTarget::Sweep("9c1e".into()),
                    when: When::Ok,
                    name: Some("tune".into()),
                },
            ]),
        };
        let json = serde_json::to_string(&request).unwrap();
        assert_eq!(RunRequest::from_json(&json).unwrap(), request);
        assert_eq!(RunRequest::from_json("{}").unwrap(), RunRequest::default());
        assert_eq!(serde_json::to_string(&RunRequest::default()).unwrap(), "{}");
    }

    #[test]
    fn values_are_taken_as_their_text() {
        let r = RunRequest::from_json(r#"{"vars": {"a": 3, "b": true, "c": "x"}, "set": {"l": [1, 2]}}"#)
            .unwrap();
        assert_eq!(r.vars["a"], "3");
        assert_eq!(r.vars["b"], "true");
        assert_eq!(r.vars["c"], "x");
        assert_eq!(r.set["l"], "[1,2]");
    }

    #[test]
    fn errors_name_the_field_on_one_line() {
        for (text, want) in [
            (r#"{"workflw": "demo"}"#, "unknown field `workflw`, expected one of"),
            (r#"{"priority": "high"}"#, "priority: invalid type"),
            (r#"{"time_limit": "soon"}"#, "time_limit: 'soon' is not a duration"),
            (r#"{"after": [{"run": "a", "when": "later"}]}"#, "after[0]"),
            (r#"{"after": [{"when": "ok"}]}"#, "after[0]: missing `run` (a run id), `step`"),
            (r#"{"after": [{"run": "a", "step": "b"}]}"#, "not several"),
            (r#"{"after": [{"run": "a", "sweep": "b"}]}"#, "after[0]: give one of `run`, `step` or `sweep`"),
            (r#"{"after": [{"sweep": "b", "when": "any"}]}"#, "after[0]: a sweep is waited for until"),
            (r#"{"after": [{"sweep": 3}]}"#, "after[0].sweep: invalid type"),
            (r#"{"after": [{"run": "a", "wen": "ok"}]}"#, "after[0]: unknown field `wen`"),
            (r#"{"needs": {"gpu": -1}}"#, "needs"),
            ("{} {}", "trailing characters"),
            ("[1]", "invalid type"),
        ] {
            let err = RunRequest::from_json(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn a_line_over_the_flags_wins_where_it_speaks() {
        let flags = RunRequest {
            workflow: Some("demo".into()),
            priority: Some(5),
            hold: Some(true),
            vars: [("a".to_string(), "1".to_string()), ("b".to_string(), "2".to_string())].into(),
            after: Some(vec![DependencyRequest::from_flag("t=3f2a", When::Ok)]),
            ..RunRequest::default()
        };
        let line = RunRequest::from_json(r#"{"priority": 1, "vars": {"b": "x"}, "after": [{"run": "9e"}]}"#)
            .unwrap()
            .over(&flags);
        assert_eq!(line.workflow.as_deref(), Some("demo"));
        assert_eq!((line.priority, line.hold), (Some(1), Some(true)));
        assert_eq!(line.vars["a"], "1");
        assert_eq!(line.vars["b"], "x");
        let targets: Vec<_> = line.dependencies().iter().map(|d| d.target.clone()).collect();
        assert_eq!(targets, [DependencyTarget::Run("3f2a".into()), DependencyTarget::Run("9e".into())]);
        assert_eq!(line.dependencies()[0].name.as_deref(), Some("t"));
        let sweep = DependencyRequest::sweep_from_flag("tune=9c1e");
        assert_eq!(
            (sweep.target, sweep.name.as_deref()),
            (DependencyTarget::Sweep("9c1e".into()), Some("tune"))
        );
        assert_eq!(DependencyRequest::sweep_from_flag("9c1e").name, None);
    }

    proptest::proptest! {
        /// No text, JSON or not, panics the parser; what it refuses it refuses in one line.
        #[test]
        fn any_text_is_parsed_or_refused_in_one_line(text in "\\PC{0,200}") {
            if let Err(err) = RunRequest::from_json(&text) {
                proptest::prop_assert!(!err.to_string().contains('\n'));
            }
        }

        /// Any JSON value of any shape is parsed or refused, never a panic.
        #[test]
        fn any_json_value_is_parsed_or_refused(value in json_value()) {
            let shaped = serde_json::json!({ "after": [value.clone()], "vars": { "v": value.clone() } });
            for candidate in [value, shaped] {
                if let Err(err) = RunRequest::from_value(candidate) {
                    proptest::prop_assert!(!err.to_string().contains('\n'));
                }
            }
        }
    }

    /// Arbitrary JSON, with the request's own keys likely, so deep paths get exercised.
    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let key = prop_oneof![
            Just("workflow".to_string()),
            Just("env".to_string()),
            Just("vars".to_string()),
            Just("set".to_string()),
            Just("priority".to_string()),
            Just("stall_timeout".to_string()),
            Just("hold".to_string()),
            Just("time_limit".to_string()),
            Just("needs".to_string()),
            Just("preemptible".to_string()),
            Just("after".to_string()),
            Just("run".to_string()),
            Just("step".to_string()),
            Just("sweep".to_string()),
            Just("when".to_string()),
            Just("name".to_string()),
            "\\PC{0,8}",
        ];
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            "\\PC{0,12}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map(key.clone(), inner, 0..5)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
