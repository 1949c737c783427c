//! Where a sweep's members' metric readings come from: a trait, so the decider and the
//! leaderboard read through one door and a test can feed them series of its own.

use async_trait::async_trait;
use uuid::Uuid;

use crate::engine::service::{Result, Service};
use crate::model::Millis;

/// One reading of a metric: the member's attempt, its step and the value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reading {
    pub attempt: u32,
    pub step: i64,
    pub value: f64,
}

#[async_trait]
pub trait MetricSeries: Send + Sync {
    /// Run `run`'s readings of metric `name`, ordered by step.
    async fn series(&self, run: Uuid, name: &str) -> Result<Vec<Reading>>;
    /// The runs with a reading recorded after `after` (None: cannot tell, read them all).
    async fn runs_with_readings_since(&self, after: Millis) -> Result<Option<Vec<Uuid>>>;
}

/// The store's metrics by name. Until they land (the metrics branch: `Service::metric_series`
/// and `MetricStore::metric_runs_since`), a member has no readings: the leaderboard shows none
/// and the decider stops nobody.
#[async_trait]
impl MetricSeries for Service {
    async fn series(&self, _run: Uuid, _name: &str) -> Result<Vec<Reading>> {
        Ok(Vec::new())
    }

    async fn runs_with_readings_since(&self, _after: Millis) -> Result<Option<Vec<Uuid>>> {
        Ok(Some(Vec::new()))
    }
}
