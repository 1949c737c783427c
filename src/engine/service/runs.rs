//! Runs: submit, find, inspect, stop.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::engine::store::{NewDependency, StoreError};
use crate::model::RunTrigger;
use crate::model::{Event, Run, RunParams, RunState, Stage};
use crate::model::{RunPage, RunQuery};
use crate::workflow::Workflow;

use super::attempts::since_first_start;
use super::{Result, Service, ServiceError};

/// What a surface asks for when it starts a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SubmitRequest {
    /// The default workflow when absent.
    pub workflow: Option<String>,
    /// The selected environment when absent (for workflows that run one).
    pub env_name: Option<String>,
    pub vars: BTreeMap<String, String>,
    /// Config fields for this run (`--set`), checked against the field types and locks.
    pub set: BTreeMap<String, String>,
    pub priority: i64,
    /// Overrides the workflow's `stall_timeout` for this run.
    pub stall_timeout: Option<std::time::Duration>,
    /// Queued held: not claimed until released (`run release`).
    pub hold: bool,
    /// Overrides the workflow's `time_limit` for this run.
    pub time_limit: Option<std::time::Duration>,
    /// Units of the daemon's pools, over the workflow's `needs` (`--needs gpu=2`).
    pub needs: crate::model::Needs,
    /// Runs it waits for (`--after`, `--after-any`, `--after-failed`, a pipeline's `after`).
    pub after: Vec<After>,
}

/// One dependency of a submitted run.
#[derive(Clone, Debug, PartialEq)]
pub struct After {
    pub target: AfterTarget,
    pub when: crate::model::When,
    /// What `{after.NAME.*}` calls it in the run's variables; a dependency without a name gives
    /// no values.
    pub name: Option<String>,
}

/// The run a dependency waits for.
#[derive(Clone, Debug, PartialEq)]
pub enum AfterTarget {
    /// An existing run, by its id or a unique prefix.
    Run(String),
    /// An earlier run of the same `submit_many` (its index, from 0): a pipeline's step.
    Earlier(usize),
}

/// A run with its stages, as status commands show it.
#[derive(Clone, Debug, Serialize)]
pub struct RunStatus {
    #[serde(flatten)]
    pub run: RunSummary,
    pub stages: Vec<Stage>,
    /// Why a pending run is not being claimed, when lachesis can tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// A pending run's place in the queue (1 is claimed next).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<usize>,
    /// Each stage's W&B run, continued by every attempt.
    pub wandb_runs: Vec<StageWandbRun>,
    /// The run's last checkpoint, once its trainer wrote one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<crate::model::Checkpoint>,
    /// The checkpoint the current attempt resumed from (its run's `resume.*` params, written
    /// with the requeue that queued it); none for an attempt that started from step 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<crate::model::ResumePoint>,
    /// The runs it waits for (or waited for), each with its condition and state.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<crate::model::Dependency>,
    /// When its first attempt started (`started_at` is its current attempt's).
    pub first_started_at: Option<crate::model::Millis>,
    /// From its first attempt's start to its end, or to now for a run still going: every attempt
    /// and the waits between them.
    pub since_first_start_ms: Option<i64>,
    /// The stages of its earlier attempts, as each ended (`stages` are the current attempt's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub earlier_attempts: Vec<super::attempts::AttemptStages>,
}

/// The W&B run one stage logs into: its id (`WANDB_RUN_ID`) and, when the entity is known
/// (`WANDB_ENTITY` in the stage's env, the environment or the env file), its page.
#[derive(Clone, Debug, Serialize)]
pub struct StageWandbRun {
    pub stage: String,
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Every stage's W&B run, as its plan gives it (the workflow's own `WANDB_RUN_ID` wins).
pub fn stage_wandb_runs(run: &Run) -> Vec<StageWandbRun> {
    use crate::workflow::wandb::{RUN_ID_VAR, add_identity};
    let set = |value: Option<String>| value.filter(|v| !v.trim().is_empty());
    let base =
        set(crate::environ::var("WANDB_BASE_URL")).unwrap_or_else(|| crate::wandb::DEFAULT_BASE.into());
    let (project, entity) = (super::metrics::wandb_project(run), set(crate::environ::var("WANDB_ENTITY")));
    let run_id = run.id.to_string();
    run.spec
        .stages
        .iter()
        .map(|spec| {
            // A pending run's ports are not picked yet: its plan may not expand, its env does.
            let env = spec.plan(&run.params.resolved, &run.run_dir).map(|p| p.environ).unwrap_or_else(|_| {
                let mut env = spec.environ.clone();
                add_identity(&mut env, &run_id, &spec.name);
                env
            });
            let id = env.get(RUN_ID_VAR).cloned().unwrap_or_default();
            let project = set(env.get("WANDB_PROJECT").cloned()).unwrap_or_else(|| project.clone());
            let url = set(env.get("WANDB_ENTITY").cloned())
                .or_else(|| entity.clone())
                .and_then(|entity| crate::wandb::run_url(&base, &entity, &project, &id));
            StageWandbRun { stage: spec.name.clone(), id, url }
        })
        .collect()
}

