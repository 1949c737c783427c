//! One parameter of a sweep: its domain, as W&B's `sweeps` package reads it (the explicit
//! `distribution`, or the one W&B infers), checked, and where its value goes in a member run.
//!
//! Inference when `distribution` is absent, as W&B does: `value` → constant; `values` →
//! categorical (weighted with `probabilities`); `min`/`max` written as integers → int_uniform,
//! otherwise uniform. Nested `parameters:` are flattened to dotted paths (`optimizer.lr`).
//!
//! Where the value goes (lachesis keys inside a parameter; W&B has none):
//! - by default, the workflow var of the parameter's path (`--var lr=0.001`);
//! - `var: NAME`: the workflow var `NAME`;
//! - `set: KEY`: the config value `KEY` (as `--set KEY=…`), keeping the value's JSON type.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::format::python_float;
use super::spec::SweepError;

/// A number as written: W&B keeps integers integers (an integer `q` gives integer values).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(untagged, expecting = "min, max and q must be numbers")]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    pub fn get(self) -> f64 {
        match self {
            Num::Int(int) => int as f64,
            Num::Float(float) => float,
        }
    }

    pub fn is_int(self) -> bool {
        matches!(self, Num::Int(_))
    }

    fn shown(self) -> String {
        match self {
            Num::Int(int) => int.to_string(),
            Num::Float(float) => python_float(float),
        }
    }
}

/// A quantum: values are rounded to a multiple of `q`; integers when `q` is written as one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quantum {
    pub q: f64,
    pub whole: bool,
}

/// What a parameter's values are drawn from, by W&B's distribution names.
#[derive(Clone, Debug, PartialEq)]
pub enum Domain {
    Constant(Value),
    Categorical {
        values: Vec<Value>,
        probabilities: Option<Vec<f64>>,
    },
    IntUniform {
        min: i64,
        max: i64,
    },
    Uniform {
        min: f64,
        max: f64,
    },
    QUniform {
        min: Num,
        max: Num,
        q: Num,
    },
    /// `log_uniform`: `exp` of a uniform draw between the exponents `min` and `max`.
    LogUniform {
        min: f64,
        max: f64,
        q: Option<Quantum>,
    },
    /// `log_uniform_values`: log-uniform between the values `min` and `max`.
    LogUniformValues {
        min: f64,
        max: f64,
        q: Option<Quantum>,
    },
    /// `inv_log_uniform`: `exp(-u)`, u uniform between the exponents `min` and `max`.
    InvLogUniform {
        min: f64,
        max: f64,
    },
    /// `inv_log_uniform_values`: its reciprocal is log-uniform; values between `min` and `max`.
    InvLogUniformValues {
        min: f64,
        max: f64,
    },
    Normal {
        mu: f64,
        sigma: f64,
        q: Option<Quantum>,
    },
    LogNormal {
        mu: f64,
        sigma: f64,
        q: Option<Quantum>,
    },
    Beta {
        a: f64,
        b: f64,
        q: Option<Quantum>,
    },
}

/// Where a member's value of a parameter goes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    Var(String),
    Set(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Parameter {
    /// Dotted for nested parameters: `optimizer.lr`.
    pub path: String,
    pub domain: Domain,
    pub target: Target,
}

pub const DISTRIBUTIONS: &str = "constant, categorical, categorical_w_probabilities, int_uniform, uniform, \
q_uniform, log_uniform, log_uniform_values, q_log_uniform, q_log_uniform_values, inv_log_uniform, \
inv_log_uniform_values, normal, q_normal, log_normal, q_log_normal, beta, q_beta";

/// The largest exponent (or |mu| + 9 sigma for log-normals) whose `exp` stays finite and useful.
const MAX_EXPONENT: f64 = 700.0;
/// Bound on normal draws: |mu| + 9 sigma (a draw is at most 8.6 sigma away).
const MAX_NORMAL: f64 = 1e300;
const MAX_NESTING: usize = 8;
const MAX_NAME_LEN: usize = 64;

/// A parameter as written: every key any distribution takes, checked in [`flatten`].
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a parameter: a mapping with value, values, min and max, or distribution"
)]
pub(super) struct RawParameter {
    value: Option<Value>,
    values: Option<Vec<Value>>,
    probabilities: Option<Vec<f64>>,
    distribution: Option<String>,
    min: Option<Num>,
    max: Option<Num>,
    q: Option<Num>,
    mu: Option<f64>,
    sigma: Option<f64>,
    a: Option<f64>,
    b: Option<f64>,
    parameters: Option<BTreeMap<String, RawParameter>>,
    var: Option<String>,
    set: Option<String>,
}

