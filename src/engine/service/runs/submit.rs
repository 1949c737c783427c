//! Submission: a run request checked, planned and written as pending, alone or in a batch.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

use crate::engine::service::{Result, Service, ServiceError};
use crate::engine::store::{NewDependency, StoreError};
use crate::model::sweep::{SweepRecord, SweepSpec};
use crate::model::{AwaitedKind, Run, RunParams, Stage, When};
use crate::workflow::Workflow;
use crate::workflow::request::{DependencyRequest, DependencyTarget, RunRequest};

/// A dependency on another part of the same submission (a pipeline's step): an earlier run of
/// the batch, or a sweep written with it.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::engine::service) struct Earlier {
    pub target: InBatch,
    pub when: When,
    /// What `{after.NAME.*}` calls it: the step's name.
    pub name: Option<String>,
}

/// What an [`Earlier`] dependency waits for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::engine::service) enum InBatch {
    /// A run of the batch already placed before this one: its place, from 0.
    Run(usize),
    /// A sweep written in the same transaction.
    Sweep(uuid::Uuid),
}

/// A sweep to write with a batch, with its members.
pub(in crate::engine::service) type SweepRows = (SweepRecord, Vec<(Run, Vec<Stage>)>);

/// The built-in variables that hand a stage the run's environment: a workflow using one needs
/// an environment (the selection's, or `--env`).
const ENV_VARS: [&str; 4] = ["env_file", "env_name", "env_args", "env_import_dir"];

/// Only the workflow's declared vars take per-run values: the built-ins (the interpreter, the
/// checkout, the run's paths) are the operator's, never a caller's.
fn check_run_vars(spec: &Workflow, vars: &BTreeMap<String, String>) -> Result<()> {
    for name in vars.keys() {
        if crate::workflow::BUILTIN_VARS.contains(&name.as_str()) || name.starts_with("port.") {
            return Err(ServiceError::BuiltinVar { name: name.clone() });
        }
        if !spec.vars.contains_key(name) {
            let known = spec.vars.keys().cloned().collect::<Vec<_>>();
            let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
            return Err(ServiceError::UnknownVar { name: name.clone(), workflow: spec.name.clone(), known });
        }
    }
    Ok(())
}

impl Service {
    /// Validates everything a run needs, then writes it as pending in one transaction and
    /// wakes the daemon. Nothing is written when anything is wrong.
    pub async fn submit_run(&self, request: RunRequest) -> Result<Run> {
        let mut runs = self.submit_runs(vec![request]).await?;
        Ok(runs.remove(0))
    }

    /// Validates every request, then writes all the runs as pending in one transaction (in
    /// order, so they are claimed in order at equal priority) and wakes the daemon once.
    /// Nothing is written when any request is wrong; the error names the request (from 1).
    pub async fn submit_runs(&self, requests: Vec<RunRequest>) -> Result<Vec<Run>> {
        self.submit_batch(Vec::new(), requests.into_iter().map(|r| (r, Vec::new())).collect()).await
    }

    /// `submit_runs`, each request with the parts of the submission it waits for, and the
    /// `sweeps` (already prepared) written first in the same transaction.
    pub(in crate::engine::service) async fn submit_batch(
        &self,
        sweeps: Vec<SweepRows>,
        requests: Vec<(RunRequest, Vec<Earlier>)>,
    ) -> Result<Vec<Run>> {
        let catalog = self.settings.catalog()?;
        let single = requests.len() == 1;
        // A batch names a handful of workflows: each is loaded and checked once.
        let mut specs: HashMap<String, Workflow> = HashMap::new();
        let mut batch = Vec::with_capacity(requests.len());
        let mut ids: Vec<Uuid> = Vec::with_capacity(requests.len());
        for (index, (request, earlier)) in requests.into_iter().enumerate() {
            let in_batch = |err| {
                if single { err } else { ServiceError::InBatch { index: index + 1, source: Box::new(err) } }
            };
            let deps =
                self.dependencies_of(request.dependencies(), &earlier, &ids).await.map_err(in_batch)?;
            let names: Vec<(String, AwaitedKind)> =
                deps.iter().filter_map(|d| d.name.clone().map(|name| (name, d.kind))).collect();
            let run = self
                .prepare_as(&catalog, &mut specs, request, &names, Uuid::new_v4())
                .await
                .map_err(in_batch)?;
            let stages = run.pending_stages();
            ids.push(run.id);
            batch.push((run, stages, deps));
        }
        let written = match sweeps.is_empty() {
            true => self.store.insert_runs_after(&batch).await,
            false => self.store.insert_sweeps_and_runs(&sweeps, &batch).await,
        };
        let runs = written.map_err(|err| match err {
            StoreError::Unmet { reason } => ServiceError::DependencyUnmet { reason },
            other => other.into(),
        })?;
        self.wake_queued().await;
        Ok(runs)
    }

