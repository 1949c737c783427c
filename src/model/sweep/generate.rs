//! A sweep's members: member k's parameter values, a pure function of the sweep and k.
//!
//! - `grid` walks the product of the parameters' values as W&B's `grid_search_next_runs`
//!   does: parameters in W&B's order (names sorted at each level), the last varying fastest;
//!   `values` in their written order, `int_uniform` as every integer from `min` to `max`,
//!   `q_uniform` as `numpy.arange(min, max, q)` (`min, min+q, …` below `max`); constants
//!   take no part. Point k is decoded from k directly: nothing is enumerated.
//! - `random` draws each parameter of member k from its own stream keyed by (seed, k, the
//!   parameter's place), with replacement.

use std::collections::BTreeMap;

use serde_json::Value;

use super::format::var_text;
use super::parameter::{Domain, Num, Parameter, Quantum, Target};
use super::random::Rng;
use super::spec::{Method, SweepSpec};

/// One member's value of one parameter, and where it goes.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    pub path: String,
    pub target: Target,
    pub value: Value,
}

/// The configuration drawn for member `index`: its value of each parameter (grid's point k,
/// random's draws, bayes's suggestion). What a member is made with, not the member
/// ([`super::Member`] is the member: its run, its state).
#[derive(Clone, Debug, PartialEq)]
pub struct Configuration {
    /// The member's k: 0-based, in the order members are made.
    pub index: u64,
    /// In the sweep's parameter order.
    pub assignments: Vec<Assignment>,
}

impl Configuration {
    /// The workflow vars this member sets (`--var NAME=TEXT`), floats as [`super::format`]
    /// writes them.
    pub fn vars(&self) -> BTreeMap<String, String> {
        let pairs = self.assignments.iter().filter_map(|assignment| match &assignment.target {
            Target::Var(name) => Some((name.clone(), var_text(&assignment.value))),
            Target::Set(_) => None,
        });
        pairs.collect()
    }

    /// The config values this member sets (`--set KEY=VALUE`), with their JSON types.
    pub fn config(&self) -> BTreeMap<String, Value> {
        let pairs = self.assignments.iter().filter_map(|assignment| match &assignment.target {
            Target::Set(key) => Some((key.clone(), assignment.value.clone())),
            Target::Var(_) => None,
        });
        pairs.collect()
    }

    /// The values by parameter path, for a leaderboard.
    pub fn values(&self) -> BTreeMap<String, Value> {
        self.assignments.iter().map(|a| (a.path.clone(), a.value.clone())).collect()
    }
}

impl SweepSpec {
    /// Member `index`'s configuration, or None past the last member ([`SweepSpec::members`])
    /// and for a bayes sweep (whose members depend on what came before: `super::bayes::suggest`).
    pub fn member(&self, index: u64) -> Option<Configuration> {
        if index >= self.members() {
            return None;
        }
        let values = match self.method {
            Method::Bayes => return None,
            Method::Grid => grid_point(&self.parameters, index)?,
            // A PBT population starts as random members; exploits change them later.
            Method::Random | Method::Pbt => self
                .parameters
                .iter()
                .enumerate()
                .map(|(place, param)| draw(&param.domain, &mut Rng::keyed(self.seed, index, place as u64)))
                .collect(),
        };
        let assignments = self
            .parameters
            .iter()
            .zip(values)
            .map(|(param, value)| Assignment {
                path: param.path.clone(),
                target: param.target.clone(),
                value,
            })
            .collect();
        Some(Configuration { index, assignments })
    }
}

/// The number of points of the grid over `parameters`, or None past u64 (or for a domain a
/// grid cannot walk).
pub fn grid_size(parameters: &[Parameter]) -> Option<u64> {
    parameters.iter().try_fold(1u64, |size, param| size.checked_mul(axis_len(&param.domain)?))
}

/// How many values a grid takes of `domain` (1 for a constant).
fn axis_len(domain: &Domain) -> Option<u64> {
    match domain {
        Domain::Constant(_) => Some(1),
        Domain::Categorical { values, probabilities: None } => Some(values.len() as u64),
        Domain::IntUniform { min, max } => u64::try_from(*max as i128 - *min as i128 + 1).ok(),
        Domain::QUniform { min, max, q } => {
            // numpy's arange length: ceil((stop - start) / step).
            let len = ((max.get() - min.get()) / q.get()).ceil();
            (len >= 1.0 && len < u64::MAX as f64).then_some(len as u64)
        }
        _ => None,
    }
}