/// `raw` flattened, in W&B's order: names sorted at each level, a nested group in its name's
/// place. W&B walks grids in this order too.
pub(super) fn flatten(raw: &BTreeMap<String, RawParameter>) -> Result<Vec<Parameter>, SweepError> {
    let mut out = Vec::new();
    flatten_into(raw, "", 0, &mut out)?;
    if out.is_empty() {
        return Err(SweepError::Invalid {
            path: "parameters".into(),
            problem: "no parameter is given".into(),
        });
    }
    let mut seen = std::collections::BTreeSet::new();
    for parameter in &out {
        if !seen.insert(&parameter.path) {
            return Err(invalid(&format!("parameters.{}", parameter.path), "is given twice (once nested)"));
        }
    }
    let mut targets = std::collections::BTreeSet::new();
    for parameter in &out {
        if !targets.insert(&parameter.target) {
            let (kind, name) = match &parameter.target {
                Target::Var(name) => ("var", name),
                Target::Set(name) => ("set", name),
            };
            return Err(invalid(
                &format!("parameters.{}", parameter.path),
                &format!("{kind} {name} is the target of another parameter"),
            ));
        }
    }
    Ok(out)
}

fn flatten_into(
    raw: &BTreeMap<String, RawParameter>,
    prefix: &str,
    depth: usize,
    out: &mut Vec<Parameter>,
) -> Result<(), SweepError> {
    if depth > MAX_NESTING {
        return Err(invalid(prefix.trim_end_matches('.'), &format!("nested more than {MAX_NESTING} levels")));
    }
    for (name, param) in raw {
        let path = format!("{prefix}{name}");
        let shown_path = format!("parameters.{path}");
        if !valid_name(name) {
            return Err(invalid(
                &shown_path,
                "a parameter name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or '_'",
            ));
        }
        if let Some(nested) = &param.parameters {
            if nested.is_empty() {
                return Err(invalid(&format!("{shown_path}.parameters"), "no parameter is given"));
            }
            if present_keys(param).len() > 1 {
                return Err(invalid(&shown_path, "a group with parameters takes no other key"));
            }
            flatten_into(nested, &format!("{path}."), depth + 1, out)?;
            continue;
        }
        let domain = domain_of(&shown_path, param)?;
        let target = match (&param.var, &param.set) {
            (Some(_), Some(_)) => return Err(invalid(&shown_path, "give var or set, not both")),
            (Some(var), None) => Target::Var(checked_target(&shown_path, "var", var)?),
            (None, Some(set)) => Target::Set(checked_target(&shown_path, "set", set)?),
            (None, None) => Target::Var(path.clone()),
        };
        out.push(Parameter { path, domain, target });
    }
    Ok(())
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= MAX_NAME_LEN
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

fn checked_target(path: &str, key: &str, name: &str) -> Result<String, SweepError> {
    if name.is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
        return Err(invalid(&format!("{path}.{key}"), "must be 1 to 128 characters on one line"));
    }
    Ok(name.to_string())
}

fn invalid(path: &str, problem: &str) -> SweepError {
    SweepError::Invalid { path: path.to_string(), problem: problem.to_string() }
}

/// The domain keys `raw` has (the target keys `var`/`set` aside).
fn present_keys(raw: &RawParameter) -> Vec<&'static str> {
    let flags = [
        ("value", raw.value.is_some()),
        ("values", raw.values.is_some()),
        ("probabilities", raw.probabilities.is_some()),
        ("distribution", raw.distribution.is_some()),
        ("min", raw.min.is_some()),
        ("max", raw.max.is_some()),
        ("q", raw.q.is_some()),
        ("mu", raw.mu.is_some()),
        ("sigma", raw.sigma.is_some()),
        ("a", raw.a.is_some()),
        ("b", raw.b.is_some()),
        ("parameters", raw.parameters.is_some()),
    ];
    flags.into_iter().filter(|(_, on)| *on).map(|(key, _)| key).collect()
}

/// The distribution `raw` names, or the one W&B infers.
fn distribution_of(path: &str, raw: &RawParameter) -> Result<String, SweepError> {
    if let Some(name) = &raw.distribution {
        return Ok(name.clone());
    }
    Ok(match (&raw.value, &raw.values, &raw.probabilities, raw.min, raw.max) {
        (Some(_), None, None, None, None) => "constant",
        (None, Some(_), None, None, None) => "categorical",
        (None, Some(_), Some(_), None, None) => "categorical_w_probabilities",
        (None, None, None, Some(Num::Int(_)), Some(Num::Int(_))) => "int_uniform",
        (None, None, None, Some(_), Some(_)) => "uniform",
        _ => {
            return Err(SweepError::Missing {
                path: path.to_string(),
                what: "value, values, min and max, or a distribution".into(),
            });
        }
    }
    .to_string())
}

