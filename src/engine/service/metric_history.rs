//! Training metrics by name: what the daemon's metric poller reads from W&B and stores, and
//! what results, `run metrics` and a sweep read, from the store alone (so after W&B is gone
//! too). The workflow's own sources (`metrics:`) are recorded by the reconciler's metric worker.

use serde::Serialize;
use uuid::Uuid;

use crate::model::RunQuery;
use crate::model::{MetricPoint, MetricRow, MetricSummary, Millis, Run, RunState, now_millis, sample_evenly};
use crate::wandb::{WandbClient, WandbError};

use super::metrics::wandb_names;
use super::{Result, Service};

/// Rows in the short history results show, as the reference tool's `history(samples=10)`.
pub const HISTORY_SAMPLES: usize = 10;

/// History rows W&B is asked to sample per key and reading: enough for a long run's curve; new
/// steps of later readings fill it in further, since rows are kept per step.
const WANDB_SAMPLES: u32 = 500;

/// A run's metrics, as `run metrics` and `GET /runs/{id}/metrics` show them.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum NamedMetrics {
    /// Each metric with its count of readings and its last one, by name.
    Names { run_id: Uuid, metrics: Vec<MetricSummary> },
    /// One metric's series, by step.
    Series { run_id: Uuid, name: String, points: Vec<MetricPoint> },
}

/// Why a reading of a run's metric history stored nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReadingError {
    #[error("W&B has no run named {name} in {project} yet")]
    NotYet { project: String, name: String },
    #[error(transparent)]
    Wandb(#[from] WandbError),
    #[error(transparent)]
    Store(#[from] crate::engine::store::StoreError),
}

impl Service {
    /// The runs the metric poller of `node` reads: the running runs it holds (every running run
    /// on a store without nodes).
    pub async fn runs_to_read_metrics(&self, node: &str) -> Result<Vec<Run>> {
        let runs = self.store.list_runs(&RunQuery { state: Some(RunState::Running), limit: None }).await?;
        Ok(runs.into_iter().filter(|run| run.node.as_deref().is_none_or(|n| n == node)).collect())
    }

    /// The metric sweep `sweep` compares its members by (None: it names none, or is gone): a
    /// key the metric poller reads of its members' W&B history, whatever it is.
    pub async fn sweep_metric_name(&self, sweep: Uuid) -> Result<Option<String>> {
        Ok(self.store.sweep(sweep).await?.and_then(|record| record.metric_name()))
    }

    /// Reads `run`'s metric history from W&B and stores it by name under the run's attempt
    /// (telling the sweep decider, for a sweep's member); returns how many readings it held.
    /// Besides the keys results and the report show, the `named` keys are read (the metric of
    /// the run's sweep first: `WandbClient::metric_readings` bounds them).
    pub async fn read_metric_history(
        &self,
        run: &Run,
        client: &WandbClient,
        named: &[&str],
    ) -> std::result::Result<usize, ReadingError> {
        let (project, name) = wandb_names(run);
        let Some(found) = client.find_run(&project, &name).await? else {
            return Err(ReadingError::NotYet { project, name });
        };
        let readings = client.metric_readings(&project, &found, named, WANDB_SAMPLES).await?;
        let attempt = u32::try_from(run.attempt).unwrap_or(u32::MAX);
        self.store.put_metric_values(run.id, attempt, &readings, now_millis()).await?;
        // A sweep member's readings are news to this process's sweep decider.
        if let Some(member) = run.params.sweep.filter(|_| !readings.is_empty()) {
            self.sweep_readings.landed(member.sweep);
        }
        Ok(readings.len())
    }

    /// The metrics of the run `prefix` names: with `name`, that metric's series; without, each
    /// metric's count and last reading.
    pub async fn run_named_metrics(&self, prefix: &str, name: Option<&str>) -> Result<NamedMetrics> {
        let run = self.resolve_run(prefix).await?;
        Ok(match name {
            Some(name) => NamedMetrics::Series {
                run_id: run.id,
                name: name.to_string(),
                points: self.store.metric_series(run.id, name).await?,
            },
            None => {
                NamedMetrics::Names { run_id: run.id, metrics: self.store.metric_summaries(run.id).await? }
            }
        })
    }

    /// The series of metric `name` of `run`, ordered by step, a resumed attempt's readings
    /// replacing the earlier attempts' from its resume step on; at most
    /// `model::metric_point::MAX_SERIES_POINTS` readings are read.
    pub async fn run_metric_series(&self, run: Uuid, name: &str) -> Result<Vec<MetricPoint>> {
        Ok(self.store.metric_series(run, name).await?)
    }

    /// The names of `run`'s metrics, sorted (at most 1,000).
    pub async fn run_metric_names(&self, run: Uuid) -> Result<Vec<String>> {
        Ok(self.store.metric_names(run).await?)
    }

    /// The runs with a metric reading recorded (or changed) after `recorded_after`: what a task
    /// beside the loop rereads, rather than every run's series.
    pub async fn runs_with_metrics_since(&self, recorded_after: Millis) -> Result<Vec<Uuid>> {
        Ok(self.store.metric_runs_since(recorded_after).await?)
    }

    /// The stored rows of `run`, and about `HISTORY_SAMPLES` of them spread evenly, the last
    /// included: (all, sampled).
    pub(super) async fn history_of(&self, run: &Run) -> Result<(Vec<MetricRow>, Vec<MetricRow>)> {
        let rows = self.store.metric_rows(run.id).await?;
        let sampled = sample_evenly(&rows, HISTORY_SAMPLES);
        Ok((rows, sampled))
    }
}
