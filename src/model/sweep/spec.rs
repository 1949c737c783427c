//! A sweep file, in W&B's format with lachesis' keys, parsed and checked: what
//! `lachesis sweep start FILE` reads.
//!
//! W&B's keys: `method` (grid | random | bayes), `metric {name, goal, target}`,
//! `parameters` (see [`super::parameter`]), `early_terminate` (hyperband), `run_cap`,
//! `program` and `command` (see [`super::program`]: without `workflow`, each member runs them
//! as W&B's agent would), `project` and `entity` (the members' `WANDB_PROJECT` and
//! `WANDB_ENTITY`), `name`, `description`.
//!
//! lachesis' keys:
//! - `workflow`: the workflow each member runs (else `program`/`command`, never both);
//! - with `program`: `directory` (absolute; default: the sweep file's own) and `metrics` (where
//!   the program writes its metrics, as a workflow's `metrics:`; default: W&B);
//! - `env`, `priority`, `needs`: as for `run start`, for every member;
//! - `max_live`: the most members live at once (default: no limit but the pools'; for bayes,
//!   [`BAYES_MAX_LIVE`], since a bayes member is suggested when a slot opens);
//! - `seed`: member k of a random sweep draws from (seed, k) alone (default 0);
//! - `grid: first`: a grid with more points than `run_cap` runs its first `run_cap` (W&B's
//!   order); without it such a grid is refused rather than cut in silence (`grid: all`, the
//!   default);
//! - per parameter, `var: NAME` or `set: KEY`: where its value goes (default: the workflow var
//!   named like the parameter).
//!
//! Members: a grid has one member per point; a grid larger than `run_cap`, or than
//! [`MAX_RUN_CAP`] without one, is refused unless it says `grid: first` with a `run_cap` (its
//! first points, in W&B's order, where W&B's agent would stop after `run_cap` runs). A random
//! or bayes sweep needs `run_cap` (W&B's bayes runs until stopped; an RL member costs too much
//! to have no bound). A bayes sweep needs a metric and a parameter to search, and refuses a
//! `values` list holding a mapping (W&B reads a mapping as nested parameters: it cannot place
//! one on its axis). Unlike W&B, a bad `goal` is refused rather
//! than replaced by `minimize`, and `strict` defaults to true as in W&B's schema.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::format::python_float;
use super::hyperband::Hyperband;
use super::parameter::{self, DISTRIBUTIONS, Domain, Num, Parameter, RawParameter, Target};
use super::pbt::{Pbt, RawPbt};
use super::program::Program;
use crate::model::Needs;
use crate::model::workflow::MetricSpec;

/// The workflow a `program:` sweep's members run: one stage, made for each member.
pub const PROGRAM_WORKFLOW: &str = "wandb-program";

/// How many members of a bayes sweep are live at once when the file says no `max_live`
/// (W&B's: as many as agents run; suggestions made at once are imputed, never the same).
pub const BAYES_MAX_LIVE: u32 = 4;

