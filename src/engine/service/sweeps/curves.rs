//! A sweep's leaderboard with every member's curve of its metric, for the dashboard's chart.
//! The leaderboard is summed up in the store; the curves come from one read of every member's
//! series, each thinned to a bounded number of points (`model::metric_point::downsample`), so a sweep of 1,000 members
//! draws at most [`CHART_POINTS`] points, however long its members trained.

use serde::Serialize;
use uuid::Uuid;

use super::MetricSeries;
use crate::engine::service::{Result, Service};
use crate::model::MetricPoint;
use crate::model::metric_point::downsample;

use super::SweepStatus;

/// The most points a sweep's chart draws, over all its members.
pub const CHART_POINTS: usize = 16_000;
/// The most points one member's curve has, however few members the sweep has.
pub const MEMBER_POINTS: usize = 400;
/// The fewest points a long curve is thinned to, however many members the sweep has.
const MIN_MEMBER_POINTS: usize = 16;

/// A sweep's leaderboard and its members' curves.
#[derive(Clone, Debug, Serialize)]
pub struct SweepCurves {
    pub status: SweepStatus,
    /// One per member with readings, in the leaderboard's order (best first).
    pub curves: Vec<MemberCurve>,
    /// The most points a curve was given.
    pub points_per_member: usize,
}

/// One member's series of the sweep's metric, by step.
#[derive(Clone, Debug, Serialize)]
pub struct MemberCurve {
    pub k: u64,
    pub run: Uuid,
    /// Its points, ordered by step: all of them, or its first, its last (where an
    /// early-terminated member was stopped) and the lowest and highest of each stretch between.
    pub points: Vec<MetricPoint>,
    /// How many readings its series has (more than `points` when it was thinned).
    pub readings: usize,
}

/// The most points each of `members` curves gets.
pub fn points_per_member(members: usize) -> usize {
    (CHART_POINTS / members.max(1)).clamp(MIN_MEMBER_POINTS, MEMBER_POINTS)
}

impl Service {
    /// The leaderboard of the sweep `prefix` names, with every member's curve of its metric.
    pub async fn sweep_curves(&self, prefix: &str) -> Result<SweepCurves> {
        let sweep = self.resolve_sweep(prefix).await?;
        let per_member = points_per_member(sweep.members as usize);
        let status = self.sweep_status_with(&sweep, self).await?;
        let mut series = match &status.metric {
            Some(metric) => self.members_series(sweep.id, &[], metric).await?,
            None => Default::default(),
        };
        let curves = status
            .leaderboard
            .iter()
            .filter_map(|member| {
                // Not finite: left out, as W&B (and the leaderboard) leave such readings out.
                let finite: Vec<MetricPoint> =
                    series.remove(&member.run)?.into_iter().filter(|p| p.value.is_finite()).collect();
                (!finite.is_empty()).then(|| MemberCurve {
                    k: member.k,
                    run: member.run,
                    readings: finite.len(),
                    points: downsample(&finite, per_member),
                })
            })
            .collect();
        Ok(SweepCurves { status, curves, points_per_member: per_member })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_stays_bounded_however_many_members() {
        assert_eq!(points_per_member(1), MEMBER_POINTS);
        assert_eq!(points_per_member(0), MEMBER_POINTS);
        assert_eq!(points_per_member(100), 160);
        assert_eq!(points_per_member(1_000), MIN_MEMBER_POINTS);
        for members in [1, 6, 40, 41, 1_000] {
            assert!(points_per_member(members) * members <= CHART_POINTS.max(MIN_MEMBER_POINTS * members));
        }
    }
}
