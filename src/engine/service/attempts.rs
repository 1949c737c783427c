//! A run's attempts: when its first one started, and the stages of each earlier one as it
//! ended, for `run status` and the run's page.

use serde::Serialize;

use super::{Result, Service};
use crate::model::{Millis, Run, Stage};

/// One earlier attempt of a run, and its stages as they were when it ended.
#[derive(Clone, Debug, Serialize)]
pub struct AttemptStages {
    pub attempt: i64,
    pub stages: Vec<Stage>,
}

/// From the first attempt's start to the run's end, or to now for a run still going.
pub(super) fn since_first_start(run: &Run, first_started_at: Option<Millis>) -> Option<i64> {
    first_started_at.map(|start| (run.ended_at.unwrap_or_else(crate::model::now_millis) - start).max(0))
}

impl Service {
    /// When `run`'s first attempt started, and its earlier attempts' stages. A run on its first
    /// attempt costs no read.
    pub(super) async fn attempts_of(&self, run: &Run) -> Result<(Option<Millis>, Vec<AttemptStages>)> {
        if run.attempt <= 1 {
            return Ok((run.started_at, Vec::new()));
        }
        let first = self.store.first_starts_of(&[run.id]).await?.remove(&run.id).or(run.started_at);
        let mut attempts: Vec<AttemptStages> = Vec::new();
        for (attempt, stage) in self.store.earlier_stages(run.id).await? {
            match attempts.last_mut() {
                Some(last) if last.attempt == attempt => last.stages.push(stage),
                _ => attempts.push(AttemptStages { attempt, stages: vec![stage] }),
            }
        }
        Ok((first, attempts))
    }
}
