//! A run's headline metrics: the few metrics, by name, that the report, `run status` and the run
//! page show of it. Which ones is the workflow's `report:` list, else the sweep's metric, else
//! the W&B keys every Atropos trainer logs; each is read like any other metric by name.

use serde::{Deserialize, Serialize};

/// What a run shows when neither its workflow nor its sweep names a headline metric: the keys
/// Atropos trainers log to W&B.
pub const DEFAULT_HEADLINE: [&str; 4] =
    ["train/reward_mean", "train/percent_correct", "eval/percent_correct", "train/loss"];

/// The last reading of one headline metric: its latest attempt's highest step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadlineValue {
    pub name: String,
    pub step: i64,
    pub value: f64,
}

/// The names a run's headline is made of: `report` (its workflow's), else its sweep's metric,
/// else [`DEFAULT_HEADLINE`].
pub fn headline_names(report: &[String], sweep_metric: Option<&str>) -> Vec<String> {
    if !report.is_empty() {
        return report.to_vec();
    }
    match sweep_metric {
        Some(metric) => vec![metric.to_string()],
        None => DEFAULT_HEADLINE.map(str::to_string).to_vec(),
    }
}

/// `env/all/reward/total 0.610 (step 120)`; several at one step share it (`a 0.610, b 0.720
/// (step 120)`), at different steps each says its own. None when there is no value.
pub fn headline_line(values: &[HeadlineValue]) -> Option<String> {
    let first = values.first()?;
    let one_step = values.iter().all(|v| v.step == first.step);
    let parts: Vec<String> = values
        .iter()
        .map(|v| match one_step {
            true => format!("{} {}", v.name, number(v.value)),
            false => format!("{} {} (step {})", v.name, number(v.value), v.step),
        })
        .collect();
    Some(match one_step {
        true => format!("{} (step {})", parts.join(", "), first.step),
        false => parts.join(", "),
    })
}

/// Three decimals for values of everyday size, scientific notation for the very large or small
/// (a loss of 2e-7 is not `0.000`).
fn number(value: f64) -> String {
    let magnitude = value.abs();
    if value == 0.0 || (1e-3..1e6).contains(&magnitude) {
        format!("{value:.3}")
    } else {
        format!("{value:.3e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(name: &str, step: i64, value: f64) -> HeadlineValue {
        HeadlineValue { name: name.into(), step, value }
    }

    #[test]
    fn the_workflow_s_list_wins_then_the_sweep_s_metric_then_the_w_and_b_keys() {
        let report = vec!["env/all/reward/total".to_string()];
        assert_eq!(headline_names(&report, Some("loss")), report);
        assert_eq!(headline_names(&[], Some("loss")), ["loss"]);
        assert_eq!(headline_names(&[], None), DEFAULT_HEADLINE);
    }

    #[test]
    fn a_line_names_each_metric_and_its_step() {
        assert_eq!(headline_line(&[]), None);
        assert_eq!(
            headline_line(&[value("env/all/reward/total", 120, 0.61)]).unwrap(),
            "env/all/reward/total 0.610 (step 120)"
        );
        assert_eq!(
            headline_line(&[value("a", 3, 0.5), value("b", 3, 2.0)]).unwrap(),
            "a 0.500, b 2.000 (step 3)"
        );
        assert_eq!(
            headline_line(&[value("a", 3, 0.5), value("b", 2, 2e-7)]).unwrap(),
            "a 0.500 (step 3), b 2.000e-7 (step 2)"
        );
    }
}
