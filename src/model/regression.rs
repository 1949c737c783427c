//! Regression of scheduled inference tests: a baseline per model from the schedule's recent
//! tests, and which models fell below it. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const BASELINE_WINDOW: usize = 5;

/// The median of the most recent `BASELINE_WINDOW` accuracies (fewer if there are fewer),
/// newest first; `None` without any. A median, so one odd run doesn't move the baseline. Values
/// that aren't finite numbers are not measurements and are passed over. The caller leaves out
/// the test being judged.
pub fn baseline(accuracies_newest_first: &[f64]) -> Option<f64> {
    let mut recent: Vec<f64> =
        accuracies_newest_first.iter().copied().filter(|a| a.is_finite()).take(BASELINE_WINDOW).collect();
    median(&mut recent)
}

fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let upper = values.len() / 2;
    let high = *values.get(upper)?;
    if values.len() % 2 == 1 {
        return Some(high);
    }
    let low = *values.get(upper.checked_sub(1)?)?;
    Some((low + high) / 2.0)
}

/// Per-model baselines from the per-model accuracies of a schedule's succeeded tests, newest
/// first. The window is the last `BASELINE_WINDOW` tests, so a model that joined recently has a
/// baseline from the tests it was in.
pub fn baselines(tests_newest_first: &[BTreeMap<String, f64>]) -> BTreeMap<String, f64> {
    let window = &tests_newest_first[..tests_newest_first.len().min(BASELINE_WINDOW)];
    let models: std::collections::BTreeSet<&String> = window.iter().flat_map(|test| test.keys()).collect();
    models
        .into_iter()
        .filter_map(|model| {
            let history: Vec<f64> = window.iter().filter_map(|test| test.get(model).copied()).collect();
            Some((model.clone(), baseline(&history)?))
        })
        .collect()
}

/// Accuracies are reported rounded, so a drop of exactly `max_drop` can come out a hair larger
/// in floating point (0.8 - 0.7 = 0.10000000000000009); it must not count as "beyond".
const DROP_TOLERANCE: f64 = 1e-9;

/// A `max_drop` outside `0..=1`, or not a number.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("invalid regression threshold {0}: expected a drop in accuracy between 0 and 1")]
pub struct InvalidThreshold(pub f64);

/// When a scheduled test counts as regressed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawRegressionPolicy")]
pub struct RegressionPolicy {
    /// The largest allowed drop below the baseline, in absolute accuracy (0.10 = ten points).
    pub max_drop: f64,
}

impl RegressionPolicy {
    pub const DEFAULT_MAX_DROP: f64 = 0.10;

    pub fn new(max_drop: f64) -> Result<Self, InvalidThreshold> {
        if (0.0..=1.0).contains(&max_drop) {
            Ok(RegressionPolicy { max_drop })
        } else {
            Err(InvalidThreshold(max_drop))
        }
    }
}

impl Default for RegressionPolicy {
    fn default() -> Self {
        RegressionPolicy { max_drop: Self::DEFAULT_MAX_DROP }
    }
}

/// The policy as written in a config file, checked by `RegressionPolicy::new` on the way in.
#[derive(Deserialize)]
struct RawRegressionPolicy {
    #[serde(default = "default_max_drop")]
    max_drop: f64,
}

fn default_max_drop() -> f64 {
    RegressionPolicy::DEFAULT_MAX_DROP
}

impl TryFrom<RawRegressionPolicy> for RegressionPolicy {
    type Error = InvalidThreshold;

    fn try_from(raw: RawRegressionPolicy) -> Result<Self, Self::Error> {
        RegressionPolicy::new(raw.max_drop)
    }
}

/// One model of a scheduled test that fell below its baseline or stopped producing results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Regression {
    pub model: String,
    pub baseline: f64,
    /// `None` when the model produced no (usable) result.
    pub current: Option<f64>,
    pub reason: String,
}

/// The models of a test that regressed against their baselines, sorted by model name. A model
/// with a baseline but missing from `current` (or `None` there, or not a finite number) produced
/// no results, which counts as a regression; a model without a baseline can't regress.
pub fn regressions(
    policy: &RegressionPolicy,
    baseline: &BTreeMap<String, f64>,
    current: &BTreeMap<String, Option<f64>>,
) -> Vec<Regression> {
    regressions_of("accuracy", policy, baseline, current)
}

