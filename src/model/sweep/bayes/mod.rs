//! `method: bayes` as W&B's `sweeps` 0.3.0 defines it (`bayes_search.py`): the next member's
//! configuration is the one, among 1,000 random points of the unit cube ([`space`]), with the
//! largest expected improvement under a Gaussian process ([`gp`]) fitted to the members so far.
//!
//! What each member contributes, as W&B's `_construct_gp_data` takes it:
//! - a member that completed, or that hyperband stopped: the best of its readings of the
//!   metric (W&B's `metric_extremum` over the run's history and summary; the summary is the last
//!   value logged, so this is the best reading), or, without a finite one, the worst value;
//! - a member that failed or was stopped otherwise: the worst value (the worst reading of any
//!   ended member, 0 when there is none), so the search moves away from it;
//! - a member in flight (pending or running): no value; the process fitted to the others
//!   predicts one for it and is fitted again with that prediction (W&B's imputation), so the
//!   suggestions made while it runs move away from it: parallel members differ.
//!
//! With fewer than two members that count, the point is drawn at random. Targets are
//! normalized as W&B does (scaled by the largest magnitude, then to zero mean and unit
//! deviation; negated for `maximize`). At most 100 members fit the process (drawn at random
//! beyond that, without repeats where W&B draws with them). When the fitted length scale is at
//! its bound, W&B draws the point at random among the candidates: so does this.
//!
//! Departures, to do at least as well as W&B (`bench.rs`): the process' length scale is the
//! best local maximum of its likelihood inside its range, not wherever scikit-learn's optimizer
//! stops, and a white-noise level is fitted with it (see [`gp`]).
//!
//! Every draw comes from the stream keyed by (seed, member k): member k's suggestion is a pure
//! function of the sweep, what the members before it showed, and k.

pub mod ard;
mod ascent;
#[cfg(test)]
mod bench;
pub mod gp;
pub mod space;
pub mod special;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde_json::Value;

use super::generate::{Assignment, Configuration};
use super::random::Rng;
use super::spec::{Goal, SweepSpec};
use gp::Fitted;
use special::{normal_cdf, normal_pdf};

/// W&B's `num_points_to_try`.
pub const CANDIDATES: usize = 1_000;
/// W&B's `max_samples_for_gp`.
pub const MAX_SAMPLES: usize = 100;
/// W&B's `STD_NUMERICAL_STABILITY_EPSILON`.
const EPSILON: f64 = 1e-6;
/// The stream of member k's bayes draws, apart from the random method's streams (0, 1, … by
/// parameter).
const STREAM: u64 = u64::MAX - 1;

/// Where a member is, as the search counts it.
#[derive(Clone, Debug, PartialEq)]
pub enum Seen {
    /// Pending or running: imputed.
    InFlight,
    /// Ended. `counts`: it completed or hyperband stopped it (its best reading is its value);
    /// otherwise (failed, stopped by a user) it takes the worst value. `best` and `worst`: its
    /// best and worst finite readings by the goal.
    Ended { counts: bool, best: Option<f64>, worst: Option<f64> },
}

/// A member as the search sees it: its values by parameter path, and where it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub values: BTreeMap<String, Value>,
    pub seen: Seen,
}

/// Member `k`'s configuration in the bayes sweep `spec`, given the members before it.
pub fn suggest(spec: &SweepSpec, members: &[Observed], k: u64) -> Configuration {
    let mut rng = Rng::keyed(spec.seed, k, STREAM);
    let axes: Vec<&super::Parameter> =
        spec.parameters.iter().filter(|param| space::searched(&param.domain)).collect();
    let point = next_point(spec, &axes, members, &mut rng);
    let mut on_axis =
        axes.iter().zip(point).map(|(param, u)| (param.path.as_str(), u)).collect::<BTreeMap<_, _>>();
    let assignments = spec
        .parameters
        .iter()
        .map(|param| Assignment {
            path: param.path.clone(),
            target: param.target.clone(),
            value: space::decode(&param.domain, on_axis.remove(param.path.as_str()).unwrap_or(0.5)),
        })
        .collect();
    Configuration { index: k, assignments }
}

fn random_point(dims: usize, rng: &mut Rng) -> Vec<f64> {
    (0..dims).map(|_| rng.unit()).collect()
}

/// A point of the unit cube.
type Point = Vec<f64>;

/// The data W&B fits: each counted member's point and value (minimized), and the points in
/// flight.
fn gp_data(
    spec: &SweepSpec,
    axes: &[&super::Parameter],
    members: &[Observed],
) -> (Vec<(Point, f64)>, Vec<Point>) {
    let goal = spec.metric.as_ref().map_or(Goal::Minimize, |m| m.goal);
    let worse = |a: f64, b: f64| match goal {
        Goal::Minimize => a.max(b),
        Goal::Maximize => a.min(b),
    };
    // W&B's `impute(worst)`: the worst reading of any ended member, else 0.
    let worst = members
        .iter()
        .filter_map(|m| match m.seen {
            Seen::Ended { worst, .. } => worst.filter(|w| w.is_finite()),
            Seen::InFlight => None,
        })
        .reduce(worse)
        .unwrap_or(0.0);
    let sign = if goal == Goal::Maximize { -1.0 } else { 1.0 };
    let mut samples = Vec::new();
    let mut current = Vec::new();
    for member in members {
        let point: Option<Vec<f64>> =
            axes.iter().map(|param| space::encode(&param.domain, member.values.get(&param.path)?)).collect();
        // W&B drops the rows it cannot place (`filter_nans`).
        let Some(point) = point else { continue };
        match member.seen {
            Seen::InFlight => current.push(point),
            Seen::Ended { counts, best, .. } => {
                let value = match best.filter(|b| counts && b.is_finite()) {
                    Some(best) => best,
                    None => worst,
                };
                samples.push((point, sign * value));
            }
        }
    }
    (samples, current)
}

