//! Starting a sweep: its file parsed and checked against its workflow, then the sweep and every
//! member written as pending runs in one transaction (a bayes sweep's first members follow at
//! once, each in a transaction of its own, as `suggest` writes every later one).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::engine::service::runs::SweepRows;
use crate::engine::service::{Result, Service, ServiceError};
use crate::model::sweep::{
    Configuration, MemberOf, Method, SweepRecord, SweepSpec, SweepState, Target, bayes, var_text,
};
use crate::model::{Run, now_millis};
use crate::workflow::Workflow;
use crate::workflow::program::MemberIdentity;
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
    /// that is known), plans every member as `submit_run` plans a run, then writes the
    /// sweep and its members as pending runs in one transaction and wakes the daemon. Nothing
    /// is written when anything is wrong.
    ///
    /// `overrides` apply to every member (e.g. `hold`, `time_limit`, a var the sweep does not
    /// set); they may not name a sweep parameter, nor wait for other runs. `origin` is the
    /// directory of the sweep's file, where a W&B `program:` runs unless the file says
    /// `directory:`.
    pub async fn submit_sweep(
        &self,
        text: &str,
        origin: Option<&Path>,
        overrides: RunRequest,
    ) -> Result<StartedSweep> {
        let (sweep, members) = self.prepare_sweep(text, origin, overrides).await?;
        self.store.insert_sweep(&sweep, &members).await?;
        let mut ids: Vec<Uuid> = members.iter().map(|(run, _)| run.id).collect();
        if sweep.member_setup.is_some() {
            // A bayes sweep's first members, now rather than at the decider's next pass (which
            // makes them should this fail or the process die here).
            match self.suggest_members(&sweep, self).await {
                Ok(made) => ids.extend(made.iter().filter_map(|decision| match decision {
                    super::SweepDecision::Suggested { run, .. } => Some(*run),
                    _ => None,
                })),
                Err(err) => {
                    tracing::warn!(sweep = %sweep.short_id(), "its first members wait for the daemon: {err}")
                }
            }
        }
        self.wake_queued().await;
        Ok(StartedSweep { sweep, members: ids })
    }

    /// The sweep `text` describes, checked and with every member planned, not yet written (a
    /// bayes sweep's members are suggested later, as slots open: its member 0 is planned here
    /// only to check it, and none is written with the sweep).
    pub(in crate::engine::service) async fn prepare_sweep(
        &self,
        text: &str,
        origin: Option<&Path>,
        overrides: RunRequest,
    ) -> Result<SweepRows> {
        let spec = SweepSpec::parse(text)?;
        let id = Uuid::new_v4();
        let program_dir = match &spec.program {
            Some(program) => Some(program_directory(&spec, program.program.as_deref(), origin)?),
            None => None,
        };
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
        let setup = MemberSetup { overrides, program_dir };
        let mut planner = MemberPlanner::new(self, &spec, id, &setup)?;
        let first = spec.member(0).unwrap_or_else(|| bayes::suggest(&spec, &[], 0));
        let workflow = match planner.program_workflow(&first, Uuid::nil())? {
            Some(workflow) => workflow,
            None => planner.catalog.load(&spec.workflow)?,
        };
        for param in spec.parameters.iter().filter(|_| setup.program_dir.is_none()) {
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
        if spec.method == Method::Pbt
            && let Some(problem) = super::exploit::unresumable(&workflow)
        {
            return Err(ServiceError::BadSweepParameter { path: "workflow".into(), problem });
        }
        let count = spec.members();
        let mut members: Vec<(Run, Vec<crate::model::Stage>)> = Vec::new();
        if spec.method == Method::Bayes {
            // Checked as a member would be, then dropped: the decider writes each member.
            planner.plan(first).await?;
        } else {
            members.reserve(count as usize);
            for k in 0..count {
                let member = spec
                    .member(k)
                    .ok_or_else(|| ServiceError::Sweep(format!("member {k} has no parameters")))?;
                members.push(planner.plan(member).await?);
            }
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
            member_setup: (spec.method == Method::Bayes)
                .then(|| serde_json::to_value(&setup))
                .transpose()
                .map_err(|err| ServiceError::Sweep(err.to_string()))?,
        };
        Ok((sweep, members))
    }
}

/// What every member of a sweep is made with beyond its file: what its submission asked of
/// each (`--hold`, …) and where its `program:` runs. A bayes sweep keeps it with its row
/// (`SweepRecord::member_setup`) for the members it makes later.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct MemberSetup {
    #[serde(default)]
    pub overrides: RunRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_dir: Option<PathBuf>,
}

/// Plans a sweep's members as `submit` plans a run: member k's run and stages, not written.
pub(super) struct MemberPlanner<'a> {
    service: &'a Service,
    spec: &'a SweepSpec,
    sweep: Uuid,
    sweep_short: String,
    setup: &'a MemberSetup,
    catalog: crate::workflow::Catalog,
    specs: HashMap<String, Workflow>,
}