/// [`regressions`] of another figure than accuracy (a verifiers test's mean `reward`), named so
/// in the reasons.
pub fn regressions_of(
    figure: &str,
    policy: &RegressionPolicy,
    baseline: &BTreeMap<String, f64>,
    current: &BTreeMap<String, Option<f64>>,
) -> Vec<Regression> {
    baseline
        .iter()
        .filter_map(|(model, &base)| {
            let accuracy = current.get(model).copied().flatten();
            regression(figure, policy, model, base, accuracy)
        })
        .collect()
}

fn regression(
    figure: &str,
    policy: &RegressionPolicy,
    model: &str,
    base: f64,
    accuracy: Option<f64>,
) -> Option<Regression> {
    if !base.is_finite() {
        return None; // nothing to compare against
    }
    let (current, reason) = match accuracy.filter(|a| a.is_finite()) {
        None => (None, no_results_reason(figure, base, accuracy)),
        Some(acc) if base - acc > policy.max_drop + DROP_TOLERANCE => (
            Some(acc),
            format!(
                "{figure} {} is {} below the baseline {}",
                fmt_accuracy(acc),
                fmt_accuracy(base - acc),
                fmt_accuracy(base)
            ),
        ),
        Some(_) => return None,
    };
    Some(Regression { model: model.to_string(), baseline: base, current, reason })
}

fn no_results_reason(figure: &str, base: f64, accuracy: Option<f64>) -> String {
    match accuracy {
        Some(bad) => format!("produced no valid result ({figure} {bad}; baseline {})", fmt_accuracy(base)),
        None => format!("produced no results (baseline {})", fmt_accuracy(base)),
    }
}