/// A run as listings show it (without the workflow snapshot).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: Uuid,
    pub workflow: String,
    pub env_name: Option<String>,
    pub state: RunState,
    pub priority: i64,
    pub attempt: i64,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    pub reason: Option<String>,
    pub run_dir: PathBuf,
    /// The node that claimed it (several daemons on PostgreSQL).
    pub node: Option<String>,
    /// A retry's backoff: not claimed before this time.
    pub not_before: Option<i64>,
    /// Held (since this time): not claimed until released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_at: Option<i64>,
    /// The training step of its current attempt, once one was reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<crate::model::Progress>,
    /// What it asks of the daemon's pools (`gpu: 2`).
    #[serde(default, skip_serializing_if = "crate::model::Needs::is_empty")]
    pub needs: crate::model::Needs,
    /// The pool units a claimed, unfinished run holds (`gpu: ["1", "2"]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub units: crate::model::pool::Assignment,
    /// When the current attempt reaches its `time_limit` (a started run with one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_limit_at: Option<crate::model::Millis>,
    /// How many of its dependencies are not met yet (a pending run waits while this is > 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deps_open: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl From<&Run> for RunSummary {
    fn from(run: &Run) -> Self {
        RunSummary {
            id: run.id,
            workflow: run.workflow.clone(),
            env_name: run.env_name.clone(),
            state: run.state,
            priority: run.priority,
            attempt: run.attempt,
            created_at: run.created_at,
            started_at: run.started_at,
            ended_at: run.ended_at,
            reason: run.reason.clone(),
            run_dir: run.run_dir.clone(),
            node: run.node.clone(),
            not_before: run.not_before,
            held_at: run.held_at,
            progress: None,
            needs: run.params.needs.clone(),
            // Released when the run ends: a finished run's recorded units are history.
            units: if run.state.is_in_flight() {
                crate::model::pool::assigned(&run.params.resolved)
            } else {
                BTreeMap::new()
            },
            time_limit_at: crate::engine::reconciler::time_limit_deadline(run),
            deps_open: run.deps_open,
        }
    }
}

