//! Reads by exact id of what the store records, beneath what the surfaces show: for callers
//! that already hold an id and check what was written (the integration tests). Compiled only
//! with `testing`.

use uuid::Uuid;

use super::{Result, Service};
use crate::model::{InferenceTest, MetricRow, Millis, ProgressPoint, Run, Schedule, Stage, TestTask};

impl Service {
    /// The run with exactly this id, if the store still has it.
    pub async fn run(&self, id: Uuid) -> Result<Option<Run>> {
        Ok(self.store.run(id).await?)
    }

    /// The run's stages, in workflow order.
    pub async fn run_stages(&self, id: Uuid) -> Result<Vec<Stage>> {
        Ok(self.store.stages(id).await?)
    }

    /// Every recorded change of step of the run's `attempt`, oldest first.
    pub async fn run_progress_in(&self, id: Uuid, attempt: i64) -> Result<Vec<ProgressPoint>> {
        Ok(self.store.progress(id, attempt).await?)
    }

    /// When the run's current attempt became `running`, as its events recorded it.
    pub async fn run_running_since(&self, id: Uuid) -> Result<Option<Millis>> {
        Ok(self.store.running_since(id).await?)
    }

    /// The W&B metric history stored for the run, one row per step.
    pub async fn run_metric_rows(&self, id: Uuid) -> Result<Vec<MetricRow>> {
        Ok(self.store.metric_rows(id).await?)
    }

    /// The inference test with exactly this id, if the store still has it.
    pub async fn test(&self, id: Uuid) -> Result<Option<InferenceTest>> {
        Ok(self.store.test(id).await?)
    }

    /// The test's tasks, one per model.
    pub async fn test_tasks(&self, id: Uuid) -> Result<Vec<TestTask>> {
        Ok(self.store.test_tasks(id).await?)
    }

    /// Every schedule as stored: webhook credentials included, where `schedules` redacts them.
    pub async fn stored_schedules(&self) -> Result<Vec<Schedule>> {
        Ok(self.store.schedules().await?)
    }

    /// The newest `limit` tests a schedule fired, newest first.
    pub async fn schedule_tests(&self, schedule: Uuid, limit: i64) -> Result<Vec<InferenceTest>> {
        Ok(self.store.schedule_tests(schedule, limit).await?)
    }
}
