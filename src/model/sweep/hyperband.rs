//! W&B's early-termination rule, `hyperband_stop_runs` of the `sweeps` package (0.3.0), as a
//! pure function of the members' metric series: which running members to stop, and why.
//! tests/it/sweep_reference.rs runs both on generated series and compares their decisions.
//!
//! - An iteration is one reading of the metric; readings that are not finite are dropped.
//! - Bands: with `min_iter`, `int(min_iter·eta^k)` for k = 0..100; with `max_iter` and `s`,
//!   `int(max_iter/eta^k)` for k = 1..=s while ≥ 1 (by repeated division, as W&B computes
//!   them), sorted. Bands past 2^53 readings are left out: no series reaches them (W&B would
//!   fail on an infinite one).
//! - For maximize, every value is negated first, so lower is better throughout.
//! - A band's threshold: the values at that iteration of every member (any state) whose series
//!   reaches it, sorted; the one at index `int(n/eta)`.
//! - A running member is stopped when its best value so far (with `strict`, its value at the
//!   band) is worse than the threshold of the last band its series reached.

use super::format::python_float;
use super::spec::{Goal, Metric};

/// Where hyperband's bands come from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bands {
    MinIter(u64),
    MaxIter { max_iter: u64, s: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hyperband {
    pub bands: Bands,
    /// Above 1.
    pub eta: f64,
    /// Compare the value at the band rather than the best so far (W&B's default: true).
    pub strict: bool,
}

/// The longest series any band is kept for.
const MAX_BAND: f64 = 9_007_199_254_740_992.0; // 2^53

impl Hyperband {
    /// The bands, ascending, as W&B computes them.
    pub fn bands(&self) -> Vec<u64> {
        let mut bands = Vec::new();
        match self.bands {
            Bands::MinIter(min_iter) => {
                let mut band = min_iter as f64;
                for _ in 0..100 {
                    if band.is_nan() || band >= MAX_BAND {
                        break;
                    }
                    bands.push(band as u64);
                    band *= self.eta;
                }
            }
            Bands::MaxIter { max_iter, s } => {
                let mut band = max_iter as f64;
                for _ in 0..s {
                    band /= self.eta;
                    if band < 1.0 {
                        break;
                    }
                    bands.push(band as u64);
                }
                bands.sort_unstable();
            }
        }
        // A parsed sweep has none; a hand-made min_iter 0 must not index before a series.
        bands.retain(|band| *band >= 1);
        bands
    }
}

/// One member's readings of the sweep's metric, in order.
#[derive(Clone, Debug)]
pub struct Series<'a, Id> {
    pub id: Id,
    /// Only running members are stopped; every member's readings count in the thresholds.
    pub running: bool,
    pub values: &'a [f64],
}

/// A decision to stop a member.
#[derive(Clone, Debug, PartialEq)]
pub struct Stop<Id> {
    pub id: Id,
    pub band: u64,
    /// The member's readings so far (finite ones).
    pub iterations: usize,
    /// Its best value so far, or with `strict` its value at the band, as the metric reads.
    pub value: f64,
    pub threshold: f64,
    pub strict: bool,
}

impl<Id> Stop<Id> {
    /// "best loss 0.91 by iteration 6 is worse than the band-6 threshold 0.72".
    pub fn reason(&self, metric: &str) -> String {
        let (band, value, threshold) = (self.band, python_float(self.value), python_float(self.threshold));
        if self.strict {
            format!(
                "{metric} {value} at iteration {band} is worse than the band-{band} threshold {threshold}"
            )
        } else {
            let iterations = self.iterations;
            format!(
                "best {metric} {value} by iteration {iterations} is worse than the band-{band} threshold {threshold}"
            )
        }
    }
}

/// The running members of `members` that W&B's rule stops now, in `members`' order.
pub fn stop_runs<Id: Clone>(members: &[Series<Id>], metric: &Metric, config: &Hyperband) -> Vec<Stop<Id>> {
    let sign = match metric.goal {
        Goal::Minimize => 1.0,
        Goal::Maximize => -1.0,
    };
    let histories: Vec<Vec<f64>> = members
        .iter()
        .map(|member| member.values.iter().filter(|v| v.is_finite()).map(|v| sign * v).collect())
        .collect();
    let bands = config.bands();
    let r = 1.0 / config.eta;
    let thresholds: Vec<f64> = bands
        .iter()
        .map(|&band| {
            let at = band as usize - 1;
            let mut values: Vec<f64> = histories.iter().filter_map(|h| h.get(at).copied()).collect();
            if values.is_empty() {
                return f64::INFINITY;
            }
            // Stable, like Python's sorted (all values are finite).
            values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
            let index = ((r * values.len() as f64) as usize).min(values.len() - 1);
            values[index]
        })
        .collect();
    let mut stops = Vec::new();
    for (member, history) in members.iter().zip(&histories) {
        if !member.running {
            continue;
        }
        let reached =
            bands.iter().zip(&thresholds).take_while(|(band, _)| **band as usize <= history.len()).last();
        let Some((&band, &threshold)) = reached else { continue };
        let value = if config.strict {
            history[band as usize - 1]
        } else {
            history.iter().copied().fold(f64::INFINITY, f64::min)
        };
        if value > threshold {
            stops.push(Stop {
                id: member.id.clone(),
                band,
                iterations: history.len(),
                value: sign * value,
                threshold: sign * threshold,
                strict: config.strict,
            });
        }
    }
    stops
}
