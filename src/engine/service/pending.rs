//! Changes to a queued run: hold it, release it, or edit its priority, variables and config
//! fields. Each is refused, naming the state, once the run has left the queue.

use std::collections::{BTreeMap, HashMap};

use crate::engine::store::{PendingEdit, StoreError};
use crate::model::{Run, RunState};

use super::{Result, RunRequest, Service, ServiceError};

/// What `run edit` changes; absent fields stay as they are.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EditRequest {
    pub priority: Option<i64>,
    /// Workflow variables, over the run's own.
    pub vars: BTreeMap<String, String>,
    /// Config fields, checked as at submission.
    pub set: BTreeMap<String, String>,
    /// Pool units, over the run's own needs (checked against the pools as at submission).
    pub needs: crate::model::Needs,
}

impl EditRequest {
    /// Whether the request changes anything at all.
    pub fn is_empty(&self) -> bool {
        self.priority.is_none() && self.vars.is_empty() && self.set.is_empty() && self.needs.is_empty()
    }
}

impl Service {
    /// Keeps a pending run out of the queue until it is released; holding a held run is not
    /// an error.
    pub async fn hold_run(&self, prefix: &str) -> Result<Run> {
        let run = self.pending(prefix, "held").await?;
        if run.held_at.is_some() {
            return Ok(run);
        }
        let edit = PendingEdit { held_at: Some(crate::model::now_millis()), ..current(&run) };
        self.write_edit(&run, &edit, "held: not claimed until released", "held").await
    }

    /// Puts a held run back in the queue, at its place and priority, and wakes the daemon.
    pub async fn release_run(&self, prefix: &str) -> Result<Run> {
        let run = self.pending(prefix, "released").await?;
        if run.held_at.is_none() {
            return Ok(run);
        }
        let edit = PendingEdit { held_at: None, ..current(&run) };
        let run = self.write_edit(&run, &edit, "released: back in the queue", "released").await?;
        self.wake_queued().await;
        Ok(run)
    }

    /// Changes a pending run's priority, variables or config fields. New variables and fields
    /// go through submission's own checks and planning (`prepare_as`), under the run's id and
    /// with its stored workflow; nothing is written when they fail.
    pub async fn edit_run(&self, prefix: &str, request: EditRequest) -> Result<Run> {
        if request.is_empty() {
            return Err(ServiceError::NothingToEdit);
        }
        let run = self.pending(prefix, "edited").await?;
        let mut edit = current(&run);
        let mut changes = Vec::new();
        if let Some(priority) = request.priority {
            changes.push(format!("priority {} -> {priority}", run.priority));
            edit.priority = priority;
        }
        if !request.vars.is_empty() || !request.set.is_empty() || !request.needs.is_empty() {
            edit.params = self.replanned(&run, &request).await?.params;
            // An edited member stays its sweep's.
            edit.params.sweep = run.params.sweep;
            let names: Vec<String> = request.vars.keys().chain(request.set.keys()).cloned().collect();
            if !names.is_empty() {
                changes.push(format!("values {}", names.join(", ")));
            }
            if !request.needs.is_empty() {
                changes.push(format!("needs {} -> {}", shown_needs(&run.params.needs), edit.params.needs));
            }
        }
        let message = format!("edited: {}", changes.join("; "));
        let run = self.write_edit(&run, &edit, &message, "edited").await?;
        if request.priority.is_some() {
            self.wake_queued().await;
        }
        Ok(run)
    }

    /// The run re-planned with the edit's values over its own: the submission path, with the
    /// workflow the run was queued with (already checked then) rather than today's file. A run
    /// with an environment takes that environment's configuration with the new fields, as a
    /// requeue does (its stored config holds locked fields, which `--set` refuses).
    async fn replanned(&self, run: &Run, request: &EditRequest) -> Result<Run> {
        let catalog = self.settings.catalog()?;
        let mut specs = HashMap::from([(run.workflow.clone(), run.spec.clone())]);
        let mut vars = run.params.vars.clone();
        vars.extend(request.vars.clone());
        let mut set = super::runs::resubmitted_set(run);
        set.extend(request.set.clone());
        // Its dependencies' names stay valid in its values; they are written once, at submission.
        let after: Vec<(String, crate::model::AwaitedKind)> = self
            .store
            .dependencies(run.id)
            .await?
            .into_iter()
            .filter_map(|d| d.name.map(|name| (name, d.awaited.kind())))
            .collect();
        let submit = RunRequest {
            workflow: Some(run.workflow.clone()),
            env: run.env_name.clone(),
            vars,
            set,
            priority: Some(run.priority),
            needs: run.params.needs.overlaid(&request.needs),
            preemptible: Some(run.spec.preemptible),
            ..RunRequest::default()
        };
        self.prepare_as(&catalog, &mut specs, submit, &after, run.id).await
    }

    /// The run `prefix` names, when it is pending; else a refusal naming its state.
    async fn pending(&self, prefix: &str, action: &'static str) -> Result<Run> {
        let run = self.resolve_run(prefix).await?;
        refuse_unless_pending(&run, action)?;
        Ok(run)
    }

    /// Writes `edit`; a run that left the queue meanwhile is refused with its new state.
    async fn write_edit(
        &self,
        run: &Run,
        edit: &PendingEdit,
        message: &str,
        action: &'static str,
    ) -> Result<Run> {
        match self.store.edit_pending(run, edit, message).await {
            Err(StoreError::Conflict { .. }) => {
                let now = self
                    .store
                    .run(run.id)
                    .await?
                    .ok_or_else(|| ServiceError::UnknownRun(run.id.to_string()))?;
                refuse_unless_pending(&now, action)?;
                // Still pending but changed (another edit won): the caller may try again.
                Err(StoreError::Conflict { id: run.id, expected: run.state, version: run.version }.into())
            }
            other => Ok(other?),
        }
    }
}

/// Needs as an event says them: "none" when there are none.
fn shown_needs(needs: &crate::model::Needs) -> String {
    if needs.is_empty() { "none".into() } else { needs.to_string() }
}

fn refuse_unless_pending(run: &Run, action: &'static str) -> Result<()> {
    match run.state {
        RunState::Pending => Ok(()),
        state => Err(ServiceError::NotPending { id: run.id.to_string(), state, action }),
    }
}

/// The run's editable columns as they are.
fn current(run: &Run) -> PendingEdit {
    PendingEdit { held_at: run.held_at, priority: run.priority, params: run.params.clone() }
}
