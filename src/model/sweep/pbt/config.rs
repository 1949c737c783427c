//! A `method: pbt` sweep's own keys, with Ray Tune's names and meanings
//! (`ray.tune.schedulers.PopulationBasedTraining`):
//! - `perturbation_interval` (required): every so many steps of the metric, the members that
//!   reached the boundary are compared;
//! - `quantile_fraction` (0.25, above 0 and at most 0.5): the bottom and top fractions;
//! - `resample_probability` (0.25): how often an explored value is drawn again from its
//!   parameter's distribution rather than perturbed;
//! - `perturbation_factors` ([1.2, 0.8]): what a continuous value is multiplied by;
//! - `burn_in` (0; Ray's `burn_in_period`): no exploit at a boundary below it.
//!
//! The population is `run_cap` members, each started with a random draw of `parameters`
//! (W&B has no PBT; Ray's `num_samples` is the population).

use super::super::format::python_float;
use super::super::spec::SweepError;

/// Bound on `perturbation_interval` and `burn_in`: steps of a metric.
const MAX_STEPS: i64 = 1_000_000_000;

/// A checked PBT schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Pbt {
    pub perturbation_interval: i64,
    pub quantile_fraction: f64,
    pub resample_probability: f64,
    pub perturbation_factors: Vec<f64>,
    pub burn_in: i64,
}

/// The PBT keys as written (all optional until checked).
#[derive(Debug, Default)]
pub struct RawPbt {
    pub perturbation_interval: Option<i64>,
    pub quantile_fraction: Option<f64>,
    pub resample_probability: Option<f64>,
    pub perturbation_factors: Option<Vec<f64>>,
    pub burn_in: Option<i64>,
}

impl RawPbt {
    /// Whether any PBT key is written (they are refused for another method).
    pub fn any(&self) -> bool {
        self.perturbation_interval.is_some()
            || self.quantile_fraction.is_some()
            || self.resample_probability.is_some()
            || self.perturbation_factors.is_some()
            || self.burn_in.is_some()
    }

    /// The keys checked: Ray's defaults for those not written.
    pub fn checked(self) -> Result<Pbt, SweepError> {
        let interval = self.perturbation_interval.ok_or_else(|| {
            invalid(
                "perturbation_interval",
                "missing: every how many steps of the metric members are compared",
            )
        })?;
        if !(1..=MAX_STEPS).contains(&interval) {
            return Err(invalid(
                "perturbation_interval",
                &format!("{interval} is not between 1 and {MAX_STEPS} (steps of the metric)"),
            ));
        }
        let quantile_fraction = self.quantile_fraction.unwrap_or(0.25);
        if !(quantile_fraction > 0.0 && quantile_fraction <= 0.5) {
            return Err(invalid(
                "quantile_fraction",
                &format!(
                    "{} is not above 0 and at most 0.5 (the bottom and top fractions must not overlap)",
                    python_float(quantile_fraction)
                ),
            ));
        }
        let resample_probability = self.resample_probability.unwrap_or(0.25);
        if !(0.0..=1.0).contains(&resample_probability) {
            return Err(invalid(
                "resample_probability",
                &format!("{} is not between 0 and 1", python_float(resample_probability)),
            ));
        }
        let perturbation_factors = self.perturbation_factors.unwrap_or_else(|| vec![1.2, 0.8]);
        if perturbation_factors.is_empty() || perturbation_factors.len() > 64 {
            return Err(invalid("perturbation_factors", "give 1 to 64 factors (Ray's default: [1.2, 0.8])"));
        }
        if let Some(bad) = perturbation_factors.iter().find(|f| !(f.is_finite() && **f > 0.0 && **f < 1e6)) {
            return Err(invalid(
                "perturbation_factors",
                &format!("{} is not a positive factor below 1e6", python_float(*bad)),
            ));
        }
        let burn_in = self.burn_in.unwrap_or(0);
        if !(0..=MAX_STEPS).contains(&burn_in) {
            return Err(invalid("burn_in", &format!("{burn_in} is not between 0 and {MAX_STEPS}")));
        }
        Ok(Pbt {
            perturbation_interval: interval,
            quantile_fraction,
            resample_probability,
            perturbation_factors,
            burn_in,
        })
    }
}

fn invalid(path: &str, problem: &str) -> SweepError {
    SweepError::Invalid { path: path.to_string(), problem: problem.to_string() }
}
