//! A run's outcome: stage durations, trained weights, checkpoints and metrics.

use serde::Serialize;

use crate::engine::reconciler::trained_weights_of;
use crate::engine::service::{Result, Service, ServiceError};

use super::views::stage_wandb_runs;
use super::{RunStatus, RunSummary};
use crate::engine::service::attempts::since_first_start;

/// A run's outcome as results commands show it.
#[derive(Clone, Debug, Serialize)]
pub struct RunResults {
    #[serde(flatten)]
    pub status: RunStatus,
    /// Wall time per stage, in seconds.
    pub durations: std::collections::BTreeMap<String, f64>,
    /// The last weights path among its checkpoints (also for a failed or stopped run), else
    /// the last one its trainer's log reports.
    pub trained_weights: Option<String>,
    /// Every checkpoint, oldest first, across attempts.
    pub checkpoints: Vec<crate::model::Checkpoint>,
    /// Training metrics from W&B, or the last snapshot of them.
    pub metrics: crate::engine::service::RunMetrics,
    /// About ten rows of the stored metric history spread evenly, the last included (the
    /// reference tool's `history`).
    pub history: Vec<crate::model::MetricRow>,
    /// Every stored row of the metric history, by step.
    pub metric_history: Vec<crate::model::MetricRow>,
}

impl Service {
    pub async fn run_results(&self, prefix: &str) -> Result<RunResults> {
        let run = self.resolve_run(prefix).await?;
        let metrics = self.run_metrics(&run).await;
        let stages = self.store.stages(run.id).await?;
        let checkpoints = self.run_checkpoints_of(run.id).await?;
        let (first_started_at, earlier_attempts) = self.attempts_of(&run).await?;
        let status = RunStatus {
            run: RunSummary::from(&run),
            stages,
            waiting_for: None,
            queue_position: None,
            wandb_runs: stage_wandb_runs(&run),
            checkpoint: checkpoints.last().cloned(),
            metrics: self.headline_of(&run).await?,
            resumed_from: crate::workflow::checkpoints::resume_of(&run.params.resolved).ok().flatten(),
            first_started_at,
            since_first_start_ms: since_first_start(&run, first_started_at),
            earlier_attempts,
            after: Vec::new(),
        };
        let durations = status
            .stages
            .iter()
            .filter_map(|s| {
                Some((s.name.clone(), (s.record.ended_at? - s.record.started_at?) as f64 / 1000.0))
            })
            .collect();
        let trained_weights =
            trained_weights_of(&checkpoints, &status.stages).await.map_err(ServiceError::Log)?;
        let (metric_history, history) = self.history_of(&run).await?;
        Ok(RunResults { status, durations, trained_weights, checkpoints, metrics, history, metric_history })
    }
}