/// The most members a sweep may have.
pub const MAX_RUN_CAP: u64 = 10_000;
/// Bounds on hyperband's settings: its iterations are metric readings.
const MAX_ITER: i64 = 1_000_000_000;
const MAX_S: i64 = 100;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SweepError {
    #[error("{0}")]
    Yaml(String),
    #[error("method: unknown method '{0}' (expected grid, random, bayes or pbt)")]
    UnknownMethod(String),
    #[error("{path}: unknown distribution '{name}' (expected one of: {DISTRIBUTIONS})")]
    UnknownDistribution { path: String, name: String },
    #[error("{path}: min {min} is not below max {max}")]
    MinNotBelowMax { path: String, min: String, max: String },
    #[error("{path}: {value} is not a finite number")]
    NotFinite { path: String, value: String },
    #[error("{path}: missing {what}")]
    Missing { path: String, what: String },
    #[error(
        "{path}: distribution {distribution} cannot be walked by a grid (use values, int_uniform or q_uniform)"
    )]
    NotForGrid { path: String, distribution: &'static str },
    #[error(
        "parameters: the grid has {size} points; a sweep runs at most {MAX_RUN_CAP} (`run_cap: N` with `grid: first` runs its first N)"
    )]
    GridTooLarge { size: String },
    #[error(
        "run_cap: the grid has {size} points and run_cap is {cap}; add `grid: first` to run its first {cap} (W&B's order), or raise run_cap"
    )]
    GridOverRunCap { size: String, cap: u64 },
    #[error("run_cap: {0} is not between 1 and {MAX_RUN_CAP}")]
    RunCap(i64),
    #[error("early_terminate.eta: {0} must be above 1")]
    Eta(String),
    #[error("{path}: {problem}")]
    Invalid { path: String, problem: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Grid,
    Random,
    /// W&B's Bayesian search: each member suggested from those before it (`super::bayes`).
    Bayes,
    /// Population-based training (Ray Tune's): random members whose losers continue from the
    /// winners' checkpoints (`super::pbt`).
    Pbt,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Grid => "grid",
            Method::Random => "random",
            Method::Bayes => "bayes",
            Method::Pbt => "pbt",
        }
    }
}

/// Which of a grid's points run (`grid:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GridPoints {
    /// Every point: a grid larger than `run_cap` is refused.
    #[default]
    All,
    /// The first `run_cap` points, in W&B's order.
    First,
}

/// Which way a metric is better; written (in a sweep file, JSON and to people) as W&B writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Goal {
    #[default]
    Minimize,
    Maximize,
}

impl Goal {
    pub const ALL: [Goal; 2] = [Goal::Minimize, Goal::Maximize];

    pub fn as_str(self) -> &'static str {
        match self {
            Goal::Minimize => "minimize",
            Goal::Maximize => "maximize",
        }
    }
}

impl std::fmt::Display for Goal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    pub name: String,
    pub goal: Goal,
    /// Once a member's reading reaches it (at or below for minimize, at or above for
    /// maximize), no new member starts.
    pub target: Option<f64>,
}

impl Metric {
    /// The best of `values` by the goal, the readings that are not finite left out (as W&B
    /// drops them).
    pub fn best(&self, values: &[f64]) -> Option<f64> {
        let finite = values.iter().copied().filter(|v| v.is_finite());
        match self.goal {
            Goal::Minimize => finite.reduce(f64::min),
            Goal::Maximize => finite.reduce(f64::max),
        }
    }

    /// `value` reaches the target.
    pub fn reaches_target(&self, value: f64) -> bool {
        match (self.target, self.goal) {
            (Some(target), Goal::Minimize) => value <= target,
            (Some(target), Goal::Maximize) => value >= target,
            (None, _) => false,
        }
    }
}

/// A checked sweep file.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepSpec {
    pub method: Method,
    pub metric: Option<Metric>,
    /// In W&B's order: names sorted at each nesting level.
    pub parameters: Vec<Parameter>,
    pub early_terminate: Option<Hyperband>,
    /// As written; see [`SweepSpec::members`] for the count that runs.
    pub run_cap: Option<u64>,
    /// For a grid: whether it may run only its first `run_cap` points.
    pub grid: GridPoints,
    pub workflow: String,
    pub env: Option<String>,
    pub priority: i64,
    pub needs: Needs,
    pub max_live: Option<u32>,
    pub seed: u64,
    pub name: Option<String>,
    pub description: Option<String>,
    /// Set when members run W&B's `program`/`command` (`workflow` is then [`PROGRAM_WORKFLOW`]).
    pub program: Option<Program>,
    /// Where a program runs, as written (absolute); none: the sweep file's own directory.
    pub directory: Option<String>,
    /// Where a program writes its metrics; none: W&B.
    pub metrics: Option<MetricSpec>,
    pub project: Option<String>,
    pub entity: Option<String>,
    /// A pbt sweep's schedule (Ray Tune's keys); None for another method.
    pub pbt: Option<Pbt>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a sweep: a mapping with method, parameters and workflow")]
