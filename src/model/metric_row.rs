//! Training-metric history: one reading of a run's W&B metrics per training step, as the daemon
//! stored it while the run ran, so results keep their curve after W&B is gone.

use serde::{Deserialize, Serialize};

use super::Millis;

/// A run's metrics at one training step. Any metric the run did not log at that step is `None`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricRow {
    pub step: i64,
    /// `train/reward_mean`
    pub reward_mean: Option<f64>,
    /// `train/percent_correct`
    pub percent_correct: Option<f64>,
    /// `eval/percent_correct`
    pub eval_percent_correct: Option<f64>,
    /// `train/loss` (or `loss`)
    pub loss: Option<f64>,
    /// When the daemon last read this step from W&B, unix milliseconds.
    pub recorded_at: Millis,
}

impl MetricRow {
    /// Whether the row holds any metric at all (W&B history rows of other keys hold none).
    pub fn has_metrics(&self) -> bool {
        self.reward_mean.is_some()
            || self.percent_correct.is_some()
            || self.eval_percent_correct.is_some()
            || self.loss.is_some()
    }
}

/// The metric names a `MetricRow` is made of (W&B's history keys), each with its field; `loss`
/// takes `train/loss` and, at a step without it, `loss`.
pub const ROW_METRICS: &[&str] =
    &["train/reward_mean", "train/percent_correct", "eval/percent_correct", "train/loss", "loss"];

impl MetricRow {
    /// The rows of the readings of `ROW_METRICS` (`(name, step, value, recorded_at)`, any order,
    /// one per name and step): one row per step that holds any, ordered by step; a row's
    /// `recorded_at` is its newest reading's.
    pub fn from_readings<'a>(
        readings: impl IntoIterator<Item = (&'a str, i64, f64, Millis)>,
    ) -> Vec<MetricRow> {
        let mut by_step = std::collections::BTreeMap::<i64, MetricRow>::new();
        let mut plain_loss = std::collections::BTreeMap::<i64, f64>::new();
        for (name, step, value, at) in readings {
            let row = by_step.entry(step).or_insert_with(|| MetricRow { step, ..MetricRow::default() });
            match name {
                "train/reward_mean" => row.reward_mean = Some(value),
                "train/percent_correct" => row.percent_correct = Some(value),
                "eval/percent_correct" => row.eval_percent_correct = Some(value),
                "train/loss" => row.loss = Some(value),
                "loss" => {
                    plain_loss.insert(step, value);
                }
                _ => {}
            }
            row.recorded_at = row.recorded_at.max(at);
        }
        for (step, value) in plain_loss {
            if let Some(row) = by_step.get_mut(&step) {
                row.loss = row.loss.or(Some(value));
            }
        }
        by_step.into_values().filter(MetricRow::has_metrics).collect()
    }
}

/// About `count` rows spread evenly over `rows` (ordered by step), always including the first and
/// the last: the short curve results show, as the reference tool's `history(samples=10)` does.
pub fn sample_evenly<T: Clone>(rows: &[T], count: usize) -> Vec<T> {
    if rows.len() <= count {
        return rows.to_vec();
    }
    if count <= 1 {
        // One row: the latest is the one that says where the training got to.
        return rows.last().cloned().into_iter().collect();
    }
    let last = rows.len() - 1;
    // Index i * last / (count - 1) for i in 0..count: strictly increasing because last >= count,
    // so no row is taken twice, and i = count - 1 lands on the last row exactly.
    (0..count).map(|i| rows[i * last / (count - 1)].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_gather_a_steps_readings_by_name() {
        let readings = [
            ("train/reward_mean", 2, 0.5, 10),
            ("loss", 2, 3.0, 12),
            ("eval/percent_correct", 0, 0.25, 5),
            ("train/loss", 0, 1.0, 5),
            ("loss", 0, 9.0, 5),
            ("env/all/reward/total", 4, 1.0, 20),
        ];
        let rows = MetricRow::from_readings(readings);
        assert_eq!(
            rows,
            vec![
                MetricRow {
                    step: 0,
                    eval_percent_correct: Some(0.25),
                    loss: Some(1.0),
                    recorded_at: 5,
                    ..MetricRow::default()
                },
                MetricRow {
                    step: 2,
                    reward_mean: Some(0.5),
                    loss: Some(3.0),
                    recorded_at: 12,
                    ..MetricRow::default()
                },
            ]
        );
    }

    #[test]
    fn short_series_are_returned_whole() {
        let rows: Vec<i64> = (0..7).collect();
        assert_eq!(sample_evenly(&rows, 10), rows);
        assert_eq!(sample_evenly(&rows[..0], 10), Vec::<i64>::new());
        assert_eq!(sample_evenly(&rows, 7), rows);
    }

    #[test]
    fn long_series_keep_first_and_last_evenly_spaced() {
        let rows: Vec<i64> = (0..100).collect();
        let sampled = sample_evenly(&rows, 10);
        assert_eq!(sampled, vec![0, 11, 22, 33, 44, 55, 66, 77, 88, 99]);
        let rows: Vec<i64> = (0..11).collect();
        assert_eq!(sample_evenly(&rows, 10), vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 10]);
    }

    #[test]
    fn samples_are_distinct_increasing_and_end_with_the_last() {
        for len in 0..200usize {
            let rows: Vec<usize> = (0..len).collect();
            for count in 0..15 {
                let sampled = sample_evenly(&rows, count);
                assert!(sampled.len() <= count.max(1), "{len} {count}");
                assert!(sampled.windows(2).all(|w| w[0] < w[1]), "{len} {count}: {sampled:?}");
                if len > 0 {
                    assert_eq!(sampled.last(), rows.last(), "{len} {count}");
                    if len > count && count > 1 {
                        assert_eq!(sampled.len(), count);
                        assert_eq!(sampled[0], 0);
                    }
                } else {
                    assert!(sampled.is_empty());
                }
            }
        }
    }
}