/// What a pending run waiting for dependencies waits for: "dependencies: 1a2b3c4d (ok, running), …".
fn waiting_on(run: &Run, after: &[crate::model::Dependency]) -> Option<String> {
    if run.state != RunState::Pending || run.deps_open == 0 {
        return None;
    }
    let open: Vec<String> = after
        .iter()
        .filter(|d| d.settled == crate::model::Settled::Waiting)
        .map(crate::model::Dependency::describe)
        .collect();
    Some(format!("dependencies: {}", open.join(", ")))
}

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
    pub async fn submit(&self, request: SubmitRequest) -> Result<Run> {
        let mut runs = self.submit_many(vec![request]).await?;
        Ok(runs.remove(0))
    }

    /// Validates every request, then writes all the runs as pending in one transaction (in
    /// order, so they are claimed in order at equal priority) and wakes the daemon once.
    /// Nothing is written when any request is wrong; the error names the request (from 1).
    pub async fn submit_many(&self, requests: Vec<SubmitRequest>) -> Result<Vec<Run>> {
        let catalog = self.settings.catalog()?;
        let single = requests.len() == 1;
        // A sweep names a handful of workflows: each is loaded and checked once.
        let mut specs: HashMap<String, Workflow> = HashMap::new();
        let mut batch = Vec::with_capacity(requests.len());
        let mut ids: Vec<Uuid> = Vec::with_capacity(requests.len());
        for (index, request) in requests.into_iter().enumerate() {
            let in_batch = |err| {
                if single { err } else { ServiceError::InBatch { index: index + 1, source: Box::new(err) } }
            };
            let deps = self.dependencies_of(&request.after, &ids).await.map_err(in_batch)?;
            let run = self.prepare(&catalog, &mut specs, request).await.map_err(in_batch)?;
            let stages = run.pending_stages();
            ids.push(run.id);
            batch.push((run, stages, deps));
        }
        let runs = self.store.insert_runs_after(&batch).await.map_err(|err| match err {
            StoreError::Unmet { reason } => ServiceError::DependencyUnmet { reason },
            other => other.into(),
        })?;
        self.wake_queued().await;
        Ok(runs)
    }

    /// A request's dependencies as the store writes them: each target found (an existing run by
    /// its id or prefix, or an earlier run of the batch, whose id is in `earlier`), each name
    /// given once, and none on a run that already ended in a way that can never meet it.
    async fn dependencies_of(&self, after: &[After], earlier: &[Uuid]) -> Result<Vec<NewDependency>> {
        let mut deps: Vec<NewDependency> = Vec::with_capacity(after.len());
        for dep in after {
            if let Some(name) = &dep.name {
                crate::model::dependency::check_name(name).map_err(ServiceError::BadDependency)?;
                if deps.iter().any(|d| d.name.as_ref() == Some(name)) {
                    return Err(ServiceError::BadDependency(format!("two dependencies are named '{name}'")));
                }
            }
            let target = match &dep.target {
                AfterTarget::Earlier(index) => *earlier.get(*index).ok_or_else(|| {
                    ServiceError::BadDependency(format!(
                        "run {} of the batch is not before this one: a run waits only for earlier runs",
                        index + 1
                    ))
                })?,
                AfterTarget::Run(prefix) => {
                    let run = self.resolve(prefix).await?;
                    let settled = crate::model::dependency::settle(dep.when, run.state);
                    if settled == crate::model::Settled::Unmet {
                        let reason = crate::model::dependency::unmet_reason(&run.id, dep.when, run.state);
                        return Err(ServiceError::DependencyUnmet { reason });
                    }
                    run.id
                }
            };
            deps.push(NewDependency { after: target, when: dep.when, name: dep.name.clone() });
        }
        Ok(deps)
    }

    /// One run, checked and planned, not yet written.
    async fn prepare(
        &self,
        catalog: &crate::workflow::Catalog,
        specs: &mut HashMap<String, Workflow>,
        request: SubmitRequest,
    ) -> Result<Run> {
        self.prepare_as(catalog, specs, request, Uuid::new_v4()).await
    }

    /// `prepare` for the run `id`: an edit re-plans a queued run under its own id.
    pub(super) async fn prepare_as(
        &self,
        catalog: &crate::workflow::Catalog,
        specs: &mut HashMap<String, Workflow>,
        request: SubmitRequest,
        id: Uuid,
    ) -> Result<Run> {
        let name = request.workflow.clone().unwrap_or_else(|| catalog.default_name());
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
            spec.stall_timeout = Some(crate::workflow::Dur(timeout));
        }
        if let Some(limit) = request.time_limit {
            spec.time_limit = Some(crate::workflow::Dur(limit));
        }
        let needs = self.checked_needs(&spec, &request.needs)?;
        let runs_env = spec.uses_var("env_file") || spec.uses_var("env_name");
        let (env_name, env_file, config) = if runs_env || request.env_name.is_some() {
            let (name, file, config) = self
                .run_environment(request.env_name.as_deref(), &request.set, &spec)
                .await
                .map_err(|err| match err {
                    ServiceError::NoSelection if runs_env => {
                        ServiceError::NeedsEnvironment(spec.name.clone())
                    }
                    other => other,
                })?;
            (Some(name), Some(file), config)
        } else {
            let config =
                request.set.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
            (None, None, config)
        };
        let run_dir = self.settings.run_dir(&id);
        let after_names: Vec<&str> = request.after.iter().filter_map(|a| a.name.as_deref()).collect();
        let resolved = self.resolve_vars(
            &spec,
            (&request.vars, &after_names),
            (env_name.as_deref(), env_file.as_deref()),
            &id,
            &run_dir,
            catalog.dir(),
        )?;
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
        let after = after_names.iter().map(|n| n.to_string()).collect();
        let params = RunParams { vars: request.vars, config, needs, resolved, after };
        let held_at = request.hold.then(crate::model::now_millis);
        let run = Run {
            env_name,
            workflow: name,
            held_at,
            ..Run::queued(id, spec, run_dir, request.priority, params)
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
        crate::pools::published(&self.settings.home)?.check(&needs)?;
        Ok(needs)
    }

    /// What a workflow needs of this store and environment, checked once per submission.
    fn check_workflow(&self, name: &str, spec: &Workflow) -> Result<()> {
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
        (vars, after): (&BTreeMap<String, String>, &[&str]),
        (env_name, env_file): (Option<&str>, Option<&std::path::Path>),
        id: &Uuid,
        run_dir: &std::path::Path,
        workflow_dir: &std::path::Path,
    ) -> Result<BTreeMap<String, String>> {
        let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
        let builtins = BTreeMap::from([
            ("run_id".to_string(), id.to_string()),
            ("run_dir".to_string(), path(run_dir)),
            ("config_path".to_string(), path(&run_dir.join("config.yaml"))),
            ("env_file".to_string(), env_file.map(path).unwrap_or_default()),
            ("env_name".to_string(), env_name.unwrap_or_default().to_string()),
            ("python".to_string(), self.settings.python.clone()),
            ("workflow_dir".to_string(), path(workflow_dir)),
            ("home".to_string(), path(&self.settings.home)),
            ("tinker_atropos".to_string(), path(&self.settings.tinker_atropos)),
        ]);
        let mut resolved = builtins.clone();
        let mut with_after = builtins;
        for name in after {
            for kind in crate::model::dependency::AFTER_VALUES {
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
                    let named = if after.is_empty() { "none".to_string() } else { after.join(", ") };
                    return Err(unplannable(format!(
                        "vars.{name}: '{{{}}}' is not a value of a named dependency ({{after.NAME.run_id}}, \
                         {{after.NAME.trained_weights}} or {{after.NAME.run_dir}}; named: {named})",
                        crate::yaml::one_line(var)
                    )));
                }
            }
            let value = crate::workflow::template::expand(raw, &with_after)
                .map_err(|e| unplannable(format!("vars.{name}: {e}")))?;
            resolved.insert(name.clone(), value);
        }
        Ok(resolved)
    }

    /// Finds a run by its full id or a unique prefix of it.
    pub async fn resolve(&self, prefix: &str) -> Result<Run> {
        let by_id = async |id| self.store.run(id).await;
        let by_prefix = async |prefix: &str| self.store.runs_by_prefix(prefix, 6).await;
        super::resolve_prefix(prefix, "runs", by_id, by_prefix, |r: &Run| r.id, ServiceError::UnknownRun)
            .await
    }

    pub async fn status(&self, prefix: &str) -> Result<RunStatus> {
        self.status_of(&self.resolve(prefix).await?).await
    }

    /// The status of a run already resolved.
    pub async fn status_of(&self, run: &Run) -> Result<RunStatus> {
        let run = run.clone();
        let stages = self.store.stages(run.id).await?;
        let after = self.store.dependencies(run.id).await?;
        let waiting_for = match waiting_on(&run, &after) {
            Some(waits) => Some(waits),
            None => self.waiting_for(&run).await,
        };
        let queue_position = self.queue_position(&run).await?;
        let progress = self.progress_of(&run).await?;
        let checkpoint = self.store.last_checkpoint(run.id).await?;
        let (first_started_at, earlier_attempts) = self.attempts_of(&run).await?;
        Ok(RunStatus {
            run: RunSummary { progress, ..RunSummary::from(&run) },
            stages,
            waiting_for,
            queue_position,
            wandb_runs: stage_wandb_runs(&run),
            checkpoint,
            resumed_from: crate::workflow::checkpoints::resume_of(&run.params.resolved).ok().flatten(),
            after,
            first_started_at,
            since_first_start_ms: since_first_start(&run, first_started_at),
            earlier_attempts,
        })
    }

    /// Every recorded change of step of every attempt, each tagged with its attempt, by attempt
    /// and oldest first (the step chart).
    pub async fn progress_series(&self, run: &Run) -> Result<Vec<crate::model::ProgressPoint>> {
        Ok(self.store.progress_all(run.id).await?)
    }

    /// The progress of a run's current attempt, from its recorded changes of step.
    pub async fn progress_of(&self, run: &Run) -> Result<Option<crate::model::Progress>> {
        if run.spec.progress.is_none() {
            return Ok(None);
        }
        Ok(crate::model::Progress::of(&self.store.progress_ends(run.id, run.attempt).await?))
    }

    /// A pending run's place in the claim order (1 is next); `None` for any other run. Counted
    /// on the queue index, so a run deep in a queue of 100,000 costs no list of the queue.
    async fn queue_position(&self, run: &Run) -> Result<Option<usize>> {
        if run.state != RunState::Pending {
            return Ok(None);
        }
        self.queue_position_of(run.id).await
    }

    /// Up to `limit` pending runs in claim order: from the head, or after the pending run `after`
    /// (a page of the queue costs that page, however deep the queue).
    pub async fn queue(&self, after: Option<Uuid>, limit: i64) -> Result<Vec<RunSummary>> {
        self.summaries(self.store.queue_page(after, limit).await?).await
    }

    /// One page of the runs table, newest first.
    pub async fn runs_page(&self, page: &RunPage<'_>) -> Result<Vec<RunSummary>> {
        self.summaries(self.store.runs_page(page).await?).await
    }

    /// The queue position of the pending run `id` (1 is next), by its id alone.
    pub async fn queue_position_of(&self, id: Uuid) -> Result<Option<usize>> {
        Ok(self.store.queue_position(id).await?.map(|n| n as usize))
    }

    /// For a pending run pinned to labels no live node has: says so, rather than wait silently.
    pub async fn waiting_for(&self, run: &Run) -> Option<String> {
        if run.state != RunState::Pending {
            return None;
        }
        // Needs the daemon's pools no longer meet (it restarted with fewer units): said, not
        // waited on silently.
        if !run.params.needs.is_empty()
            && let Ok(pools) = crate::pools::published(&self.settings.home)
            && let Err(err) = pools.check(&run.params.needs)
        {
            return Some(format!("pool units the daemon lacks: {err}"));
        }
        if !run.params.needs.is_empty()
            && let Ok(pools) = crate::pools::published(&self.settings.home)
            && let Some(busy) = self.busy_units(run, &pools).await
        {
            return Some(busy);
        }
        if run.spec.node_labels.is_empty() {
            return None;
        }
        let nodes = self.nodes().await.ok()?;
        let wanted = &run.spec.node_labels;
        if nodes.iter().any(|n| n.health == "up" && crate::engine::store::labels_fit(&n.node.labels, wanted))
        {
            return None;
        }
        let labels: Vec<String> = wanted.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Some(format!(
            "a node labelled {}: none that is up has these labels (see `lachesis node list`)",
            labels.join(",")
        ))
    }

    /// For a pending run whose `needs` exceed the units free now: how many are free and which
    /// runs hold the others ("2 gpu units: 1 of 4 free (held by runs 1a2b3c4d, 5e6f7a8b)").
    /// Read from the in-flight runs (the state index; they are few), never from the queue.
    async fn busy_units(&self, run: &Run, pools: &crate::model::Pools) -> Option<String> {
        let in_flight = self.store.active_runs().await.ok()?;
        let mut short = Vec::new();
        for (name, &asked) in run.params.needs.iter() {
            let Some(units) = pools.get(name) else { continue };
            if asked == 0 {
                continue;
            }
            let mut holders = Vec::new();
            let mut held = 0usize;
            for other in &in_flight {
                let taken = crate::model::pool::assigned(&other.params.resolved);
                let count = taken.get(name).map_or(0, |t| t.iter().filter(|u| units.contains(u)).count());
                if count > 0 {
                    held += count;
                    holders.push(crate::model::short_id(&other.id));
                }
            }
            let free = units.len().saturating_sub(held);
            if (asked as usize) > free {
                let plural = if asked == 1 { "" } else { "s" };
                let by = match holders.len() {
                    0 => String::new(),
                    1 => format!(" (held by run {})", holders[0]),
                    _ => format!(" (held by runs {})", holders.join(", ")),
                };
                short.push(format!("{asked} {name} unit{plural}: {free} of {} free{by}", units.len()));
            }
        }
        (!short.is_empty()).then(|| short.join("; "))
    }

    /// How many runs are in each state (no rows parsed, but every run counted: for pages, not
    /// for loops; see `live_run_counts`).
    pub async fn run_counts(&self) -> Result<Vec<(String, i64)>> {
        Ok(self.store.run_counts().await?)
    }

    /// How many runs are pending, starting, running, stopping or retrying: an index range, as
    /// cheap with a year of finished runs as with none.
    pub async fn live_run_counts(&self) -> Result<Vec<(String, i64)>> {
        Ok(self.store.live_run_counts().await?)
    }

    pub async fn list(&self, filter: &RunQuery) -> Result<Vec<RunSummary>> {
        self.summaries(self.store.list_runs(filter).await?).await
    }

    /// Runs as listings show them, each with its progress.
    async fn summaries(&self, runs: Vec<Run>) -> Result<Vec<RunSummary>> {
        let mut summaries = Vec::with_capacity(runs.len());
        for run in runs {
            let progress = self.progress_of(&run).await?;
            summaries.push(RunSummary { progress, ..RunSummary::from(&run) });
        }
        Ok(summaries)
    }

    pub async fn events(&self, prefix: &str) -> Result<(Run, Vec<Event>)> {
        let run = self.resolve(prefix).await?;
        let events = self.store.events(run.id, 0).await?;
        Ok((run, events))
    }

    /// Events of the run or test `id` after event `after`, oldest first (for following them).
    pub async fn events_after(&self, id: Uuid, after: i64) -> Result<Vec<Event>> {
        Ok(self.store.events(id, after).await?)
    }

    /// The newest event id across the store: it moves whenever a run, test or schedule does.
    pub async fn last_event_id(&self) -> Result<i64> {
        Ok(self.store.last_event_id().await?)
    }

    /// Queues a new run of an ended run's workflow with its environment, variables and
    /// priority (the old run is left as it is). A run without an environment keeps its config
    /// fields too; one with an environment takes that environment's configuration as it is now
    /// (its stored config holds locked fields, which `--set` refuses).
    pub async fn requeue(&self, prefix: &str) -> Result<Run> {
        let run = self.resolve(prefix).await?;
        if !run.state.is_terminal() {
            return Err(ServiceError::NotEnded { id: run.id.to_string(), state: run.state });
        }
        let set = resubmitted_set(&run);
        let request = SubmitRequest {
            workflow: Some(run.workflow.clone()),
            env_name: run.env_name.clone(),
            vars: run.params.vars.clone(),
            set,
            priority: run.priority,
            // The stall timeout the run had, its own override included.
            stall_timeout: run.spec.stall_timeout.map(|d| d.0),
            hold: false,
            time_limit: run.spec.time_limit.map(|d| d.0),
            needs: run.params.needs.clone(),
            after: Vec::new(),
        };
        self.submit(request).await
    }

    /// Cancels a pending run or asks a started one to stop; stopping twice is not an error.
    pub async fn stop(&self, prefix: &str) -> Result<Run> {
        let mut run = self.resolve(prefix).await?;
        loop {
            // The state table says what a stop does; this only knows that stopping twice is fine.
            let event = match crate::model::run::stop_event(run.state) {
                Some(event) => event,
                None if run.state == RunState::Stopping => return Ok(run),
                None => return Err(ServiceError::AlreadyEnded { id: run.id.to_string(), state: run.state }),
            };
            let reason =
                if event == RunTrigger::Cancel { "cancelled before it started" } else { "stop requested" };
            match self.store.transition(&run, event, Some(reason), None).await {
                Ok(moved) => {
                    self.wake().await;
                    return Ok(moved);
                }
                // The daemon moved it meanwhile: look again and decide on what is there now.
                Err(StoreError::Conflict { .. }) => {
                    run = self
                        .store
                        .run(run.id)
                        .await?
                        .ok_or_else(|| ServiceError::UnknownRun(crate::yaml::one_line(prefix)))?;
                }
                Err(err) => return Err(err.into()),
            }
        }
    }
}