    /// A request's dependencies as the store writes them: each target found (an existing run
    /// or sweep by its id or prefix, or an earlier part of the submission: a run of the batch,
    /// whose id is in `ids`, or a sweep written with it), each name given once, and none on a
    /// run or sweep that already ended in a way that can never meet it.
    async fn dependencies_of(
        &self,
        asked: &[DependencyRequest],
        earlier: &[Earlier],
        ids: &[Uuid],
    ) -> Result<Vec<NewDependency>> {
        let mut deps: Vec<NewDependency> = Vec::with_capacity(asked.len() + earlier.len());
        for dep in earlier {
            match dep.target {
                InBatch::Run(place) => {
                    let id = *ids.get(place).ok_or_else(|| {
                        ServiceError::BadDependency(format!(
                            "run {} of the batch is not before this one: a run waits only for earlier runs",
                            place + 1
                        ))
                    })?;
                    deps.push(NewDependency::on_run(id, dep.when, dep.name.clone()));
                }
                InBatch::Sweep(id) => deps.push(NewDependency::on_sweep(id, dep.name.clone())),
            }
        }
        for dep in asked {
            let prefix = match &dep.target {
                DependencyTarget::Run(prefix) => prefix,
                DependencyTarget::Sweep(prefix) => {
                    let sweep = self.awaitable_sweep(prefix).await?;
                    deps.push(NewDependency::on_sweep(sweep.id, dep.name.clone()));
                    continue;
                }
                DependencyTarget::Step(step) => {
                    return Err(ServiceError::BadDependency(format!(
                        "'{}' names a pipeline step; outside a pipeline, wait for a run: {{\"run\": ID}}",
                        crate::text::one_line(step)
                    )));
                }
            };
            let run = self.resolve_run(prefix).await?;
            let settled = crate::model::dependency::settle(dep.when, run.state);
            if settled == crate::model::Settled::Unmet {
                let reason = crate::model::dependency::unmet_reason(&run.id, dep.when, run.state);
                return Err(ServiceError::DependencyUnmet { reason });
            }
            deps.push(NewDependency::on_run(run.id, dep.when, dep.name.clone()));
        }
        for (i, dep) in deps.iter().enumerate() {
            if let Some(name) = &dep.name {
                crate::model::dependency::check_name(name).map_err(ServiceError::BadDependency)?;
                if deps[..i].iter().any(|d| d.name.as_ref() == Some(name)) {
                    return Err(ServiceError::BadDependency(format!("two dependencies are named '{name}'")));
                }
            }
        }
        Ok(deps)
    }

    /// The sweep `prefix` names, when a run may wait for it: one with a metric (else it never
    /// has a winner), not stopped, and not ended without a winner.
    async fn awaitable_sweep(&self, prefix: &str) -> Result<SweepRecord> {
        let sweep = self.resolve_sweep(prefix).await?;
        if SweepSpec::parse(&sweep.file).map_or(true, |spec| spec.metric.is_none()) {
            return Err(ServiceError::BadDependency(format!(
                "sweep {} has no metric, so it never has a winner to wait for",
                sweep.short_id()
            )));
        }
        let settled = crate::model::dependency::settle_sweep(sweep.state, sweep.winner.is_some());
        if settled == crate::model::Settled::Unmet {
            let reason =
                crate::model::dependency::sweep_unmet_reason(&sweep.id, sweep.state, sweep.reason.as_deref());
            return Err(ServiceError::DependencyUnmet {
                reason: format!("{reason}: a run waiting for it could never start"),
            });
        }
        Ok(sweep)
    }

