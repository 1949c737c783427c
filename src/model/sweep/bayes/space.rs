//! The unit cube W&B's bayes searches: each parameter but a constant is one axis, a value
//! placed on it by its distribution's CDF and read back by its quantile function (W&B's
//! `HyperParameter.cdf` and `ppf`). So a log-uniform parameter is searched in log space, a
//! normal one by its probability, and a categorical one as W&B encodes it: value i of n at
//! (i + 1)/n (its `randint` CDF), read back as the first value whose CDF reaches the point;
//! with `probabilities`, value i at their cumulative sum, read back as the first value whose
//! cumulative sum is above the point (W&B's `argmin(x >= cdf)`).

use serde_json::Value;

use super::special::{beta_cdf, beta_quantile, normal_cdf, normal_quantile};
use crate::model::sweep::generate::{float, quantized};
use crate::model::sweep::parameter::{Domain, Num, Quantum};

/// Normal draws are kept within ±8.5 deviations (as lachesis' random draws are): W&B's ppf
/// of 0 or 1 would be infinite.
const MAX_Z: f64 = 8.5;

/// Whether `domain` is an axis of the search (a constant is not).
pub fn searched(domain: &Domain) -> bool {
    !matches!(domain, Domain::Constant(_))
}

/// Where `value` lies on `domain`'s axis, in [0, 1]; None when the domain cannot hold it.
pub fn encode(domain: &Domain, value: &Value) -> Option<f64> {
    let x = || value.as_f64().filter(|x| x.is_finite());
    let linear = |x: f64, min: f64, max: f64| (x - min) / (max - min);
    let u = match domain {
        Domain::Constant(_) => return None,
        Domain::Categorical { values, probabilities } => {
            let at = values.iter().position(|v| same(v, value))?;
            match probabilities {
                None => (at + 1) as f64 / values.len() as f64,
                Some(weights) => weights[..=at].iter().sum(),
            }
        }
        Domain::IntUniform { min, max } => {
            let span = (*max as f64) - (*min as f64) + 1.0;
            (x()? - *min as f64 + 1.0) / span
        }
        Domain::Uniform { min, max } => linear(x()?, *min, *max),
        Domain::QUniform { min, max, .. } => linear(x()?, min.get(), max.get()),
        Domain::LogUniform { min, max, .. } => linear(positive(x()?)?.ln(), *min, *max),
        Domain::LogUniformValues { min, max, .. } => linear(positive(x()?)?.ln(), min.ln(), max.ln()),
        Domain::InvLogUniform { min, max } => 1.0 - linear((1.0 / positive(x()?)?).ln(), *min, *max),
        Domain::InvLogUniformValues { min, max } => {
            1.0 - linear((1.0 / positive(x()?)?).ln(), -max.ln(), -min.ln())
        }
        Domain::Normal { mu, sigma, .. } if *sigma > 0.0 => normal_cdf((x()? - mu) / sigma),
        Domain::LogNormal { mu, sigma, .. } if *sigma > 0.0 => {
            normal_cdf((positive(x()?)?.ln() - mu) / sigma)
        }
        Domain::Normal { .. } | Domain::LogNormal { .. } => 0.5,
        Domain::Beta { a, b, .. } => beta_cdf(x()?, *a, *b),
    };
    u.is_finite().then_some(u.clamp(0.0, 1.0))
}

/// The value at `u` (in [0, 1]) on `domain`'s axis, quantized as the domain says.
pub fn decode(domain: &Domain, u: f64) -> Value {
    let u = u.clamp(0.0, 1.0);
    let between = |min: f64, max: f64| ((1.0 - u) * min + u * max).clamp(min, max);
    let z = |sigma: f64| if sigma > 0.0 { normal_quantile(u).clamp(-MAX_Z, MAX_Z) } else { 0.0 };
    match domain {
        Domain::Constant(value) => value.clone(),
        Domain::Categorical { values, probabilities: None } => {
            values[first_reaching(u, values.len() as u128) as usize].clone()
        }
        Domain::Categorical { values, probabilities: Some(weights) } => {
            let mut cumulative = 0.0;
            let last = weights.iter().rposition(|w| *w > 0.0).unwrap_or(0);
            let at = weights
                .iter()
                .position(|w| {
                    cumulative += w;
                    *w > 0.0 && u < cumulative
                })
                .unwrap_or(last);
            values[at].clone()
        }
        Domain::IntUniform { min, max } => {
            let span = (*max as i128 - *min as i128 + 1) as u128;
            Value::from((*min as i128 + first_reaching(u, span) as i128) as i64)
        }
        Domain::Uniform { min, max } => float(between(*min, *max)),
        Domain::QUniform { min, max, q } => quantized(
            between(min.get(), max.get()),
            Some(Quantum { q: q.get(), whole: matches!(q, Num::Int(_)) }),
        ),
        Domain::LogUniform { min, max, q } => quantized(between(*min, *max).exp(), *q),
        Domain::LogUniformValues { min, max, q } => {
            quantized(between(min.ln(), max.ln()).exp().clamp(*min, *max), *q)
        }
        Domain::InvLogUniform { min, max } => float((-((1.0 - u) * max + u * min).clamp(*min, *max)).exp()),
        Domain::InvLogUniformValues { min, max } => {
            let exponent = ((1.0 - u) * -min.ln() + u * -max.ln()).clamp(-max.ln(), -min.ln());
            float((-exponent).exp().clamp(*min, *max))
        }
        Domain::Normal { mu, sigma, q } => quantized(mu + sigma * z(*sigma), *q),
        Domain::LogNormal { mu, sigma, q } => quantized((mu + sigma * z(*sigma)).exp(), *q),
        Domain::Beta { a, b, q } => quantized(beta_quantile(u, *a, *b), *q),
    }
}

/// scipy's `randint(0, n).ppf(u)`: the first i whose CDF (i + 1)/n reaches u (0 for u = 0,
/// where scipy would give −1 and W&B the last value).
fn first_reaching(u: f64, n: u128) -> u128 {
    // Less a hair: the point (i + 1)/n itself, after rounding, reads back as value i.
    ((u * n as f64 - 1e-9).ceil().max(0.0) as u128).saturating_sub(1).min(n.saturating_sub(1))
}

fn positive(x: f64) -> Option<f64> {
    (x > 0.0).then_some(x)
}

/// Two values as W&B's `list.index` tells them apart: numbers by value (1 is 1.0), the rest as
/// JSON.
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_number() && b.is_number() => x == y,
        _ => a == b,
    }
}
