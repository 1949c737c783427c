//! Pipelines: a file of steps queued as one submission, each step's run waiting for the runs
//! (or sweeps) of the steps it names.

use std::collections::HashMap;

use crate::model::Run;
use crate::model::sweep::SweepSpec;
use crate::workflow::pipeline::{Pipeline, SweepSource, Work, step_label};
use crate::workflow::request::RunRequest;

use super::runs::{Earlier, InBatch, SweepRows};
use super::{Result, Service, ServiceError};

/// A pipeline just written: its runs in the file's order, and the sweeps of its sweep steps
/// (each step's place in the file, its sweep and members).
#[derive(Clone, Debug)]
pub struct QueuedPipeline {
    pub runs: Vec<Run>,
    pub sweeps: Vec<(usize, crate::model::sweep::SweepRecord, Vec<uuid::Uuid>)>,
}

impl Service {
    /// Queues every step of `pipeline` in one transaction: its sweeps with their members, then
    /// its runs, each after the steps it waits for. Returns the runs in the file's order.
    /// Nothing is written when any step is refused; the error names the step.
    pub async fn submit_pipeline(&self, pipeline: &Pipeline) -> Result<Vec<Run>> {
        Ok(self.queue_pipeline(pipeline).await?.runs)
    }

    /// `submit_pipeline`, with the sweeps of its sweep steps.
    pub async fn queue_pipeline(&self, pipeline: &Pipeline) -> Result<QueuedPipeline> {
        let in_step = |index: usize| {
            move |err: ServiceError| {
                ServiceError::Pipeline(format!("step {}: {err}", step_label(&pipeline.steps[index], index)))
            }
        };
        // The sweeps first: their ids are what the runs waiting for them wait for.
        let mut sweeps: Vec<SweepRows> = Vec::new();
        let mut queued_sweeps = Vec::new();
        let mut sweep_of: HashMap<usize, uuid::Uuid> = HashMap::new();
        for (index, step) in pipeline.steps.iter().enumerate() {
            let Work::Sweep(source) = &step.work else { continue };
            let text = match source {
                SweepSource::Named(name) => {
                    self.settings.catalog()?.sweep_text(name).map_err(|e| in_step(index)(e.into()))?
                }
                // JSON is YAML: the sweep is kept as the file it would have been.
                SweepSource::Inline(sweep) => sweep.to_string(),
            };
            let (sweep, members) =
                self.prepare_sweep(&text, None, RunRequest::default()).await.map_err(in_step(index))?;
            let waited = pipeline.steps.iter().position(|other| other.after.iter().any(|(t, _)| *t == index));
            if let Some(waiting) = waited
                && SweepSpec::parse(&sweep.file).is_ok_and(|spec| spec.metric.is_none())
            {
                return Err(in_step(waiting)(ServiceError::BadDependency(format!(
                    "sweep step '{}' has no metric, so it never has a winner to wait for",
                    step_label(step, index)
                ))));
            }
            sweep_of.insert(index, sweep.id);
            queued_sweeps.push((index, sweep.clone(), members.iter().map(|(run, _)| run.id).collect()));
            sweeps.push((sweep, members));
        }
        // The runs in queue order: each after the runs it waits for.
        let runs_order: Vec<usize> =
            pipeline.order.iter().copied().filter(|&i| !pipeline.steps[i].is_sweep()).collect();
        let mut place = vec![0; pipeline.steps.len()];
        for (at, step) in runs_order.iter().enumerate() {
            place[*step] = at;
        }
        let requests = runs_order
            .iter()
            .filter_map(|&index| {
                let step = &pipeline.steps[index];
                let request = step.request()?.clone();
                let earlier = step
                    .after
                    .iter()
                    .map(|(target, when)| Earlier {
                        target: match sweep_of.get(target) {
                            Some(sweep) => InBatch::Sweep(*sweep),
                            None => InBatch::Run(place[*target]),
                        },
                        when: *when,
                        name: pipeline.steps[*target].name.clone(),
                    })
                    .collect();
                Some((request, earlier))
            })
            .collect();
        let runs = self.submit_batch(sweeps, requests).await.map_err(|err| match err {
            ServiceError::InBatch { index, source } => in_step(runs_order[index - 1])(*source),
            // A batch of one names no request: the step is the one run step.
            other if runs_order.len() == 1 => in_step(runs_order[0])(other),
            other => other,
        })?;
        let mut in_file_order: Vec<Option<Run>> = vec![None; pipeline.steps.len()];
        for (run, &step) in runs.into_iter().zip(&runs_order) {
            in_file_order[step] = Some(run);
        }
        Ok(QueuedPipeline { runs: in_file_order.into_iter().flatten().collect(), sweeps: queued_sweeps })
    }
}