    /// One run, checked and planned as `id`, not yet written: a new run, or a queued run an
    /// edit re-plans under its own id. `after` are its dependencies' names (`{after.NAME.*}`),
    /// each with what it waits for (a run's values differ from a sweep's).
    pub(in crate::engine::service) async fn prepare_as(
        &self,
        catalog: &crate::workflow::Catalog,
        specs: &mut HashMap<String, Workflow>,
        request: RunRequest,
        after: &[(String, AwaitedKind)],
        id: Uuid,
    ) -> Result<Run> {
        let name = self.workflow_for(catalog, request.workflow.as_deref(), request.env.as_deref()).await?;
        let cached = specs.get(&name).cloned();
        let mut spec = match cached {
            Some(spec) => spec,
            None => catalog.load(&name)?,
        };
        // Per-run values first: a bad variable is named even when a credential is missing too.
        check_run_vars(&spec, &request.vars)?;
        if !specs.contains_key(&name) {
            self.check_workflow(&name, &spec)?;
            specs.insert(name.clone(), spec.clone());
        }
        if let Some(timeout) = request.stall_timeout {
            spec.stall_timeout = Some(timeout);
        }
        if let Some(limit) = request.time_limit {
            spec.time_limit = Some(limit);
        }
        if let Some(preemptible) = request.preemptible {
            spec.preemptible = preemptible;
        }
        let needs = self.checked_needs(&spec, &request.needs)?;
        let runs_env = ENV_VARS.iter().any(|var| spec.uses_var(var)) || spec.trains().is_some();
        let (env, config) = if runs_env || request.env.is_some() {
            let env =
                self.run_environment(request.env.as_deref(), &request.set, &spec).await.map_err(|err| {
                    match err {
                        ServiceError::NoSelection if runs_env => {
                            ServiceError::NeedsEnvironment(spec.name.clone())
                        }
                        other => other,
                    }
                })?;
            env.check_trained_by(&spec)?;
            env.check_required()?;
            let config = env.config.clone();
            (Some(env), config)
        } else {
            let config =
                request.set.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
            (None, config)
        };
        let run_dir = self.settings.run_dir(&id);
        let resolved =
            self.resolve_vars(&spec, (&request.vars, after), env.as_ref(), &id, &run_dir, catalog.dir())?;
        // A dry run of the expansion with stand-in ports, so a template problem is caught now.
        let mut trial = resolved.clone();
        for port in spec.ports.keys() {
            trial.insert(format!("port.{port}"), "0".into());
        }
        for pool in needs.names() {
            trial.insert(format!("{}{pool}", crate::model::pool::VAR_PREFIX), "0".into());
        }
        for stage in &spec.stages {
            stage
                .plan(&trial, &run_dir)
                .map_err(|e| ServiceError::Unplannable { workflow: name.clone(), problem: e.to_string() })?;
        }
        let after = after.iter().map(|(name, _)| name.clone()).collect();
        let params = RunParams { vars: request.vars, config, needs, resolved, after, ..RunParams::default() };
        let held_at = request.hold.unwrap_or(false).then(crate::model::now_millis);
        let run = Run {
            env_name: env.map(|env| env.name),
            workflow: name,
            held_at,
            ..Run::queued(id, spec, run_dir, request.priority.unwrap_or(0), params)
        };
        Ok(run)
    }

    /// The run's needs (the workflow's, the request's over them), refused when no claim could
    /// meet them: checked against the pools the home's daemon published when it started.
    fn checked_needs(&self, spec: &Workflow, asked: &crate::model::Needs) -> Result<crate::model::Needs> {
        let needs = spec.needs.overlaid(&asked.clone().checked()?);
        if needs.iter().all(|(_, &count)| count == 0) {
            return Ok(needs);
        }
        if spec.launcher == crate::workflow::Launcher::Slurm {
            return Err(ServiceError::Unplannable {
                workflow: spec.name.clone(),
                problem: "needs: counted pools are the claiming node's devices; a Slurm job asks sbatch for its own".into(),
            });
        }
        crate::node_pools::published(&self.settings.home)?.check(&needs)?;
        Ok(needs)
    }