impl<'a> MemberPlanner<'a> {
    pub(super) fn new(
        service: &'a Service,
        spec: &'a SweepSpec,
        sweep: Uuid,
        setup: &'a MemberSetup,
    ) -> Result<MemberPlanner<'a>> {
        Ok(MemberPlanner {
            service,
            spec,
            sweep,
            sweep_short: crate::model::short_id(&sweep),
            setup,
            catalog: service.settings.catalog()?,
            specs: HashMap::new(),
        })
    }

    /// A program's member runs its own one-stage workflow (`workflow::program`), under the
    /// W&B display name the daemon looks its metrics up by.
    fn program_workflow(&self, member: &Configuration, run: Uuid) -> Result<Option<Workflow>> {
        let Some(directory) = &self.setup.program_dir else { return Ok(None) };
        let values: Vec<(String, serde_json::Value)> =
            member.assignments.iter().map(|a| (a.path.clone(), a.value.clone())).collect();
        let who = MemberIdentity {
            sweep_id: &self.sweep_short,
            display_name: &crate::engine::service::wandb_run_name(None, &run),
            directory,
            python: &self.service.settings.python,
        };
        let workflow = crate::workflow::program::member_workflow(self.spec, &values, &who)
            .map_err(crate::workflow::CatalogError::from)?;
        Ok(Some(workflow))
    }

    /// The run of the member `member` is drawn for (pending, marked as the sweep's member k),
    /// and its stages.
    pub(super) async fn plan(&mut self, member: Configuration) -> Result<(Run, Vec<crate::model::Stage>)> {
        let (spec, k) = (self.spec, member.index);
        let mut vars = member.vars();
        let run_id = Uuid::new_v4();
        if let Some(workflow) = self.program_workflow(&member, run_id)? {
            // Its values are in its command line, not in vars.
            self.service.check_workflow(&spec.workflow, &workflow)?;
            self.specs.insert(spec.workflow.clone(), workflow);
            vars.clear();
        }
        let request = RunRequest {
            workflow: Some(spec.workflow.clone()),
            env: spec.env.clone(),
            vars,
            set: member.config().iter().map(|(key, value)| (key.clone(), var_text(value))).collect(),
            priority: Some(spec.priority),
            needs: spec.needs.clone(),
            ..RunRequest::default()
        };
        let request = self.setup.overrides.clone().over(&request);
        let mut run = self
            .service
            .prepare_as(&self.catalog, &mut self.specs, request, &[], run_id)
            .await
            .map_err(|source| ServiceError::InSweep { k, source: Box::new(source) })?;
        if run.env_name.is_none()
            && let Some(param) = spec.parameters.iter().find(|p| matches!(p.target, Target::Set(_)))
        {
            return Err(ServiceError::BadSweepParameter {
                path: format!("parameters.{}", param.path),
                problem: format!(
                    "`set:` names a config field, and workflow '{}' runs no environment",
                    spec.workflow
                ),
            });
        }
        run.params.sweep = Some(MemberOf { sweep: self.sweep, k });
        let stages = run.pending_stages();
        Ok((run, stages))
    }
}

/// Where a `program:` sweep's members run: the file's `directory:`, else the directory of the
/// sweep's file. The program must be a regular file inside it (through no symlink out of it).
fn program_directory(spec: &SweepSpec, program: Option<&str>, origin: Option<&Path>) -> Result<PathBuf> {
    let bad = |path: &str, problem: String| ServiceError::BadSweepParameter { path: path.into(), problem };
    let dir = match (&spec.directory, origin) {
        (Some(dir), _) => PathBuf::from(dir),
        (None, Some(origin)) => origin.to_path_buf(),
        (None, None) => {
            return Err(bad(
                "directory",
                "missing: a sweep given without a file says where its program runs (an absolute `directory:`)".into(),
            ));
        }
    };
    if spec.metrics.is_none() && spec.project.is_none() {
        return Err(bad(
            "project",
            "missing: without `metrics:` the members' metric comes from W&B, read in the sweep's project"
                .into(),
        ));
    }
    let shown = |p: &Path| crate::text::one_line(&p.display().to_string());
    let dir = std::fs::canonicalize(&dir)
        .ok()
        .filter(|d| d.is_dir())
        .ok_or_else(|| bad("directory", format!("{} is not a directory", shown(&dir))))?;
    if let Some(program) = program {
        let path = dir.join(program);
        let real = std::fs::canonicalize(&path)
            .map_err(|_| bad("program", format!("{} does not exist", shown(&path))))?;
        if !real.starts_with(&dir) {
            return Err(bad("program", format!("{} leads out of {} (a symlink)", shown(&path), shown(&dir))));
        }
        if !real.is_file() {
            return Err(bad("program", format!("{} is not a file", shown(&path))));
        }
    }
    Ok(dir)
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
