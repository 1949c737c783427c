//! The bayes module against values computed by scipy, scikit-learn and W&B's `sweeps` 0.3.0
//! (`fixtures.json`, written by tests/python/bayes_fixtures.py), and its suggestions' rules.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::gp::{Fitted, log_likelihood};
use super::special::*;
use super::{Kernel, Model, Observed, Seen, best_candidate, imputed_model, space, suggest};
use crate::model::sweep::SweepSpec;

fn fixtures() -> Value {
    serde_json::from_str(include_str!("fixtures.json")).unwrap()
}

fn f(value: &Value) -> f64 {
    value.as_f64().unwrap()
}

fn rows(value: &Value) -> Vec<Vec<f64>> {
    value.as_array().unwrap().iter().map(|row| row.as_array().unwrap().iter().map(f).collect()).collect()
}

fn close(got: f64, want: f64, rel: f64, what: &str) {
    let tolerance = rel * want.abs().max(1e-300) + 1e-300;
    assert!((got - want).abs() <= tolerance || got == want, "{what}: got {got:e}, want {want:e}");
}

#[test]
fn special_functions_match_scipy() {
    let fx = fixtures();
    for row in fx["normal_cdf"].as_array().unwrap() {
        // Far in the tail exp(−z²/2) itself loses a few digits.
        close(normal_cdf(f(&row[0])), f(&row[1]), 1e-11, &format!("normal_cdf({})", row[0]));
    }
    for row in fx["normal_quantile"].as_array().unwrap() {
        close(normal_quantile(f(&row[0])), f(&row[1]), 1e-12, &format!("normal_quantile({})", row[0]));
    }
    for row in fx["ln_gamma"].as_array().unwrap() {
        // ln Γ is 0 at 1 and 2: there the error is absolute.
        let (got, want) = (ln_gamma(f(&row[0])), f(&row[1]));
        assert!((got - want).abs() <= 1e-12 * want.abs().max(1.0), "ln_gamma({}): {got} vs {want}", row[0]);
    }
    for row in fx["beta_cdf"].as_array().unwrap() {
        let (x, a, b) = (f(&row[0]), f(&row[1]), f(&row[2]));
        close(beta_cdf(x, a, b), f(&row[3]), 1e-9, &format!("beta_cdf({x}, {a}, {b})"));
    }
    for row in fx["beta_quantile"].as_array().unwrap() {
        let (p, a, b) = (f(&row[0]), f(&row[1]), f(&row[2]));
        close(beta_quantile(p, a, b), f(&row[3]), 1e-9, &format!("beta_quantile({p}, {a}, {b})"));
    }
    assert!(normal_quantile(0.0).is_infinite() && normal_quantile(2.0).is_nan());
}

#[test]
fn the_process_matches_scikit_learn() {
    let fx = &fixtures()["gp"];
    let (x, y, test) =
        (rows(&fx["x"]), fx["y"].as_array().unwrap().iter().map(f).collect::<Vec<_>>(), rows(&fx["test"]));
    for case in fx["fixed"].as_array().unwrap() {
        let l = f(&case["length_scale"]);
        close(log_likelihood(&x, &y, l), f(&case["log_likelihood"]), 1e-9, &format!("lml at {l}"));
    }
    // Fitted: the likelihood's maximum is at least scikit-learn's (whose optimizer may stop
    // short of it), at the same length scale within the optimizer's tolerance.
    let fitted = Fitted::fit(&x, &y).unwrap();
    assert!(fitted.log_likelihood >= f(&fx["fitted_log_likelihood"]) - 1e-7, "{}", fitted.log_likelihood);
    close(fitted.length_scale, f(&fx["fitted_length_scale"]), 1e-3, "fitted length scale");
    // With a white-noise level fitted too, the likelihood is at least W&B's kernel's (its
    // nugget is one of the levels tried).
    let noisy = Fitted::fit_noisy(&x, &y).unwrap();
    assert!(
        noisy.log_likelihood >= fitted.log_likelihood - 1e-9,
        "{} vs {}",
        noisy.log_likelihood,
        fitted.log_likelihood
    );
    // Predictions at a fixed length scale: refit there through the same code path.
    for case in fx["fixed"].as_array().unwrap() {
        let l = f(&case["length_scale"]);
        let at = Fitted::at(&x, &y, l).unwrap();
        for (i, point) in test.iter().enumerate() {
            let (mean, std) = at.predict(point);
            close(mean, f(&case["mean"][i]), 1e-7, &format!("mean at {l}"));
            assert!((std - f(&case["std"][i])).abs() < 1e-6, "std at {l}: {std} vs {}", case["std"][i]);
        }
    }
}

/// W&B's `next_sample` on given candidates, with 0 to 3 members in flight imputed: the same
/// candidate is chosen (or, should the two optimizers' length scales differ, one whose
/// expected improvement is as large).
#[test]
fn the_choice_matches_w_and_b_s_next_sample() {
    for (i, case) in fixtures()["next_sample"].as_array().unwrap().iter().enumerate() {
        let (x, current, test) = (rows(&case["x"]), rows(&case["current"]), rows(&case["test"]));
        let y: Vec<f64> = case["y"].as_array().unwrap().iter().map(f).collect();
        let best = y.iter().copied().fold(f64::INFINITY, f64::min);
        let model: Model = imputed_model(x, y, current, Kernel::WandB).unwrap();
        let chosen = best_candidate(&model, best, &test).unwrap();
        let want = case["index"].as_u64().unwrap() as usize;
        assert!(!case["poor_fit"].as_bool().unwrap());
        if chosen != want {
            let ei = |at: usize| {
                super::expected_improvement(&model.fitted, &test[at], (best - model.mean) / model.std)
            };
            close(ei(chosen), ei(want), 1e-3, &format!("case {i}: candidate {chosen} against W&B's {want}"));
        }
    }
}