/// The `tinker://…` weights path a trainer log reports, if any: the last one in the log's
/// final [`crate::logs::SCAN_WINDOW`] bytes, scanned backwards (a trainer reports its weights
/// as it ends), so the cost is the same for any size of log.
pub fn trained_weights(log: &std::path::Path) -> Result<Option<String>, crate::logs::LogError> {
    crate::logs::last_match(log, 0, crate::logs::SCAN_WINDOW, weights_in)
}

/// A run's trained weights: the last weights path among its checkpoints, else the last one its
/// stage logs report (read off the runtime's threads). Results show it; a run that waits for
/// this one gets it as `{after.NAME.trained_weights}`.
pub async fn trained_weights_of(
    checkpoints: &[crate::model::Checkpoint],
    stages: &[Stage],
) -> Result<Option<String>> {
    let recorded = crate::model::Checkpoint::last_weights(checkpoints).map(str::to_string);
    if recorded.is_some() {
        return Ok(recorded);
    }
    let logs: Vec<std::path::PathBuf> = stages.iter().map(|s| s.log_path.clone()).collect();
    super::logs::off_thread(move || {
        // An unreadable log has no weights to show; the rest of the results still stand.
        for log in &logs {
            match trained_weights(log) {
                Ok(Some(weights)) => return Ok(Some(weights)),
                Ok(None) => {}
                Err(err) => tracing::warn!("results: {err}"),
            }
        }
        Ok(None)
    })
    .await
}