    /// What a workflow needs of this store and environment, checked once per submission.
    pub(in crate::engine::service) fn check_workflow(&self, name: &str, spec: &Workflow) -> Result<()> {
        if !spec.node_labels.is_empty() && !self.store.backend().supports_nodes() {
            let labels: Vec<String> = spec.node_labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            return Err(ServiceError::NeedsPostgres(format!(
                "workflow '{name}' pins its runs to nodes labelled {}, which",
                labels.join(",")
            )));
        }
        let missing: Vec<String> =
            spec.credentials.iter().filter(|c| !crate::environ::is_set(c)).cloned().collect();
        if !missing.is_empty() {
            return Err(ServiceError::MissingCredentials {
                workflow: name.to_string(),
                wanted: spec.credentials.clone(),
                missing,
            });
        }
        Ok(())
    }

    /// Every template value of a run except its ports (those are picked when it is claimed)
    /// and its dependencies' values (`{after.NAME.*}` in a per-run value, kept as written until
    /// the run is claimed; only the names in `after` may appear).
    fn resolve_vars(
        &self,
        spec: &Workflow,
        (vars, after): (&BTreeMap<String, String>, &[(String, AwaitedKind)]),
        env: Option<&super::RunEnvironment>,
        id: &Uuid,
        run_dir: &std::path::Path,
        workflow_dir: &std::path::Path,
    ) -> Result<BTreeMap<String, String>> {
        let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
        let builtins = BTreeMap::from([
            ("run_id".to_string(), id.to_string()),
            ("run_dir".to_string(), path(run_dir)),
            ("config_path".to_string(), path(&run_dir.join("config.yaml"))),
            ("env_file".to_string(), env.map(|e| path(&e.file)).unwrap_or_default()),
            ("env_name".to_string(), env.map(|e| e.name.clone()).unwrap_or_default()),
            ("env_args".to_string(), env.map_or_else(|| "{}".to_string(), super::RunEnvironment::args_json)),
            ("env_import_dir".to_string(), env.map(super::RunEnvironment::import_dir).unwrap_or_default()),
            ("python".to_string(), self.settings.python.clone()),
            ("workflow_dir".to_string(), path(workflow_dir)),
            ("home".to_string(), path(&self.settings.home)),
            ("tinker_atropos".to_string(), path(&self.settings.tinker_atropos)),
        ]);
        let mut resolved = builtins.clone();
        let mut with_after = builtins;
        for (name, awaited) in after {
            for kind in awaited.values() {
                let var = crate::model::dependency::after_var(name, kind);
                with_after.insert(var.clone(), format!("{{{var}}}"));
            }
        }
        let unplannable =
            |problem: String| ServiceError::Unplannable { workflow: spec.name.clone(), problem };
        for (name, default) in &spec.vars {
            let raw = vars.get(name).unwrap_or(default);
            for var in crate::workflow::template::variables(raw).unwrap_or_default() {
                if var.starts_with("after.") && !with_after.contains_key(var) {
                    return Err(unplannable(format!(
                        "vars.{name}: '{{{}}}' is not a value of a named dependency ({})",
                        crate::text::one_line(var),
                        after_values_known(var, after)
                    )));
                }
            }
            let value = crate::workflow::template::expand(raw, &with_after)
                .map_err(|e| unplannable(format!("vars.{name}: {e}")))?;
            resolved.insert(name.clone(), value);
        }
        Ok(resolved)
    }
}

/// What a misnamed `{after.…}` value could have been: the values of the dependency it names,
/// when it names one, else the values of a run and the names there are.
fn after_values_known(var: &str, after: &[(String, AwaitedKind)]) -> String {
    let listed = |kind: AwaitedKind| {
        let values: Vec<String> = kind.values().iter().map(|v| format!("{{after.NAME.{v}}}")).collect();
        values.join(", ")
    };
    let named = var.strip_prefix("after.").and_then(|rest| rest.split_once('.')).map(|(name, _)| name);
    match after.iter().find(|(name, _)| Some(name.as_str()) == named) {
        Some((name, kind)) => format!("{name} is a {} dependency: {}", kind.as_str(), listed(*kind)),
        None => {
            let names: Vec<&str> = after.iter().map(|(name, _)| name.as_str()).collect();
            let names = if names.is_empty() { "none".to_string() } else { names.join(", ") };
            format!(
                "a run's are {}; a sweep's {}; named: {names}",
                listed(AwaitedKind::Run),
                listed(AwaitedKind::Sweep)
            )
        }
    }
}