/// The grid point `index`: the last parameter varies fastest.
fn grid_point(parameters: &[Parameter], mut index: u64) -> Option<Vec<Value>> {
    let mut values = vec![Value::Null; parameters.len()];
    for (slot, param) in parameters.iter().enumerate().rev() {
        let len = axis_len(&param.domain)?;
        values[slot] = grid_value(&param.domain, index % len);
        index /= len;
    }
    (index == 0).then_some(values)
}

/// Value `at` (below the axis' length) of a grid axis.
fn grid_value(domain: &Domain, at: u64) -> Value {
    match domain {
        Domain::Constant(value) => value.clone(),
        Domain::Categorical { values, .. } => values[at as usize].clone(),
        Domain::IntUniform { min, .. } => Value::from((*min as i128 + at as i128) as i64),
        Domain::QUniform { min: Num::Int(min), max: Num::Int(_), q: Num::Int(q) } => {
            Value::from((*min as i128 + at as i128 * *q as i128) as i64)
        }
        Domain::QUniform { min, q, .. } => {
            // numpy fills a float arange as start + i * ((start + step) - start).
            let start = min.get();
            let delta = (start + q.get()) - start;
            float(start + at as f64 * delta)
        }
        _ => Value::Null,
    }
}

/// One draw of `domain`, as W&B's `HyperParameter.sample` would give (with another generator).
pub(super) fn draw(domain: &Domain, rng: &mut Rng) -> Value {
    match domain {
        Domain::Constant(value) => value.clone(),
        Domain::Categorical { values, probabilities: None } => {
            values[rng.below(values.len() as u128) as usize].clone()
        }
        Domain::Categorical { values, probabilities: Some(weights) } => {
            let u = rng.unit();
            let mut cumulative = 0.0;
            let last = weights.iter().rposition(|w| *w > 0.0).unwrap_or(0);
            let chosen = weights
                .iter()
                .position(|w| {
                    cumulative += w;
                    *w > 0.0 && u < cumulative
                })
                .unwrap_or(last);
            values[chosen].clone()
        }
        Domain::IntUniform { min, max } => {
            let count = (*max as i128 - *min as i128 + 1) as u128;
            Value::from((*min as i128 + rng.below(count) as i128) as i64)
        }
        Domain::Uniform { min, max } => float(rng.uniform(*min, *max)),
        Domain::QUniform { min, max, q } => {
            let quantum = Quantum { q: q.get(), whole: q.is_int() };
            quantized(rng.uniform(min.get(), max.get()), Some(quantum))
        }
        Domain::LogUniform { min, max, q } => quantized(rng.uniform(*min, *max).exp(), *q),
        Domain::LogUniformValues { min, max, q } => {
            let value = rng.uniform(min.ln(), max.ln()).exp().clamp(*min, *max);
            quantized(value, *q)
        }
        Domain::InvLogUniform { min, max } => float((-rng.uniform(*min, *max)).exp()),
        Domain::InvLogUniformValues { min, max } => {
            float((-rng.uniform(-max.ln(), -min.ln())).exp().clamp(*min, *max))
        }
        Domain::Normal { mu, sigma, q } => quantized(mu + sigma * rng.normal(), *q),
        Domain::LogNormal { mu, sigma, q } => quantized((mu + sigma * rng.normal()).exp(), *q),
        Domain::Beta { a, b, q } => quantized(rng.beta(*a, *b), *q),
    }
}

/// `value` rounded to a multiple of `q` as numpy rounds (half to even), an integer when `q`
/// was written as one.
pub(super) fn quantized(value: f64, q: Option<Quantum>) -> Value {
    let Some(Quantum { q, whole }) = q else {
        return float(value);
    };
    let rounded = (value / q).round_ties_even() * q;
    if whole { Value::from(rounded as i64) } else { float(rounded) }
}

pub(super) fn float(value: f64) -> Value {
    serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number)
}