pub(super) fn weights_in(line: &str) -> Option<String> {
    let start = line.find("tinker://")?;
    Some(line[start..].split_whitespace().next()?.trim_end_matches(['.', ',', ')']).to_string())
}

/// A run's outcome as results commands show it.
#[derive(Clone, Debug, Serialize)]
pub struct RunResults {
    #[serde(flatten)]
    pub status: RunStatus,
    /// Wall time per stage, in seconds.
    pub durations: std::collections::BTreeMap<String, f64>,
    /// The last weights path among its checkpoints (also for a failed or stopped run), else
    /// the last one its trainer's log reports.
    pub trained_weights: Option<String>,
    /// Every checkpoint, oldest first, across attempts.
    pub checkpoints: Vec<crate::model::Checkpoint>,
    /// Training metrics from W&B, or the last snapshot of them.
    pub metrics: super::RunMetrics,
    /// About ten rows of the stored metric history spread evenly, the last included (the
    /// reference tool's `history`).
    pub history: Vec<crate::model::MetricRow>,
    /// Every stored row of the metric history, by step.
    pub metric_history: Vec<crate::model::MetricRow>,
}

impl Service {
    pub async fn results(&self, prefix: &str) -> Result<RunResults> {
        let run = self.resolve(prefix).await?;
        let metrics = self.run_metrics(&run).await;
        let stages = self.store.stages(run.id).await?;
        let checkpoints = self.checkpoints_of(run.id).await?;
        let (first_started_at, earlier_attempts) = self.attempts_of(&run).await?;
        let status = RunStatus {
            run: RunSummary::from(&run),
            stages,
            waiting_for: None,
            queue_position: None,
            wandb_runs: stage_wandb_runs(&run),
            checkpoint: checkpoints.last().cloned(),
            resumed_from: crate::workflow::checkpoints::resume_of(&run.params.resolved).ok().flatten(),
            after: Vec::new(),
            first_started_at,
            since_first_start_ms: since_first_start(&run, first_started_at),
            earlier_attempts,
        };
        let durations = status
            .stages
            .iter()
            .filter_map(|s| {
                Some((s.name.clone(), (s.record.ended_at? - s.record.started_at?) as f64 / 1000.0))
            })
            .collect();
        let trained_weights = trained_weights_of(&checkpoints, &status.stages).await?;
        let (metric_history, history) = self.history_of(&run).await?;
        Ok(RunResults { status, durations, trained_weights, checkpoints, metrics, history, metric_history })
    }
}

/// The `--set` values that submit `run` again: its stored config for a run without an
/// environment; none for one with (the environment's current config applies, and its stored
/// config holds locked fields, which `--set` refuses).
pub(super) fn resubmitted_set(run: &Run) -> BTreeMap<String, String> {
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