#[test]
fn the_unit_cube_encodes_parameters_as_w_and_b_does() {
    let fx = fixtures();
    for (name, case) in fx["space"].as_object().unwrap() {
        let text = format!(
            "method: bayes\nmetric: {{name: loss}}\nrun_cap: 5\nworkflow: w\nparameters:\n  {name}: {}\n",
            case["config"]
        );
        let spec = SweepSpec::parse(&text).unwrap_or_else(|err| panic!("{name}: {err}"));
        let domain = &spec.parameters[0].domain;
        for (i, u) in case["u"].as_array().unwrap().iter().enumerate() {
            let value = space::decode(domain, f(u));
            let want = &case["values"][i];
            match (value.as_f64(), want.as_f64()) {
                (Some(got), Some(w)) => close(got, w, 1e-9, &format!("{name} at {u}")),
                _ => assert_eq!(&value, want, "{name} at {u}"),
            }
            assert_eq!(value.is_i64(), want.is_i64(), "{name} at {u}: {value} is an integer as W&B's {want}");
            let encoded = space::encode(domain, &value).unwrap();
            close(encoded, f(&case["encoded"][i]), 1e-9, &format!("{name}: encoding {value}"));
        }
    }
}

fn spec(text: &str) -> SweepSpec {
    SweepSpec::parse(text).unwrap()
}

const SPEC: &str = "method: bayes\nmetric: {name: loss}\nrun_cap: 20\nmax_live: 4\nworkflow: w\nparameters:\n  lr: {distribution: log_uniform_values, min: 1.0e-5, max: 1.0e-1}\n  x: {min: 0.0, max: 1.0}\n  opt: {values: [adam, sgd]}\n  fixed: {value: 3}\n";

fn observed(member: &crate::model::sweep::Configuration, seen: Seen) -> Observed {
    Observed { values: member.values(), seen }
}

fn loss(values: &BTreeMap<String, Value>) -> f64 {
    let lr = values["lr"].as_f64().unwrap();
    let x = values["x"].as_f64().unwrap();
    let opt = if values["opt"] == json!("adam") { 0.0 } else { 0.5 };
    (lr.log10() + 3.0).powi(2) + (x - 0.3).powi(2) + opt
}

/// Four suggested at once (three in flight each time): four different configurations, each
/// a pure function of the sweep, what came before and k.
#[test]
fn parallel_suggestions_differ_and_repeat() {
    let spec = spec(SPEC);
    let mut members: Vec<Observed> = Vec::new();
    for k in 0..6 {
        let member = suggest(&spec, &members, k);
        let value = loss(&member.values());
        members.push(observed(&member, Seen::Ended { counts: true, best: Some(value), worst: Some(value) }));
    }
    let mut batch = Vec::new();
    for k in 6..10 {
        let member = suggest(&spec, &members, k);
        assert_eq!(member, suggest(&spec, &members, k), "member {k} again");
        assert_eq!(member.values()["fixed"], json!(3));
        assert!(
            !batch.iter().any(|m: &crate::model::sweep::Configuration| m.values() == member.values()),
            "member {k} repeats one in flight"
        );
        members.push(observed(&member, Seen::InFlight));
        batch.push(member);
    }
}

/// The search does better than its first random draws on a smooth function (the benchmark,
/// `bench.rs`, measures how much better, against W&B's).
#[test]
fn the_search_improves_on_random_draws() {
    let spec = spec(SPEC);
    let mut members: Vec<Observed> = Vec::new();
    let mut values = Vec::new();
    for k in 0..20 {
        let member = suggest(&spec, &members, k);
        let value = loss(&member.values());
        values.push(value);
        members.push(observed(&member, Seen::Ended { counts: true, best: Some(value), worst: Some(value) }));
    }
    let first = values[..4].iter().copied().fold(f64::INFINITY, f64::min);
    let best = values.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(best < first / 2.0, "best {best}, first draws' best {first}: {values:?}");
}

/// Failed members and members without a reading take the worst value; with fewer than two
/// members that count, the point is random (and so still a valid configuration).
#[test]
fn members_without_a_value_take_the_worst() {
    let spec = spec(SPEC);
    let first = suggest(&spec, &[], 0);
    let failed = observed(&first, Seen::Ended { counts: false, best: Some(0.0), worst: Some(9.0) });
    let silent = observed(&suggest(&spec, &[], 1), Seen::Ended { counts: true, best: None, worst: None });
    let (samples, current) = super::gp_data(
        &spec,
        &spec.parameters.iter().filter(|p| space::searched(&p.domain)).collect::<Vec<_>>(),
        &[failed.clone(), silent],
    );
    assert!(current.is_empty());
    assert_eq!(samples.iter().map(|(_, y)| *y).collect::<Vec<_>>(), vec![9.0, 9.0]);
    let next = suggest(&spec, &[failed], 2);
    assert_eq!(next.assignments.len(), 4);
}
