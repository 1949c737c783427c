//! Writes beneath the rules, for tests and benchmarks that need a state no user action makes
//! quickly: a long history, a test that ended hours ago, a schedule a day overdue, a stage whose
//! recorded process is now someone else's. Compiled only for tests and the figures bench
//! (`testing`): no surface can call these.

use uuid::Uuid;

use super::{Result, Service};
use crate::model::{FoundCheckpoint, InferenceTest, MetricRow, Millis, ProgressPoint};
use crate::model::{Run, RunTrigger, Schedule, Stage, TestTask, TestTrigger};

/// A run, its stages and the runs it waits for (each with its condition).
pub type WaitingRun = (Run, Vec<Stage>, Vec<(Uuid, crate::model::When)>);

impl Service {
    /// Writes `runs` with their stages exactly as given (in whatever state), in one
    /// transaction, skipping submission's checks: a store filled so is measured as one that grew.
    pub async fn insert_runs_as_given(&self, runs: &[(Run, Vec<Stage>)]) -> Result<()> {
        Ok(self.store.insert_runs(runs).await?)
    }

    /// Writes runs exactly as given, each waiting for the runs listed beside it (`ok`, or `any`
    /// when marked so), in one transaction: for benches of the queue with dependencies.
    pub async fn insert_waiting_runs_as_given(&self, runs: &[WaitingRun]) -> Result<()> {
        let runs: Vec<_> = runs
            .iter()
            .map(|(run, stages, after)| {
                let deps = after
                    .iter()
                    .map(|(after, when)| crate::engine::store::NewDependency::on_run(*after, *when, None))
                    .collect();
                (run.clone(), stages.clone(), deps)
            })
            .collect();
        self.store.insert_runs_after(&runs).await?;
        Ok(())
    }

    /// Writes a test and its tasks exactly as given.
    pub async fn insert_test_as_given(&self, test: &InferenceTest, tasks: &[TestTask]) -> Result<()> {
        Ok(self.store.insert_test(test, tasks).await?)
    }

    /// Moves a test by `event` as the daemon would, with `results` when it ends.
    pub async fn move_test(
        &self,
        test: &InferenceTest,
        trigger: TestTrigger,
        reason: Option<&str>,
        results: Option<&serde_json::Value>,
    ) -> Result<InferenceTest> {
        Ok(self.store.transition_test(test, trigger, reason, results).await?)
    }

    /// Moves a run by `event` as the daemon would (through the state table).
    pub async fn move_run(&self, run: &Run, trigger: RunTrigger, reason: Option<&str>) -> Result<Run> {
        Ok(self.store.transition(run, trigger, reason, None).await?)
    }

    /// Overwrites a stage's row (its recorded process included).
    pub async fn overwrite_stage(&self, stage: &Stage) -> Result<()> {
        Ok(self.store.update_stage(stage, None).await?)
    }

    /// Overwrites a schedule's row (when it last fired included).
    pub async fn overwrite_schedule(&self, schedule: &Schedule) -> Result<()> {
        Ok(self.store.update_schedule(schedule).await?)
    }

    /// Records a checkpoint of the run's `attempt` at `at`, as the daemon would from its source.
    pub async fn record_checkpoint_as_given(
        &self,
        run: uuid::Uuid,
        attempt: i64,
        found: &FoundCheckpoint,
        at: Millis,
    ) -> Result<()> {
        self.store.record_checkpoint(run, attempt, found, at).await?;
        Ok(())
    }

    /// Records a change of step, as the daemon's progress reader would.
    pub async fn record_progress_as_given(&self, run: uuid::Uuid, point: &ProgressPoint) -> Result<()> {
        Ok(self.store.record_progress(run, point).await?)
    }

    /// Stores metric rows, as the daemon's W&B poller would.
    pub async fn put_metric_rows_as_given(&self, run: uuid::Uuid, rows: &[MetricRow]) -> Result<()> {
        Ok(self.store.put_metric_rows(run, rows).await?)
    }

    /// Records readings of the run's `attempt` at `at`, as its metric worker would.
    pub async fn put_metric_values_as_given(
        &self,
        run: uuid::Uuid,
        attempt: u32,
        readings: &[crate::model::MetricReading],
        at: Millis,
    ) -> Result<()> {
        Ok(self.store.put_metric_values(run, attempt, readings, at).await?)
    }

    /// Stores `selection` as the selected environment, as `env select` would, without
    /// discovering or introspecting it.
    pub async fn put_selection_as_given(&self, selection: &crate::environments::Selection) -> Result<()> {
        Ok(self.store.put_selection(selection).await?)
    }

    /// Sets when the morning report's cron post `name` last handled a due time (a daemon that
    /// was down since then catches up once).
    pub async fn overwrite_report_post(&self, name: &str, last_fired: Millis) -> Result<()> {
        let now = crate::model::now_millis();
        let current = self.store.report_post_since(name, now).await?;
        self.store.claim_report_post(name, current, last_fired).await?;
        Ok(())
    }
}
