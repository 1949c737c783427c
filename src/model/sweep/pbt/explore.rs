//! PBT's explore, as Ray Tune's `_explore` does it: each parameter of the donor's
//! configuration is, with `resample_probability`, drawn again from its distribution;
//! otherwise a number is multiplied by one of `perturbation_factors` (an integer stays one,
//! truncated as Python's `int` truncates) and a `values` choice moves to a neighbouring index
//! (clamped at the ends). Constants never change. Like Ray, a perturbed value is not clipped
//! to the distribution's `min`/`max`: a schedule may leave the range it started in.

use std::collections::BTreeMap;

use serde_json::Value;

use super::super::generate::{draw, float};
use super::super::parameter::{Domain, Parameter};
use super::super::random::Rng;
use super::config::Pbt;

/// The donor's `values` explored, drawing from `rng`, in the order of `parameters`.
pub fn explore(
    parameters: &[Parameter],
    pbt: &Pbt,
    values: &BTreeMap<String, Value>,
    rng: &mut Rng,
) -> BTreeMap<String, Value> {
    let mut explored = values.clone();
    for param in parameters {
        if let Domain::Constant(value) = &param.domain {
            explored.insert(param.path.clone(), value.clone());
            continue;
        }
        let current = values.get(&param.path);
        let resample = rng.unit() < pbt.resample_probability;
        let new = match (&param.domain, current) {
            (_, None) => draw(&param.domain, rng),
            (Domain::Categorical { values: choices, .. }, Some(current)) => {
                match choices.iter().position(|choice| same(choice, current)) {
                    Some(at) if !resample => {
                        let up = rng.below(2) == 1;
                        let to = if up { (at + 1).min(choices.len() - 1) } else { at.saturating_sub(1) };
                        choices[to].clone()
                    }
                    // Resampled, or a value the list does not hold (Ray resamples it too).
                    _ => draw(&param.domain, rng),
                }
            }
            (_, Some(_)) if resample => draw(&param.domain, rng),
            (_, Some(current)) => {
                let factor =
                    pbt.perturbation_factors[rng.below(pbt.perturbation_factors.len() as u128) as usize];
                perturbed(current, factor).unwrap_or_else(|| draw(&param.domain, rng))
            }
        };
        explored.insert(param.path.clone(), new);
    }
    explored
}

/// `value` × `factor`: an integer truncated back to one, a float kept finite; None for a value
/// that is not a number.
fn perturbed(value: &Value, factor: f64) -> Option<Value> {
    if let Some(int) = value.as_i64() {
        let product = int as f64 * factor;
        return (product.is_finite() && product.abs() < 9e15).then(|| Value::from(product.trunc() as i64));
    }
    let product = value.as_f64()? * factor;
    product.is_finite().then(|| float(product))
}

/// Equal as W&B tells values apart: 1 and 1.0 are one value.
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}
