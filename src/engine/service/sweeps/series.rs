//! Where a sweep's members' metric readings come from: a trait, so the decider and the
//! leaderboard read through one door and a test can feed them series of its own.

use std::collections::HashMap;

use async_trait::async_trait;
use uuid::Uuid;

use crate::engine::service::{Result, Service};
use crate::model::sweep::{Goal, SeriesSummary};
use crate::model::{MetricPoint, Millis};

#[async_trait]
pub trait MetricSeries: Send + Sync {
    /// Run `run`'s series of metric `name`: one point per step, ordered by step, a resumed
    /// attempt's readings over the steps it rewound.
    async fn series(&self, run: Uuid, name: &str) -> Result<Vec<MetricPoint>>;
    /// The runs with a reading recorded after `after` (None: cannot tell, read them all).
    async fn runs_with_readings_since(&self, after: Millis) -> Result<Option<Vec<Uuid>>>;
    /// The series of `runs`, members of sweep `sweep` (a run without readings may be absent).
    async fn members_series(
        &self,
        _sweep: Uuid,
        runs: &[Uuid],
        name: &str,
    ) -> Result<HashMap<Uuid, Vec<MetricPoint>>> {
        let mut all = HashMap::with_capacity(runs.len());
        for run in runs {
            all.insert(*run, self.series(*run, name).await?);
        }
        Ok(all)
    }
    /// The series of `runs` at a glance by `goal`, as the leaderboard shows them (a run without
    /// readings may be absent).
    async fn members_summaries(
        &self,
        sweep: Uuid,
        runs: &[Uuid],
        name: &str,
        goal: Goal,
    ) -> Result<HashMap<Uuid, SeriesSummary>> {
        let series = self.members_series(sweep, runs, name).await?;
        Ok(series
            .into_iter()
            .filter_map(|(run, points)| Some((run, SeriesSummary::of(&points, goal)?)))
            .collect())
    }
}

/// The store's metrics by name.
#[async_trait]
impl MetricSeries for Service {
    async fn series(&self, run: Uuid, name: &str) -> Result<Vec<MetricPoint>> {
        self.run_metric_series(run, name).await
    }

    async fn runs_with_readings_since(&self, after: Millis) -> Result<Option<Vec<Uuid>>> {
        Ok(Some(self.runs_with_metrics_since(after).await?))
    }

    /// One read for the whole sweep, however many members it has.
    async fn members_series(
        &self,
        sweep: Uuid,
        _runs: &[Uuid],
        name: &str,
    ) -> Result<HashMap<Uuid, Vec<MetricPoint>>> {
        Ok(self.store.member_series(sweep, name).await?)
    }

    /// Summed up in the store, without reading the series: the leaderboard of a big sweep
    /// costs its members, not their readings.
    async fn members_summaries(
        &self,
        sweep: Uuid,
        _runs: &[Uuid],
        name: &str,
        goal: Goal,
    ) -> Result<HashMap<Uuid, SeriesSummary>> {
        Ok(self.store.member_summaries(sweep, name, goal).await?)
    }
}
