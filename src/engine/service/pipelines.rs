//! Pipelines: a file of steps queued as one submission, each step's run waiting for the runs of
//! the steps it names.

use crate::model::Run;
use crate::workflow::pipeline::{Pipeline, step_label};

use super::runs::Earlier;
use super::{Result, Service, ServiceError};

impl Service {
    /// Queues every step of `pipeline` in one transaction (`submit_many`), each after the steps
    /// it waits for, and returns the runs in the file's order. Nothing is written when any step
    /// is refused; the error names the step.
    pub async fn submit_pipeline(&self, pipeline: &Pipeline) -> Result<Vec<Run>> {
        // Where each step goes in the batch: the queue order puts every step after its own.
        let mut place = vec![0; pipeline.steps.len()];
        for (at, step) in pipeline.order.iter().enumerate() {
            place[*step] = at;
        }
        let requests = pipeline
            .order
            .iter()
            .map(|&index| {
                let step = &pipeline.steps[index];
                let earlier = step
                    .after
                    .iter()
                    .map(|(target, when)| Earlier {
                        place: place[*target],
                        when: *when,
                        name: pipeline.steps[*target].name.clone(),
                    })
                    .collect();
                (step.request.clone(), earlier)
            })
            .collect();
        let runs = self.submit_batch(requests).await.map_err(|err| match err {
            ServiceError::InBatch { index, source } => {
                let step = pipeline.order[index - 1];
                ServiceError::Pipeline(format!("step {}: {source}", step_label(&pipeline.steps[step], step)))
            }
            other => other,
        })?;
        let mut in_file_order: Vec<Option<Run>> = vec![None; runs.len()];
        for (run, &step) in runs.into_iter().zip(&pipeline.order) {
            in_file_order[step] = Some(run);
        }
        Ok(in_file_order.into_iter().flatten().collect())
    }
}
