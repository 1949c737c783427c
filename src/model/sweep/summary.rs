//! A member's series at a glance, as the leaderboard shows it: how many readings, the best of
//! them by the metric's goal (the first one to reach it), and the last.

use super::spec::Goal;
use crate::model::MetricPoint;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeriesSummary {
    /// Readings in the series (hyperband's iterations).
    pub count: usize,
    /// The best reading by the goal; of several equal ones, the one at the lowest step.
    pub best: MetricPoint,
    /// The reading at the highest step.
    pub last: MetricPoint,
}

impl SeriesSummary {
    /// The summary of `series` (ordered by step, as `model::metric_point::series` gives it),
    /// readings that are not finite left out; None when none is left.
    pub fn of(series: &[MetricPoint], goal: Goal) -> Option<SeriesSummary> {
        let mut finite = series.iter().filter(|point| point.value.is_finite());
        let first = *finite.next()?;
        let (mut count, mut best, mut last) = (1, first, first);
        for point in finite {
            let better = match goal {
                Goal::Minimize => point.value < best.value,
                Goal::Maximize => point.value > best.value,
            };
            if better {
                best = *point;
            }
            last = *point;
            count += 1;
        }
        Some(SeriesSummary { count, best, last })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(step: i64, value: f64) -> MetricPoint {
        MetricPoint { attempt: 1, step, value }
    }

    #[test]
    fn the_best_is_the_first_to_reach_it_and_not_finite_readings_do_not_count() {
        let series = [p(1, 0.5), p(2, f64::NAN), p(3, 0.2), p(4, 0.9), p(5, 0.2), p(6, f64::INFINITY)];
        let low = SeriesSummary::of(&series, Goal::Minimize).unwrap();
        assert_eq!((low.count, low.best.step, low.last.step), (4, 3, 5));
        let high = SeriesSummary::of(&series, Goal::Maximize).unwrap();
        assert_eq!((high.best.step, high.best.value), (4, 0.9));
        assert_eq!(SeriesSummary::of(&[p(1, f64::NAN)], Goal::Minimize), None);
        assert_eq!(SeriesSummary::of(&[], Goal::Maximize), None);
    }
}