fn domain_of(path: &str, raw: &RawParameter) -> Result<Domain, SweepError> {
    let distribution = distribution_of(path, raw)?;
    let (allowed, required): (&[&str], &[&str]) = match distribution.as_str() {
        "constant" => (&["value"], &["value"]),
        "categorical" | "categorical_w_probabilities" => (&["values", "probabilities"], &["values"]),
        "int_uniform"
        | "uniform"
        | "log_uniform"
        | "log_uniform_values"
        | "inv_log_uniform"
        | "inv_log_uniform_values" => (&["min", "max"], &["min", "max"]),
        "q_uniform" | "q_log_uniform" | "q_log_uniform_values" => (&["min", "max", "q"], &["min", "max"]),
        "normal" | "log_normal" => (&["mu", "sigma"], &[]),
        "q_normal" | "q_log_normal" => (&["mu", "sigma", "q"], &[]),
        "beta" => (&["a", "b"], &[]),
        "q_beta" => (&["a", "b", "q"], &[]),
        _ => {
            return Err(SweepError::UnknownDistribution {
                path: path.to_string(),
                name: one_line(&distribution),
            });
        }
    };
    let present = present_keys(raw);
    if let Some(extra) = present.iter().find(|key| **key != "distribution" && !allowed.contains(key)) {
        return Err(invalid(
            &format!("{path}.{extra}"),
            &format!("does not apply to distribution {distribution}"),
        ));
    }
    if let Some(missing) = required.iter().find(|key| !present.contains(key)) {
        return Err(SweepError::Missing {
            path: path.to_string(),
            what: format!("{missing} (distribution {distribution} needs {})", required.join(" and ")),
        });
    }
    let finite = |key: &str, value: Option<f64>, default: f64| -> Result<f64, SweepError> {
        let value = value.unwrap_or(default);
        if value.is_finite() {
            Ok(value)
        } else {
            Err(SweepError::NotFinite { path: format!("{path}.{key}"), value: python_float(value) })
        }
    };
    let bounds = || -> Result<(f64, f64), SweepError> {
        let (min, max) = (raw.min.unwrap_or(Num::Int(0)), raw.max.unwrap_or(Num::Int(0)));
        let (lo, hi) = (finite("min", Some(min.get()), 0.0)?, finite("max", Some(max.get()), 0.0)?);
        if lo >= hi {
            return Err(SweepError::MinNotBelowMax {
                path: path.to_string(),
                min: min.shown(),
                max: max.shown(),
            });
        }
        Ok((lo, hi))
    };
    let quantum = || -> Result<Quantum, SweepError> {
        let q = raw.q.unwrap_or(Num::Float(1.0));
        let value = finite("q", Some(q.get()), 1.0)?;
        if value <= 0.0 {
            return Err(invalid(&format!("{path}.q"), &format!("{} must be above 0", q.shown())));
        }
        Ok(Quantum { q: value, whole: q.is_int() })
    };
    let exponents = || -> Result<(f64, f64), SweepError> {
        let (min, max) = bounds()?;
        if min < -MAX_EXPONENT || max > MAX_EXPONENT {
            return Err(invalid(path, &format!("log-space bounds must lie within ±{MAX_EXPONENT}")));
        }
        Ok((min, max))
    };
    let positive = || -> Result<(f64, f64), SweepError> {
        let (min, max) = bounds()?;
        if min <= 0.0 {
            return Err(invalid(&format!("{path}.min"), &format!("{} must be above 0", python_float(min))));
        }
        Ok((min, max))
    };
    let normal = |limit: f64| -> Result<(f64, f64), SweepError> {
        let (mu, sigma) = (finite("mu", raw.mu, 0.0)?, finite("sigma", raw.sigma, 1.0)?);
        if sigma < 0.0 {
            return Err(invalid(
                &format!("{path}.sigma"),
                &format!("{} must not be negative", python_float(sigma)),
            ));
        }
        if mu.abs() + 9.0 * sigma > limit {
            return Err(invalid(path, &format!("|mu| + 9 sigma must be at most {}", python_float(limit))));
        }
        Ok((mu, sigma))
    };
    let shape = || -> Result<(f64, f64), SweepError> {
        let (a, b) = (finite("a", raw.a, 1.0)?, finite("b", raw.b, 1.0)?);
        for (key, value) in [("a", a), ("b", b)] {
            if !(1e-3..=1e6).contains(&value) {
                return Err(invalid(&format!("{path}.{key}"), "must be between 0.001 and 1000000"));
            }
        }
        Ok((a, b))
    };
    let domain = match distribution.as_str() {
        "constant" => Domain::Constant(raw.value.clone().unwrap_or(Value::Null)),
        "categorical" | "categorical_w_probabilities" => categorical(path, raw)?,
        "int_uniform" => match (raw.min, raw.max) {
            (Some(Num::Int(min)), Some(Num::Int(max))) => {
                bounds()?;
                Domain::IntUniform { min, max }
            }
            _ => return Err(invalid(path, "int_uniform takes integer min and max")),
        },
        "uniform" => {
            let (min, max) = bounds()?;
            Domain::Uniform { min, max }
        }
        "q_uniform" => {
            bounds()?;
            let q = quantum()?;
            let min = raw.min.unwrap_or(Num::Int(0));
            let max = raw.max.unwrap_or(Num::Int(0));
            Domain::QUniform { min, max, q: if q.whole { Num::Int(q.q as i64) } else { Num::Float(q.q) } }
        }
        "log_uniform" | "q_log_uniform" => {
            let (min, max) = exponents()?;
            let q = if distribution == "q_log_uniform" { Some(quantum()?) } else { None };
            Domain::LogUniform { min, max, q }
        }
        "log_uniform_values" | "q_log_uniform_values" => {
            let (min, max) = positive()?;
            let q = if distribution == "q_log_uniform_values" { Some(quantum()?) } else { None };
            Domain::LogUniformValues { min, max, q }
        }
        "inv_log_uniform" => {
            let (min, max) = exponents()?;
            Domain::InvLogUniform { min, max }
        }
        "inv_log_uniform_values" => {
            let (min, max) = positive()?;
            Domain::InvLogUniformValues { min, max }
        }
        "normal" | "q_normal" => {
            let (mu, sigma) = normal(MAX_NORMAL)?;
            let q = if distribution == "q_normal" { Some(quantum()?) } else { None };
            Domain::Normal { mu, sigma, q }
        }
        "log_normal" | "q_log_normal" => {
            let (mu, sigma) = normal(MAX_EXPONENT)?;
            let q = if distribution == "q_log_normal" { Some(quantum()?) } else { None };
            Domain::LogNormal { mu, sigma, q }
        }
        _ => {
            let (a, b) = shape()?;
            let q = if distribution == "q_beta" { Some(quantum()?) } else { None };
            Domain::Beta { a, b, q }
        }
    };
    if let Some((q, reach)) = steps(&domain)
        && reach / q > MAX_STEPS
    {
        return Err(invalid(
            &format!("{path}.q"),
            &format!("{} is too small for the range (over 10^15 steps)", python_float(q)),
        ));
    }
    Ok(domain)
}

