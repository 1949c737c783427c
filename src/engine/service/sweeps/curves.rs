//! A sweep's leaderboard with every member's curve of its metric, for the dashboard's chart.
//! The leaderboard is summed up in the store; the curves come from one read of every member's
//! series, each thinned to a bounded number of points (`model::metric_point::downsample`), so a sweep of 1,000 members
//! draws at most [`CHART_POINTS`] points, however long its members trained.

use serde::Serialize;

use super::{MemberStatus, MetricSeries, SweepStatus};
use crate::engine::service::{Result, Service};
use crate::model::MetricPoint;
use crate::model::metric_point::downsample;

/// The most points a sweep's chart draws, over all its members.
pub const CHART_POINTS: usize = 16_000;
/// The most points one member's curve has, however few members the sweep has.
pub const MEMBER_POINTS: usize = 400;
/// The fewest points a long curve is thinned to, however many members the sweep has.
const MIN_MEMBER_POINTS: usize = 16;

/// A sweep's leaderboard with its members' curves: each member with readings has its
/// [`Curve`] (`MemberStatus::curve`).
#[derive(Clone, Debug, Serialize)]
pub struct SweepCurves {
    pub status: SweepStatus,
    /// The most points a curve was given.
    pub points_per_member: usize,
}

/// A member's series of its sweep's metric, by step, as a chart draws it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Curve {
    /// Its points, ordered by step: all of them, or its first, its last (where an
    /// early-terminated member was stopped) and the lowest and highest of each stretch between.
    pub points: Vec<MetricPoint>,
    /// How many readings its series has (more than `points` when it was thinned).
    pub readings: usize,
}

impl SweepCurves {
    /// The members with a curve, in the leaderboard's order (best first).
    pub fn curves(&self) -> impl Iterator<Item = (&MemberStatus, &Curve)> {
        self.status.leaderboard.iter().filter_map(|member| Some((member, member.curve.as_ref()?)))
    }
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
        let mut status = self.sweep_status_with(&sweep, self).await?;
        let mut series = match &status.metric {
            Some(metric) => self.members_series(sweep.id, &[], metric).await?,
            None => Default::default(),
        };
        for member in &mut status.leaderboard {
            // Not finite: left out, as W&B (and the leaderboard) leave such readings out.
            let finite: Vec<MetricPoint> = series
                .remove(&member.run)
                .unwrap_or_default()
                .into_iter()
                .filter(|p| p.value.is_finite())
                .collect();
            member.curve = (!finite.is_empty())
                .then(|| Curve { readings: finite.len(), points: downsample(&finite, per_member) });
        }
        Ok(SweepCurves { status, points_per_member: per_member })
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
