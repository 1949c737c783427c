//! A run's training progress: the recorded changes of step, and what surfaces show of them
//! (step of total, rate, time left). Pure.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Millis;

/// One change of step, as recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressPoint {
    pub attempt: i64,
    pub step: i64,
    pub total: Option<i64>,
    /// When the step was first seen.
    pub at: Millis,
}

/// What status shows: where the run is, how fast it goes and when it should be done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub step: i64,
    pub total: Option<i64>,
    /// step / total, when the total is known.
    pub fraction: Option<f64>,
    /// Over the attempt so far (first recorded step to the last change).
    pub steps_per_min: Option<f64>,
    pub eta_seconds: Option<i64>,
    /// When the step last changed (ms since the epoch).
    pub updated_at: Millis,
}

impl Progress {
    /// The summary of one attempt's points (oldest first); None before its first step.
    pub fn of(points: &[ProgressPoint]) -> Option<Progress> {
        let last = points.last()?;
        let first = points.first()?;
        let total = points.iter().rev().find_map(|p| p.total);
        let fraction = total.filter(|t| *t > 0).map(|t| last.step as f64 / t as f64);
        let minutes = (last.at - first.at) as f64 / 60_000.0;
        let steps_per_min =
            (minutes > 0.0 && last.step > first.step).then(|| (last.step - first.step) as f64 / minutes);
        let eta_seconds = match (total, steps_per_min) {
            (Some(total), Some(rate)) if rate > 0.0 => {
                Some((((total - last.step).max(0) as f64) / rate * 60.0).round() as i64)
            }
            _ => None,
        };
        Some(Progress { step: last.step, total, fraction, steps_per_min, eta_seconds, updated_at: last.at })
    }

    /// `step 420 / 2500 (16.8%), 3.1 steps/min, ETA 13h 40m`.
    pub fn line(&self) -> String {
        let mut text = match (self.total, self.fraction) {
            (Some(total), Some(fraction)) => {
                format!("step {} / {total} ({:.1}%)", self.step, fraction * 100.0)
            }
            (Some(total), None) => format!("step {} / {total}", self.step),
            _ => format!("step {}", self.step),
        };
        if let Some(rate) = self.steps_per_min {
            text.push_str(&format!(", {rate:.1} steps/min"));
        }
        if let Some(eta) = self.eta_seconds {
            text.push_str(&format!(", ETA {}", span(Duration::from_secs(eta.max(0) as u64))));
        }
        text
    }

    /// `420/2500` for a listing column.
    pub fn short(&self) -> String {
        match self.total {
            Some(total) => format!("{}/{total}", self.step),
            None => self.step.to_string(),
        }
    }
}

/// A duration for people (the one format: `crate::text::span`).
pub use crate::text::span;

#[cfg(test)]
mod tests {
    use super::*;

    fn point(step: i64, at_min: f64) -> ProgressPoint {
        ProgressPoint { attempt: 1, step, total: Some(2500), at: (at_min * 60_000.0) as Millis }
    }

    #[test]
    fn summary_has_rate_fraction_and_eta() {
        let p = Progress::of(&[point(10, 0.0), point(420, 410.0 / 3.1)]).unwrap();
        assert_eq!(p.step, 420);
        assert!((p.steps_per_min.unwrap() - 3.1).abs() < 1e-3);
        assert_eq!(p.line(), "step 420 / 2500 (16.8%), 3.1 steps/min, ETA 11h 10m");
        assert_eq!(p.short(), "420/2500");
    }

    #[test]
    fn one_point_has_no_rate_and_none_has_no_summary() {
        assert_eq!(Progress::of(&[]), None);
        let p = Progress::of(&[ProgressPoint { attempt: 1, step: 3, total: None, at: 5 }]).unwrap();
        assert_eq!(p.line(), "step 3");
        assert_eq!((p.fraction, p.steps_per_min, p.eta_seconds), (None, None, None));
    }
}