/// W&B's `fit_normalized_gaussian_process`: the targets normalized, and their mean and scale.
fn normalized(y: &[f64]) -> (Vec<f64>, f64, f64) {
    if y.len() == 1 {
        return (vec![0.0], y[0], 1.0);
    }
    let scale = y.iter().fold(1.0_f64, |m, v| m.max(v.abs()));
    let scaled: Vec<f64> = y.iter().map(|v| v / scale).collect();
    let n = scaled.len() as f64;
    let mean = scaled.iter().sum::<f64>() / n;
    let std = (scaled.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n).sqrt() + EPSILON / scale;
    let norm = scaled.iter().map(|v| (v - mean) / std).collect();
    (norm, mean * scale, std * scale)
}

struct Model {
    fitted: Fitted,
    mean: f64,
    std: f64,
}

/// How the process is fitted: as W&B fits it (one length scale; kept for the tests that hold
/// it to W&B's numbers), or with a length scale per axis and a white-noise level fitted
/// together (what `suggest` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    #[cfg_attr(not(test), allow(dead_code))]
    WandB,
    PerAxis,
}

fn fit(points: &[Vec<f64>], values: &[f64], kernel: Kernel) -> Option<Model> {
    let (y, mean, std) = normalized(values);
    let fitted = match kernel {
        Kernel::WandB => Fitted::fit(points, &y)?,
        Kernel::PerAxis => Fitted::fit_per_axis(points, &y, &gp::NOISE_LEVELS)?,
    };
    Some(Model { fitted, mean, std })
}

/// The next point in the unit cube.
fn next_point(spec: &SweepSpec, axes: &[&super::Parameter], members: &[Observed], rng: &mut Rng) -> Vec<f64> {
    let dims = axes.len();
    let (mut samples, mut current) = gp_data(spec, axes, members);
    if samples.len() < 2 || dims == 0 {
        return random_point(dims, rng);
    }
    if samples.len() > MAX_SAMPLES {
        // A partial Fisher–Yates shuffle: MAX_SAMPLES of them, each once.
        for i in 0..MAX_SAMPLES {
            let j = i + rng.below((samples.len() - i) as u128) as usize;
            samples.swap(i, j);
        }
        samples.truncate(MAX_SAMPLES);
    }
    // W&B keeps some real samples in the fit: at most MAX_SAMPLES − 5 points in flight.
    current.truncate(MAX_SAMPLES - 5);
    let best = samples.iter().map(|(_, y)| *y).fold(f64::INFINITY, f64::min);
    let (points, values): (Vec<Vec<f64>>, Vec<f64>) = samples.into_iter().unzip();
    let Some(model) = imputed_model(points, values, current, Kernel::PerAxis) else {
        return random_point(dims, rng);
    };
    let candidates: Vec<Vec<f64>> = (0..CANDIDATES).map(|_| random_point(dims, rng)).collect();
    if model.fitted.at_bound() {
        // W&B: "the next sample will be a random sample within parameter space".
        return candidates[rng.below((CANDIDATES - 1) as u128) as usize].clone();
    }
    let chosen = best_candidate(&model, best, &candidates).unwrap_or(0);
    candidates[chosen].clone()
}

/// W&B's `train_gaussian_process`: the process fitted to the members that count, then, when
/// some are in flight, fitted again with the first fit's predictions at their points (at the
/// first fit's hyperparameters; W&B refits them).
fn imputed_model(
    mut points: Vec<Vec<f64>>,
    mut values: Vec<f64>,
    current: Vec<Vec<f64>>,
    kernel: Kernel,
) -> Option<Model> {
    let model = fit(&points, &values, kernel)?;
    if current.is_empty() {
        return Some(model);
    }
    for point in current {
        let fantasy = model.fitted.predict(&point).0 * model.std + model.mean;
        if fantasy.is_finite() {
            points.push(point);
            values.push(fantasy);
        }
    }
    if kernel == Kernel::WandB {
        return fit(&points, &values, kernel);
    }
    // Fitted again at the first fit's hyperparameters (a kriging believer): refitting them on
    // the predictions, as W&B does, shrinks the length scales around the members in flight and
    // crowds the parallel suggestions together (measured: docs/benchmarks.md).
    let (y, mean, std) = normalized(&values);
    let f = &model.fitted;
    let fitted = Fitted::with_scales(&points, &y, f.length_scale, &f.scales, f.noise)?;
    Some(Model { fitted, mean, std })
}

/// The candidate with the largest expected improvement below `best` (the best value seen,
/// minimized), or None when the fit is poor (its length scale at a bound): W&B's choice.
fn best_candidate(model: &Model, best: f64, candidates: &[Vec<f64>]) -> Option<usize> {
    if model.fitted.at_bound() {
        return None;
    }
    let best_norm = (best - model.mean) / model.std;
    let mut chosen = 0;
    let mut chosen_ei = f64::NEG_INFINITY;
    for (i, candidate) in candidates.iter().enumerate() {
        let ei = expected_improvement(&model.fitted, candidate, best_norm);
        if ei > chosen_ei {
            (chosen, chosen_ei) = (i, ei);
        }
    }
    Some(chosen)
}

/// W&B's expected improvement below `best` (normalized units) at `point`.
pub fn expected_improvement(fitted: &Fitted, point: &[f64], best: f64) -> f64 {
    let (mean, std) = fitted.predict(point);
    let z = -(mean - best) / (std + EPSILON);
    -(mean - best) * normal_cdf(z) + std * normal_pdf(z)
}
