//! What runs look like from outside: found by prefix, listed, a status with its stages.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::engine::service::attempts::since_first_start;
use crate::engine::service::{Result, Service, ServiceError};
use crate::model::{Event, Run, RunPage, RunQuery, RunState, Stage, StateCounts};

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
    /// Its headline metrics' last values (its workflow's `report:`, else its sweep's metric,
    /// else the W&B keys).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<crate::model::HeadlineValue>,
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
    pub earlier_attempts: Vec<crate::engine::service::attempts::AttemptStages>,
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
    let (project, entity) =
        (crate::engine::service::metrics::wandb_project(run), set(crate::environ::var("WANDB_ENTITY")));
    let run_id = run.id.to_string();
    run.spec
        .stages
        .iter()
        .map(|spec| {
            // A pending run's ports are not picked yet: its plan may not expand, its env does.
            let env =
                spec.plan(&run.template_values(), &run.run_dir).map(|p| p.environ).unwrap_or_else(|_| {
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
    /// What a pending run waits for: each dependency not met yet, with the run waited for, its
    /// condition, name and state (listings read them for the whole page at once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waits_for: Vec<crate::model::Dependency>,
    /// Times it was stopped for a run of higher priority and queued again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preemptions: i64,
    /// The work those stops lost, which later attempts redid (ms).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preempted_work_ms: i64,
    /// The sweep it is a member of, and which member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<crate::model::sweep::MemberOf>,
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
            units: if run.state.is_in_flight() { run.units().clone() } else { BTreeMap::new() },
            time_limit_at: crate::engine::reconciler::time_limit_deadline(run),
            deps_open: run.deps_open,
            waits_for: Vec::new(),
            preemptions: run.preemptions,
            preempted_work_ms: run.preempted_work,
            sweep: run.params.sweep,
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

impl Service {
    /// Finds a run by its full id or a unique prefix of it.
    pub async fn resolve_run(&self, prefix: &str) -> Result<Run> {
        let by_id = async |id| self.store.run(id).await;
        let by_prefix = async |prefix: &str| self.store.runs_by_prefix(prefix, 6).await;
        crate::engine::service::resolve_prefix(
            prefix,
            "runs",
            by_id,
            by_prefix,
            |r: &Run| r.id,
            ServiceError::UnknownRun,
        )
        .await
    }

    pub async fn run_status(&self, prefix: &str) -> Result<RunStatus> {
        self.run_status_of(&self.resolve_run(prefix).await?).await
    }

    /// The status of a run already resolved.
    pub async fn run_status_of(&self, run: &Run) -> Result<RunStatus> {
        let run = run.clone();
        let stages = self.store.stages(run.id).await?;
        let after = self.store.dependencies(run.id).await?;
        let waiting_for = match waiting_on(&run, &after) {
            Some(waits) => Some(waits),
            None => self.run_waiting_for(&run).await,
        };
        let queue_position = self.queue_position(&run).await?;
        let progress = self.run_progress_of(&run).await?;
        let checkpoint = self.store.last_checkpoint(run.id).await?;
        let metrics = self.headline_of(&run).await?;
        let (first_started_at, earlier_attempts) = self.attempts_of(&run).await?;
        let waits_for = match run.state == RunState::Pending && run.deps_open > 0 {
            true => after.iter().filter(|d| d.settled == crate::model::Settled::Waiting).cloned().collect(),
            false => Vec::new(),
        };
        Ok(RunStatus {
            run: RunSummary { progress, waits_for, ..RunSummary::from(&run) },
            stages,
            waiting_for,
            queue_position,
            wandb_runs: stage_wandb_runs(&run),
            checkpoint,
            metrics,
            resumed_from: crate::workflow::checkpoints::resume_of(&run.params.resolved).ok().flatten(),
            first_started_at,
            since_first_start_ms: since_first_start(&run, first_started_at),
            earlier_attempts,
            after,
        })
    }

    /// Every recorded change of step of every attempt, each tagged with its attempt, by attempt
    /// and oldest first (the step chart).
    pub async fn run_progress_series(&self, run: &Run) -> Result<Vec<crate::model::ProgressPoint>> {
        Ok(self.store.progress_all(run.id).await?)
    }

    /// The progress of a run's current attempt, from its recorded changes of step.
    pub async fn run_progress_of(&self, run: &Run) -> Result<Option<crate::model::Progress>> {
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
        self.run_queue_position(run.id).await
    }

    /// Up to `limit` pending runs in claim order: from the head, or after the pending run `after`
    /// (a page of the queue costs that page, however deep the queue).
    pub async fn queued_runs(&self, after: Option<Uuid>, limit: i64) -> Result<Vec<RunSummary>> {
        self.summaries(self.store.queue_page(after, limit).await?).await
    }

    /// One page of the runs table, newest first.
    pub async fn runs_page(&self, page: &RunPage<'_>) -> Result<Vec<RunSummary>> {
        self.summaries(self.store.runs_page(page).await?).await
    }

    /// The queue position of the pending run `id` (1 is next), by its id alone.
    pub async fn run_queue_position(&self, id: Uuid) -> Result<Option<usize>> {
        Ok(self.store.queue_position(id).await?.map(|n| n as usize))
    }

    /// For a pending run pinned to labels no live node has: says so, rather than wait silently.
    pub async fn run_waiting_for(&self, run: &Run) -> Option<String> {
        if run.state != RunState::Pending {
            return None;
        }
        // Needs the daemon's pools no longer meet (it restarted with fewer units): said, not
        // waited on silently.
        if !run.params.needs.is_empty()
            && let Ok(pools) = crate::node_pools::published(&self.settings.home)
            && let Err(err) = pools.check(&run.params.needs)
        {
            return Some(format!("pool units the daemon lacks: {err}"));
        }
        if !run.params.needs.is_empty()
            && let Ok(pools) = crate::node_pools::published(&self.settings.home)
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
                let taken = other.units();
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
    pub async fn run_counts(&self) -> Result<StateCounts<RunState>> {
        Ok(self.store.run_counts().await?)
    }

    /// How many runs are pending, starting, running, stopping or retrying: an index range, as
    /// cheap with a year of finished runs as with none.
    pub async fn live_run_counts(&self) -> Result<StateCounts<RunState>> {
        Ok(self.store.live_run_counts().await?)
    }

    pub async fn runs(&self, filter: &RunQuery) -> Result<Vec<RunSummary>> {
        self.summaries(self.store.list_runs(filter).await?).await
    }

    /// Runs as listings show them, each with its progress, and a waiting run with what it
    /// waits for (the page's open edges in one set query, not one per run).
    async fn summaries(&self, runs: Vec<Run>) -> Result<Vec<RunSummary>> {
        let waiting: Vec<Uuid> =
            runs.iter().filter(|r| r.state == RunState::Pending && r.deps_open > 0).map(|r| r.id).collect();
        let mut open: HashMap<Uuid, Vec<crate::model::Dependency>> = HashMap::new();
        if !waiting.is_empty() {
            for (run, dep) in self.store.open_dependencies(&waiting).await? {
                open.entry(run).or_default().push(dep);
            }
        }
        let mut summaries = Vec::with_capacity(runs.len());
        for run in runs {
            let progress = self.run_progress_of(&run).await?;
            let waits_for = open.remove(&run.id).unwrap_or_default();
            summaries.push(RunSummary { progress, waits_for, ..RunSummary::from(&run) });
        }
        Ok(summaries)
    }

    pub async fn run_events(&self, prefix: &str) -> Result<(Run, Vec<Event>)> {
        let run = self.resolve_run(prefix).await?;
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
}