struct RawSweep {
    method: Option<String>,
    metric: Option<RawMetric>,
    parameters: Option<BTreeMap<String, RawParameter>>,
    early_terminate: Option<RawEarlyTerminate>,
    run_cap: Option<i64>,
    grid: Option<String>,
    workflow: Option<String>,
    env: Option<String>,
    #[serde(default)]
    priority: i64,
    #[serde(default)]
    needs: Needs,
    max_live: Option<u32>,
    #[serde(default)]
    seed: u64,
    name: Option<String>,
    description: Option<String>,
    program: Option<String>,
    command: Option<Vec<serde_json::Value>>,
    directory: Option<String>,
    metrics: Option<MetricSpec>,
    project: Option<String>,
    entity: Option<String>,
    perturbation_interval: Option<i64>,
    quantile_fraction: Option<f64>,
    resample_probability: Option<f64>,
    perturbation_factors: Option<Vec<f64>>,
    burn_in: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetric {
    name: Option<String>,
    goal: Option<String>,
    target: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEarlyTerminate {
    #[serde(rename = "type")]
    kind: Option<String>,
    min_iter: Option<i64>,
    max_iter: Option<i64>,
    s: Option<i64>,
    eta: Option<Num>,
    strict: Option<bool>,
}

impl SweepSpec {
    /// Parse and check a sweep file.
    pub fn parse(text: &str) -> Result<SweepSpec, SweepError> {
        let raw: RawSweep = crate::yaml::from_str(text).map_err(|err| {
            SweepError::Yaml(match (&err.path, err.line) {
                // serde_yaml often starts its message with where the problem is already.
                (Some(path), _)
                    if err.message.split(": ").next().is_some_and(|head| path.starts_with(head)) =>
                {
                    err.message
                }
                (Some(path), _) => format!("{path}: {}", err.message),
                (None, Some(line)) => format!("line {line}: {}", err.message),
                (None, None) => err.message,
            })
        })?;
        SweepSpec::checked(raw)
    }

    fn checked(raw: RawSweep) -> Result<SweepSpec, SweepError> {
        let method = match raw.method.as_deref() {
            Some("grid") => Method::Grid,
            Some("random") => Method::Random,
            Some("bayes") => Method::Bayes,
            Some("pbt") => Method::Pbt,
            Some(other) => return Err(SweepError::UnknownMethod(crate::text::one_line(&short(other)))),
            None => return Err(invalid("method", "missing: grid, random, bayes or pbt")),
        };
        let raw_pbt = RawPbt {
            perturbation_interval: raw.perturbation_interval,
            quantile_fraction: raw.quantile_fraction,
            resample_probability: raw.resample_probability,
            perturbation_factors: raw.perturbation_factors,
            burn_in: raw.burn_in,
        };
        let pbt = match method {
            Method::Pbt => Some(raw_pbt.checked()?),
            _ if raw_pbt.any() => {
                return Err(invalid(
                    "method",
                    "perturbation_interval and the other PBT keys need method: pbt",
                ));
            }
            _ => None,
        };
        let metric = raw.metric.map(metric).transpose()?;
        let parameters =
            parameter::flatten(&raw.parameters.ok_or_else(|| invalid("parameters", "missing"))?)?;
        let early_terminate = raw.early_terminate.map(early_terminate).transpose()?;
        if early_terminate.is_some() && metric.is_none() {
            return Err(invalid("metric", "missing: early_terminate compares members by it"));
        }
        if let Some(cap) = raw.run_cap
            && !(1..=MAX_RUN_CAP as i64).contains(&cap)
        {
            return Err(SweepError::RunCap(cap));
        }
        let (workflow, program) = match (raw.workflow, raw.program.is_some() || raw.command.is_some()) {
            (Some(_), true) => {
                return Err(invalid(
                    "program",
                    "a member runs either `workflow` or W&B's `program`/`command`: drop one",
                ));
            }
            (Some(workflow), false) => (workflow, None),
            (None, true) => {
                let program = Program::parse(raw.program, raw.command)?;
                check_program_parameters(&parameters)?;
                if raw.env.is_some() {
                    return Err(invalid("env", "a program sweep's members run no environment"));
                }
                (PROGRAM_WORKFLOW.to_string(), Some(program))
            }
            (None, false) => {
                return Err(invalid(
                    "workflow",
                    "missing: name the workflow each member runs, or W&B's `program` (and `command`)",
                ));
            }
        };
        if workflow.is_empty() || workflow.chars().any(char::is_control) {
            return Err(invalid("workflow", "must be a name on one line"));
        }
        if program.is_none() {
            for (key, given) in [("directory", raw.directory.is_some()), ("metrics", raw.metrics.is_some())] {
                if given {
                    return Err(invalid(key, "applies to a `program:` sweep (a workflow says its own)"));
                }
            }
        }
        if let Some(directory) = &raw.directory
            && (!std::path::Path::new(directory).is_absolute() || directory.chars().any(char::is_control))
        {
            return Err(invalid("directory", "must be an absolute path on one line"));
        }
        let needs = raw.needs.checked().map_err(|err| invalid("needs", &err.to_string()))?;
        if raw.max_live == Some(0) {
            return Err(invalid("max_live", "must be at least 1"));
        }
        let grid = match raw.grid.as_deref() {
            None => GridPoints::All,
            Some(_) if method != Method::Grid => {
                return Err(invalid("grid", "applies to method grid only"));
            }
            Some("all") => GridPoints::All,
            Some("first") if raw.run_cap.is_none() => {
                return Err(invalid("grid", "first needs run_cap: how many of the grid's points to run"));
            }
            Some("first") => GridPoints::First,
            Some(other) => return Err(invalid("grid", &format!("'{}' is not all or first", short(other)))),
        };
        let spec = SweepSpec {
            method,
            metric,
            parameters,
            early_terminate,
            run_cap: raw.run_cap.map(|cap| cap as u64),
            grid,
            workflow,
            env: raw.env,
            priority: raw.priority,
            needs,
            max_live: match method {
                Method::Bayes => Some(raw.max_live.unwrap_or(BAYES_MAX_LIVE)),
                _ => raw.max_live,
            },
            seed: raw.seed,
            name: raw.name,
            description: raw.description,
            program,
            directory: raw.directory,
            metrics: raw.metrics,
            project: raw.project,
            entity: raw.entity,
            pbt,
        };
        match method {
            Method::Grid => {
                for param in &spec.parameters {
                    if let Some(distribution) = not_for_grid(&param.domain) {
                        return Err(SweepError::NotForGrid {
                            path: format!("parameters.{}", param.path),
                            distribution,
                        });
                    }
                    if let Domain::Categorical { values, .. } = &param.domain
                        && let Some(twice) = repeated(values)
                    {
                        return Err(SweepError::Invalid {
                            path: format!("parameters.{}.values", param.path),
                            problem: format!(
                                "{} is listed twice (a grid point runs once)",
                                short(&twice.to_string())
                            ),
                        });
                    }
                }
                let size = super::generate::grid_size(&spec.parameters);
                let size_text = || size.map_or("over 2^64".to_string(), |size| size.to_string());
                match (spec.run_cap, spec.grid) {
                    (None, _) if size.is_none_or(|size| size > MAX_RUN_CAP) => {
                        return Err(SweepError::GridTooLarge { size: size_text() });
                    }
                    (Some(cap), GridPoints::All) if size.is_none_or(|size| size > cap) => {
                        return Err(SweepError::GridOverRunCap { size: size_text(), cap });
                    }
                    _ => {}
                }
            }
            Method::Random | Method::Bayes | Method::Pbt => {
                if spec.run_cap.is_none() {
                    return Err(SweepError::Invalid {
                        path: "run_cap".into(),
                        problem: format!(
                            "missing: a {} sweep needs it (at most {MAX_RUN_CAP})",
                            method.as_str()
                        ),
                    });
                }
            }
        }
        if method == Method::Bayes {
            check_bayes(&spec)?;
        }
        if method == Method::Pbt {
            super::pbt::check(&spec)?;
        }
        Ok(spec)
    }

    /// The workflow vars members set: each must be one the workflow uses.
    pub fn var_names(&self) -> impl Iterator<Item = &str> {
        self.parameters.iter().filter_map(|param| match &param.target {
            Target::Var(name) => Some(name.as_str()),
            Target::Set(_) => None,
        })
    }

    /// The config keys members set (`set:`).
    pub fn config_keys(&self) -> impl Iterator<Item = &str> {
        self.parameters.iter().filter_map(|param| match &param.target {
            Target::Set(key) => Some(key.as_str()),
            Target::Var(_) => None,
        })
    }

    /// How many members the sweep has: a grid's points (its first `run_cap` with
    /// `grid: first`), or `run_cap` draws.
    pub fn members(&self) -> u64 {
        match self.method {
            Method::Grid => {
                let size = super::generate::grid_size(&self.parameters).unwrap_or(u64::MAX);
                self.run_cap.map_or(size, |cap| cap.min(size))
            }
            Method::Random | Method::Bayes | Method::Pbt => self.run_cap.unwrap_or(0),
        }
    }
}

/// What W&B's bayes needs of a sweep: a metric to fit, a parameter to search, and values it
/// can place on an axis.
fn check_bayes(spec: &SweepSpec) -> Result<(), SweepError> {
    if spec.metric.is_none() {
        return Err(invalid("metric", "missing: a bayes sweep fits a model of it"));
    }
    if !spec.parameters.iter().any(|param| super::bayes::space::searched(&param.domain)) {
        return Err(invalid("parameters", "a bayes sweep needs one that is not a constant (`value:`)"));
    }
    for param in &spec.parameters {
        if let Domain::Categorical { values, .. } = &param.domain
            && let Some(at) = values.iter().position(serde_json::Value::is_object)
        {
            return Err(invalid(
                &format!("parameters.{}.values", param.path),
                &format!(
                    "value {at} is a mapping, which bayes cannot place (W&B reads one as nested parameters): use `parameters:` inside it, or name the choices"
                ),
            ));
        }
    }
    Ok(())
}

/// The W&B name of a domain a grid cannot walk, if `domain` is one.
fn not_for_grid(domain: &Domain) -> Option<&'static str> {
    match domain {
        Domain::Constant(_) | Domain::IntUniform { .. } | Domain::QUniform { .. } => None,
        Domain::Categorical { probabilities: None, .. } => None,
        Domain::Categorical { probabilities: Some(_), .. } => Some("categorical_w_probabilities"),
        Domain::Uniform { .. } => Some("uniform"),
        Domain::LogUniform { .. } => Some("log_uniform"),
        Domain::LogUniformValues { .. } => Some("log_uniform_values"),
        Domain::InvLogUniform { .. } => Some("inv_log_uniform"),
        Domain::InvLogUniformValues { .. } => Some("inv_log_uniform_values"),
        Domain::Normal { .. } => Some("normal"),
        Domain::LogNormal { .. } => Some("log_normal"),
        Domain::Beta { .. } => Some("beta"),
    }
}

/// A value listed twice, as W&B tells values apart (a whole float is its integer: W&B's grid
/// would skip the second silently).
fn repeated(values: &[serde_json::Value]) -> Option<&serde_json::Value> {
    let key = |value: &serde_json::Value| match value.as_f64() {
        Some(x) if value.is_f64() && x.fract() == 0.0 && x.abs() < 9e15 => serde_json::Value::from(x as i64),
        _ => value.clone(),
    };
    let keys: Vec<serde_json::Value> = values.iter().map(key).collect();
    (1..values.len()).find(|&i| keys[..i].contains(&keys[i])).map(|i| &values[i])
}

fn metric(raw: RawMetric) -> Result<Metric, SweepError> {
    let name = raw.name.ok_or_else(|| missing("metric", "name"))?;
    if name.is_empty() || name.len() > 256 || name.chars().any(char::is_control) {
        return Err(invalid("metric.name", "must be 1 to 256 characters on one line"));
    }
    let goal = match raw.goal.as_deref() {
        None => Goal::default(),
        Some(text) => Goal::ALL.into_iter().find(|goal| goal.as_str() == text).ok_or_else(|| {
            invalid("metric.goal", &format!("'{}' is not minimize or maximize", short(text)))
        })?,
    };
    if let Some(target) = raw.target
        && !target.is_finite()
    {
        return Err(SweepError::NotFinite { path: "metric.target".into(), value: python_float(target) });
    }
    Ok(Metric { name, goal, target: raw.target })
}

fn early_terminate(raw: RawEarlyTerminate) -> Result<Hyperband, SweepError> {
    match raw.kind.as_deref() {
        Some("hyperband") => {}
        Some(other) => {
            return Err(invalid("early_terminate.type", &format!("'{}' is not hyperband", short(other))));
        }
        None => return Err(missing("early_terminate", "type (hyperband)")),
    }
    let eta = raw.eta.map_or(3.0, Num::get);
    if !eta.is_finite() || eta <= 1.0 {
        return Err(SweepError::Eta(python_float(eta)));
    }
    let iter = |key: &str, value: i64| -> Result<u64, SweepError> {
        if !(1..=MAX_ITER).contains(&value) {
            return Err(invalid(
                &format!("early_terminate.{key}"),
                &format!("{value} is not between 1 and {MAX_ITER}"),
            ));
        }
        Ok(value as u64)
    };
    let bands = match (raw.min_iter, raw.max_iter, raw.s) {
        (Some(min_iter), None, None) => super::hyperband::Bands::MinIter(iter("min_iter", min_iter)?),
        (None, Some(max_iter), Some(s)) => {
            if !(1..=MAX_S).contains(&s) {
                return Err(invalid("early_terminate.s", &format!("{s} is not between 1 and {MAX_S}")));
            }
            super::hyperband::Bands::MaxIter { max_iter: iter("max_iter", max_iter)?, s: s as u64 }
        }
        (None, Some(_), None) => {
            return Err(missing("early_terminate", "s (max_iter needs s, the number of bands)"));
        }
        _ => return Err(invalid("early_terminate", "give min_iter, or max_iter with s")),
    };
    let hyperband = Hyperband { bands, eta, strict: raw.strict.unwrap_or(true) };
    if hyperband.bands().is_empty() {
        return Err(invalid("early_terminate", "no band is at least 1: raise max_iter or lower eta or s"));
    }
    Ok(hyperband)
}

fn missing(path: &str, what: &str) -> SweepError {
    SweepError::Missing { path: path.to_string(), what: what.to_string() }
}

/// A program's members get their parameters as W&B's agent passes them, by name: nested ones
/// (which the agent passes as a dict's text) and `var:`/`set:` targets have no place there.
fn check_program_parameters(parameters: &[Parameter]) -> Result<(), SweepError> {
    for param in parameters {
        let path = format!("parameters.{}", param.path);
        if param.path.contains('.') {
            return Err(invalid(
                &path,
                "a program sweep passes flat parameters only (`--name=value`): flatten it",
            ));
        }
        if param.target != Target::Var(param.path.clone()) {
            return Err(invalid(
                &path,
                "`var:`/`set:` name a workflow's variables; a program gets `--name=value`",
            ));
        }
    }
    Ok(())
}

fn invalid(path: &str, problem: &str) -> SweepError {
    SweepError::Invalid { path: path.to_string(), problem: problem.to_string() }
}

fn short(text: &str) -> String {
    crate::text::one_line(&text.chars().take(80).collect::<String>())
}
