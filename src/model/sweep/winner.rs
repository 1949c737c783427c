//! A sweep's winner: the member whose best reading is best by the metric's goal. Recorded with
//! the sweep's move to `done`, it is what a run waiting for the sweep gets
//! (`{after.NAME.best_run_id}`, `{after.NAME.best_trained_weights}`, …).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Goal, Metric};

/// The winning member: its place, its run and its best value.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepWinner {
    pub k: u64,
    pub run: Uuid,
    pub value: f64,
}

/// The winner among `members` (k, run, the values of its series): the best of each member's
/// finite readings, best first by the goal, ties to the lowest k (the leaderboard's order).
/// None when no member has a finite reading.
pub fn winner(metric: &Metric, members: &[(u64, Uuid, Vec<f64>)]) -> Option<SweepWinner> {
    let better = |a: f64, b: f64| match metric.goal {
        Goal::Minimize => a < b,
        Goal::Maximize => a > b,
    };
    let mut best: Option<SweepWinner> = None;
    for (k, run, values) in members {
        let Some(value) = metric.best(values) else { continue };
        let wins = match &best {
            None => true,
            Some(held) => better(value, held.value) || (value == held.value && *k < held.k),
        };
        if wins {
            best = Some(SweepWinner { k: *k, run: *run, value });
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(goal: Goal) -> Metric {
        Metric { name: "loss".into(), goal, target: None }
    }

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    #[test]
    fn the_best_reading_wins_by_the_goal_and_ties_go_to_the_lowest_k() {
        let members = vec![
            (0, id(0), vec![0.9, 0.5]),
            (1, id(1), vec![0.7, 0.2, 0.4]),
            (2, id(2), vec![]),
            (3, id(3), vec![f64::NAN, 0.95]),
        ];
        assert_eq!(
            winner(&metric(Goal::Minimize), &members),
            Some(SweepWinner { k: 1, run: id(1), value: 0.2 })
        );
        assert_eq!(
            winner(&metric(Goal::Maximize), &members),
            Some(SweepWinner { k: 3, run: id(3), value: 0.95 })
        );
        let tied = vec![(4, id(4), vec![0.3]), (2, id(2), vec![0.3])];
        assert_eq!(winner(&metric(Goal::Minimize), &tied).map(|w| w.k), Some(2));
    }

    #[test]
    fn no_finite_reading_means_no_winner() {
        let members = vec![(0, id(0), vec![]), (1, id(1), vec![f64::NAN, f64::INFINITY])];
        assert_eq!(winner(&metric(Goal::Minimize), &members), None);
        assert_eq!(winner(&metric(Goal::Maximize), &[]), None);
    }
}