/// Most multiples of `q` a quantized value may be: beyond, rounding to `q` means nothing.
const MAX_STEPS: f64 = 1e15;

/// A quantized domain's `q` and the largest magnitude its draws reach.
fn steps(domain: &Domain) -> Option<(f64, f64)> {
    let (q, reach) = match domain {
        Domain::QUniform { min, max, q } => (q.get(), min.get().abs().max(max.get().abs())),
        Domain::LogUniform { max, q: Some(q), .. } => (q.q, max.exp()),
        Domain::LogUniformValues { max, q: Some(q), .. } => (q.q, *max),
        Domain::Normal { mu, sigma, q: Some(q) } => (q.q, mu.abs() + 9.0 * sigma),
        Domain::LogNormal { mu, sigma, q: Some(q) } => (q.q, (mu + 9.0 * sigma).exp()),
        Domain::Beta { q: Some(q), .. } => (q.q, 1.0),
        _ => return None,
    };
    Some((q, reach))
}

fn categorical(path: &str, raw: &RawParameter) -> Result<Domain, SweepError> {
    let values = raw.values.clone().unwrap_or_default();
    if values.is_empty() {
        return Err(invalid(&format!("{path}.values"), "is empty"));
    }
    let Some(probabilities) = raw.probabilities.clone() else {
        return Ok(Domain::Categorical { values, probabilities: None });
    };
    let path = format!("{path}.probabilities");
    if probabilities.len() != values.len() {
        return Err(invalid(
            &path,
            &format!("has {} entries for {} values", probabilities.len(), values.len()),
        ));
    }
    if let Some(bad) = probabilities.iter().find(|p| !p.is_finite() || **p < 0.0) {
        return Err(invalid(&path, &format!("{} is not a probability", python_float(*bad))));
    }
    let sum: f64 = probabilities.iter().sum();
    // numpy.isclose(sum, 1.0), as W&B checks.
    if (sum - 1.0).abs() > 1e-8 + 1e-5 {
        return Err(invalid(&path, &format!("sum to {}, not 1", python_float(sum))));
    }
    Ok(Domain::Categorical { values, probabilities: Some(probabilities) })
}

fn one_line(text: &str) -> String {
    crate::text::one_line(&text.chars().take(80).collect::<String>())
}