/// Two decimals, or three when the third matters (0.60, 0.105): two alone could print a drop
/// just over the threshold as equal to it.
fn fmt_accuracy(value: f64) -> String {
    let three = format!("{value:.3}");
    match three.strip_suffix('0') {
        Some(two) => two.to_string(),
        None => three,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baseline_is_the_median_of_the_last_five() {
        assert_eq!(baseline(&[]), None);
        assert_eq!(baseline(&[0.5]), Some(0.5));
        assert_eq!(baseline(&[0.5, 0.7]), Some(0.6));
        assert_eq!(baseline(&[0.3, 0.9, 0.6]), Some(0.6));
        assert_eq!(baseline(&[0.4, 0.1, 0.8, 0.6]), Some(0.5));
        assert_eq!(baseline(&[0.9, 0.1, 0.5, 0.7, 0.3]), Some(0.5));
        // The sixth and seventh (oldest) values are outside the window.
        assert_eq!(baseline(&[0.9, 0.1, 0.5, 0.7, 0.3, 0.0, 0.0]), Some(0.5));
        assert_eq!(baseline(&[0.2, 0.2, 0.2, 0.8, 0.8, 0.8]), Some(0.2));
    }

    #[test]
    fn baseline_passes_over_values_that_are_not_numbers() {
        assert_eq!(baseline(&[f64::NAN]), None);
        assert_eq!(baseline(&[f64::NAN, 0.4, f64::INFINITY, 0.6]), Some(0.5));
        assert_eq!(baseline(&[0.1, f64::NAN, 0.2, 0.3, 0.4, 0.5, 0.9]), Some(0.3));
    }

    #[test]
    fn baselines_per_model_over_the_last_five_tests() {
        let test = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(m, a)| (m.to_string(), *a)).collect()
        };
        let tests = [
            test(&[("a", 0.6), ("new", 0.9)]),
            test(&[("a", 0.5)]),
            test(&[("a", 0.7), ("old", 0.1)]),
            test(&[("a", 0.6)]),
            test(&[("a", 0.6)]),
            test(&[("a", 0.0), ("gone", 0.5)]), // sixth newest: outside the window
        ];
        let expected: BTreeMap<String, f64> =
            [("a", 0.6), ("new", 0.9), ("old", 0.1)].iter().map(|(m, a)| (m.to_string(), *a)).collect();
        assert_eq!(baselines(&tests), expected);
        assert!(baselines(&[]).is_empty());
    }

    fn models<V: Copy>(pairs: &[(&str, V)]) -> BTreeMap<String, V> {
        pairs.iter().map(|(m, v)| (m.to_string(), *v)).collect()
    }

    #[test]
    fn a_drop_beyond_the_threshold_regresses() {
        let found = regressions(
            &RegressionPolicy::default(),
            &models(&[("qwen", 0.60)]),
            &models(&[("qwen", Some(0.42))]),
        );
        assert_eq!(
            found,
            [Regression {
                model: "qwen".to_string(),
                baseline: 0.60,
                current: Some(0.42),
                reason: "accuracy 0.42 is 0.18 below the baseline 0.60".to_string(),
            }]
        );
    }

    #[test]
    fn drops_within_the_threshold_and_improvements_do_not() {
        let policy = RegressionPolicy::default();
        let base = models(&[("a", 0.60), ("b", 0.80), ("c", 0.50)]);
        // 0.05 below, exactly 0.10 below (0.8 - 0.7 is 0.10000000000000009 in f64), and better.
        let current = models(&[("a", Some(0.55)), ("b", Some(0.70)), ("c", Some(0.75))]);
        assert_eq!(regressions(&policy, &base, &current), []);
    }

    #[test]
    fn the_threshold_is_configurable() {
        let strict = RegressionPolicy::new(0.02).expect("a valid threshold");
        let found = regressions(&strict, &models(&[("a", 0.60)]), &models(&[("a", Some(0.55))]));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].reason, "accuracy 0.55 is 0.05 below the baseline 0.60");
        // Three decimals when two would hide the difference from the threshold.
        let found =
            regressions(&RegressionPolicy::default(), &models(&[("a", 0.605)]), &models(&[("a", Some(0.5))]));
        assert_eq!(found[0].reason, "accuracy 0.50 is 0.105 below the baseline 0.605");
    }

    #[test]
    fn a_verifiers_test_is_judged_by_its_reward_and_says_so() {
        let policy = RegressionPolicy::default();
        let found = regressions_of("reward", &policy, &models(&[("a", 0.9)]), &models(&[("a", Some(0.5))]));
        assert_eq!(found[0].reason, "reward 0.50 is 0.40 below the baseline 0.90");
        let found =
            regressions_of("reward", &policy, &models(&[("a", 0.9)]), &models(&[("a", Some(f64::NAN))]));
        assert_eq!(found[0].reason, "produced no valid result (reward NaN; baseline 0.90)");
    }

    #[test]
    fn a_model_without_results_regresses() {
        let policy = RegressionPolicy::default();
        let base = models(&[("gone", 0.60), ("none", 0.70), ("nan", 0.50), ("ok", 0.5)]);
        let current = models(&[("none", None), ("nan", Some(f64::NAN)), ("ok", Some(0.5))]);
        let found = regressions(&policy, &base, &current);
        let summary: Vec<(&str, Option<f64>, &str)> =
            found.iter().map(|r| (r.model.as_str(), r.current, r.reason.as_str())).collect();
        assert_eq!(
            summary,
            [
                ("gone", None, "produced no results (baseline 0.60)"),
                ("nan", None, "produced no valid result (accuracy NaN; baseline 0.50)"),
                ("none", None, "produced no results (baseline 0.70)"),
            ]
        );
    }

    #[test]
    fn a_model_without_a_baseline_cannot_regress() {
        let policy = RegressionPolicy::default();
        let current = models(&[("fresh", Some(0.0)), ("silent", None)]);
        assert_eq!(regressions(&policy, &BTreeMap::new(), &current), []);
        let odd_base = models(&[("fresh", f64::NAN)]);
        assert_eq!(regressions(&policy, &odd_base, &current), []);
    }

    #[test]
    fn policy_thresholds_are_checked() {
        assert_eq!(RegressionPolicy::default().max_drop, 0.10);
        assert!(RegressionPolicy::new(0.0).is_ok());
        assert!(RegressionPolicy::new(1.0).is_ok());
        for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            assert!(RegressionPolicy::new(bad).is_err(), "{bad}");
        }
        assert_eq!(
            InvalidThreshold(-0.1).to_string(),
            "invalid regression threshold -0.1: expected a drop in accuracy between 0 and 1"
        );
    }

    #[test]
    fn policy_and_regressions_round_trip_through_json() {
        let policy: RegressionPolicy = serde_json::from_str("{}").expect("defaults");
        assert_eq!(policy, RegressionPolicy::default());
        let policy: RegressionPolicy = serde_json::from_str(r#"{"max_drop":0.05}"#).expect("set");
        assert_eq!(policy.max_drop, 0.05);
        let err = serde_json::from_str::<RegressionPolicy>(r#"{"max_drop":-1}"#).expect_err("bad");
        assert!(err.to_string().contains("invalid regression threshold -1"));
        let r = Regression {
            model: "m".to_string(),
            baseline: 0.6,
            current: None,
            reason: "produced no results (baseline 0.60)".to_string(),
        };
        let json = serde_json::to_string(&r).expect("serializes");
        assert_eq!(serde_json::from_str::<Regression>(&json).expect("parses"), r);
    }
}
