//! Ending and repeating: stop a run (a pending one is cancelled), requeue an ended one.

use std::collections::BTreeMap;

use crate::engine::service::{Result, Service, ServiceError};
use crate::engine::store::StoreError;
use crate::model::{AfterStop, Run, RunState, RunTrigger};

use super::RunRequest;

impl Service {
    /// Queues a new run of an ended run's workflow with its environment, variables and
    /// priority (the old run is left as it is). A run without an environment keeps its config
    /// fields too; one with an environment takes that environment's configuration as it is now
    /// (its stored config holds locked fields, which `--set` refuses).
    pub async fn requeue_run(&self, prefix: &str) -> Result<Run> {
        let run = self.resolve_run(prefix).await?;
        if !run.state.is_terminal() {
            return Err(ServiceError::NotEnded { id: run.id.to_string(), state: run.state });
        }
        let set = resubmitted_set(&run);
        let request = RunRequest {
            workflow: Some(run.workflow.clone()),
            env: run.env_name.clone(),
            vars: run.params.vars.clone(),
            set,
            priority: Some(run.priority),
            // The stall timeout and time limit the run had, its own overrides included.
            stall_timeout: run.spec.stall_timeout,
            hold: None,
            time_limit: run.spec.time_limit,
            needs: run.params.needs.clone(),
            preemptible: Some(run.spec.preemptible),
            after: None,
        };
        self.submit_run(request).await
    }

    /// Cancels a pending run or asks a started one to stop; stopping twice is not an error.
    pub async fn stop_run(&self, prefix: &str) -> Result<Run> {
        let mut run = self.resolve_run(prefix).await?;
        loop {
            // The state table says what a stop does; this only knows that stopping twice is fine.
            let trigger = match crate::model::run::stop_trigger(run.state) {
                Some(trigger) => trigger,
                // A victim of a preemption, or a pbt exploit's loser, would queue again: it
                // stays stopped instead.
                None if run.after_stop() != AfterStop::Stopped => match self.store.keep_stopped(&run).await {
                    Ok(moved) => {
                        self.wake().await;
                        return Ok(moved);
                    }
                    Err(StoreError::Conflict { .. }) => {
                        run = self.reread(&run, prefix).await?;
                        continue;
                    }
                    Err(err) => return Err(err.into()),
                },
                None if run.state == RunState::Stopping => return Ok(run),
                None => return Err(ServiceError::AlreadyEnded { id: run.id.to_string(), state: run.state }),
            };
            let reason =
                if trigger == RunTrigger::Cancel { "cancelled before it started" } else { "stop requested" };
            match self.store.transition(&run, trigger, Some(reason), None).await {
                Ok(moved) => {
                    self.wake().await;
                    return Ok(moved);
                }
                // The daemon moved it meanwhile: look again and decide on what is there now.
                Err(StoreError::Conflict { .. }) => {
                    run = self.reread(&run, prefix).await?;
                }
                Err(err) => return Err(err.into()),
            }
        }
    }

    /// The run as the store holds it after a write that lost a race to another.
    async fn reread(&self, run: &Run, prefix: &str) -> Result<Run> {
        self.store.run(run.id).await?.ok_or_else(|| ServiceError::UnknownRun(crate::text::one_line(prefix)))
    }
}

/// The `--set` values that submit `run` again: its stored config for a run without an
/// environment; none for one with (the environment's current config applies, and its stored
/// config holds locked fields, which `--set` refuses).
pub(in crate::engine::service) fn resubmitted_set(run: &Run) -> BTreeMap<String, String> {
    match run.env_name {
        Some(_) => BTreeMap::new(),
        None => run
            .params
            .config
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_string)))
            .collect(),
    }
}
