//! Starting a sweep: its file parsed and checked against its workflow, then the sweep and every
//! member written as pending runs in one transaction.

use std::collections::HashMap;

use uuid::Uuid;

use crate::engine::service::runs::SweepRows;
use crate::engine::service::{Result, Service, ServiceError};
use crate::model::sweep::{MemberOf, SweepRecord, SweepSpec, SweepState, Target, var_text};
use crate::model::{Run, now_millis};
use crate::workflow::request::RunRequest;

/// A sweep just written, with its members in order of k.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StartedSweep {
    pub sweep: SweepRecord,
    pub members: Vec<Uuid>,
}

impl Service {
    /// Parses the sweep file `text` (W&B's format with lachesis' keys), checks every parameter
    /// against its workflow (a var it does not declare, a `set:` key its environment's config
    /// lacks, refused in one line) and its metric (one the workflow can never report, when
    /// that is known), plans every member as `submit` plans a run, then writes the
    /// sweep and its members as pending runs in one transaction and wakes the daemon. Nothing
    /// is written when anything is wrong.
    ///
    /// `overrides` apply to every member (e.g. `hold`, `time_limit`, a var the sweep does not
    /// set); they may not name a sweep parameter, nor wait for other runs.
    pub async fn submit_sweep(&self, text: &str, overrides: RunRequest) -> Result<StartedSweep> {
        let (sweep, members) = self.prepare_sweep(text, overrides).await?;
        self.store.insert_sweep(&sweep, &members).await?;
        self.wake_queued().await;
        Ok(StartedSweep { sweep, members: members.iter().map(|(run, _)| run.id).collect() })
    }

    /// The sweep `text` describes, checked and with every member planned, not yet written.
    pub(in crate::engine::service) async fn prepare_sweep(
        &self,
        text: &str,
        overrides: RunRequest,
    ) -> Result<SweepRows> {
        let spec = SweepSpec::parse(text)?;
        let config: serde_json::Value =
            crate::yaml::from_str(text).map_err(|err| ServiceError::Sweep(err.message))?;
        if overrides.after.is_some() {
            return Err(ServiceError::BadSweepParameter {
                path: "after".into(),
                problem: "a sweep's members wait for no run".into(),
            });
        }
        for param in &spec.parameters {
            let given = match &param.target {
                Target::Var(name) => overrides.vars.contains_key(name),
                Target::Set(key) => overrides.set.contains_key(key),
            };
            if given {
                return Err(ServiceError::BadSweepParameter {
                    path: format!("parameters.{}", param.path),
                    problem: "also given for every member; the sweep sets it".into(),
                });
            }
        }
        let catalog = self.settings.catalog()?;
        let workflow = catalog.load(&spec.workflow)?;
        for param in &spec.parameters {
            if let Target::Var(name) = &param.target
                && !workflow.vars.contains_key(name)
            {
                let known: Vec<&str> = workflow.vars.keys().map(String::as_str).collect();
                let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
                return Err(ServiceError::BadSweepParameter {
                    path: format!("parameters.{}", param.path),
                    problem: format!(
                        "workflow '{}' has no variable '{name}' (variables: {known}); name one with `var:` or a config field with `set:`",
                        workflow.name
                    ),
                });
            }
        }
        if let Some(metric) = &spec.metric
            && let Some(problem) = unreportable(&workflow, &metric.name)
        {
            return Err(ServiceError::BadSweepParameter { path: "metric.name".into(), problem });
        }
        let id = Uuid::new_v4();
        let mut specs = HashMap::new();
        let count = spec.members();
        let mut members: Vec<(Run, Vec<crate::model::Stage>)> = Vec::with_capacity(count as usize);
        for k in 0..count {
            let member =
                spec.member(k).ok_or_else(|| ServiceError::Sweep(format!("member {k} has no parameters")))?;
            let request = RunRequest {
                workflow: Some(spec.workflow.clone()),
                env: spec.env.clone(),
                vars: member.vars(),
                set: member.config().iter().map(|(key, value)| (key.clone(), var_text(value))).collect(),
                priority: Some(spec.priority),
                needs: spec.needs.clone(),
                ..RunRequest::default()
            };
            let request = overrides.clone().over(&request);
            let mut run = self
                .prepare_as(&catalog, &mut specs, request, &[], Uuid::new_v4())
                .await
                .map_err(|source| ServiceError::InSweep { k, source: Box::new(source) })?;
            if run.env_name.is_none()
                && let Some(param) = spec.parameters.iter().find(|p| matches!(p.target, Target::Set(_)))
            {
                return Err(ServiceError::BadSweepParameter {
                    path: format!("parameters.{}", param.path),
                    problem: format!(
                        "`set:` names a config field, and workflow '{}' runs no environment",
                        workflow.name
                    ),
                });
            }
            run.params.sweep = Some(MemberOf { sweep: id, k });
            let stages = run.pending_stages();
            members.push((run, stages));
        }
        let now = now_millis();
        let sweep = SweepRecord {
            id,
            file: text.to_string(),
            config,
            workflow: spec.workflow.clone(),
            members: count,
            max_live: spec.max_live,
            state: SweepState::Live,
            reason: None,
            winner: None,
            created_at: now,
            updated_at: now,
        };
        Ok((sweep, members))
    }
}

/// Why no member of `workflow` could ever report metric `name`, when that is known before any
/// runs: it has no `metrics:` source, or only a log pattern without a group of that name, and
/// it does not log to W&B (WANDB_API_KEY is not among its credentials, so the daemon's W&B
/// reading finds nothing of it). A JSONL file may hold any key: it is never refused.
fn unreportable(workflow: &crate::workflow::Workflow, name: &str) -> Option<String> {
    if workflow.credentials.iter().any(|c| c == "WANDB_API_KEY") {
        return None;
    }
    let shown = crate::text::one_line(name);
    match &workflow.metrics {
        None => Some(format!(
            "workflow '{}' reports no metrics, so no member could report '{shown}': give it a `metrics:` \
             block (jsonl or log), or list WANDB_API_KEY in its credentials if its trainer logs to W&B",
            workflow.name
        )),
        Some(source) => {
            let known = source.known_names()?;
            (!known.iter().any(|known| known == name)).then(|| {
                format!(
                    "workflow '{}' never reports '{shown}': its metrics are its log pattern's groups ({}), \
                     and it does not log to W&B (WANDB_API_KEY is not among its credentials)",
                    workflow.name,
                    known.join(", ")
                )
            })
        }
    }
}
