//! `lachesis mcp`: the reference's RL tools for agents, over MCP on stdio (rmcp). Every tool
//! calls the service layer and answers JSON text with the reference's keys, plus what lachesis
//! knows more (queue position, stage exit codes, events). Errors are answers too
//! (`{"error": …}`), as in the reference, so an agent can read and act on them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::handler::server::wrapper::Parameters;
use rmcp::{ServiceExt, schemars, tool, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::service::{Service, SubmitRequest, TestRequest};
use crate::store::RunFilter;

/// How often an agent may get a fresh `rl_check_status` per run (the reference: 30 minutes);
/// inside the window it gets the last snapshot and when the next fresh one is allowed.
pub fn status_interval() -> Duration {
    std::env::var("LACHESIS_STATUS_INTERVAL")
        .ok()
        .and_then(|v| v.parse::<crate::workflow::Dur>().ok())
        .map_or(Duration::from_secs(1800), |d| d.0)
}

#[derive(Clone)]
pub struct RlTools {
    service: Service,
    interval: Duration,
    /// Last fresh status per run: when, and what it said.
    snapshots: Arc<Mutex<HashMap<String, (Instant, Value)>>>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct NameArgs {
    /// Environment name, from rl_list_environments
    pub name: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct EditArgs {
    /// A configurable field, from rl_get_current_config
    pub field: String,
    /// Its new value (number, boolean, string, list…)
    pub value: Value,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct RunArgs {
    /// The run id (or a unique prefix of it)
    pub run_id: String,
}

#[derive(Deserialize, schemars::JsonSchema, Default)]
pub struct StartArgs {
    /// Workflow to run (default: the default workflow, tinker-atropos)
    #[serde(default)]
    pub workflow: Option<String>,
}

#[derive(Deserialize, schemars::JsonSchema, Default)]
pub struct TestArgs {
    /// Steps (groups) per model (default 3)
    #[serde(default)]
    pub num_steps: Option<u32>,
    /// Completions per step (default 16)
    #[serde(default)]
    pub group_size: Option<u32>,
    /// Model ids (default: qwen/qwen3-8b, z-ai/glm-4.7-flash, minimax/minimax-m2.5)
    #[serde(default)]
    pub models: Option<Vec<String>>,
}

fn answer(value: Value) -> String {
    serde_json::to_string_pretty(&value).unwrap_or_else(|_| "{}".into())
}

fn error(err: impl std::fmt::Display) -> String {
    answer(json!({ "error": err.to_string() }))
}

#[tool_router(server_handler)]
impl RlTools {
    #[tool(description = "List the Atropos environments lachesis found (name, class, file, description).")]
    async fn rl_list_environments(&self) -> String {
        let discovery = self.service.environments();
        let environments: Vec<Value> = discovery
            .environments
            .iter()
            .map(|e| json!({ "name": e.name, "class_name": e.class_name, "file_path": e.file_path, "description": e.description }))
            .collect();
        answer(json!({
            "environments": environments,
            "count": environments.len(),
            "warnings": discovery.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
            "tips": ["Use rl_select_environment(name) to pick one, then rl_get_current_config()."],
        }))
    }

    #[tool(description = "Select an environment for training; loads its configurable fields with defaults.")]
    async fn rl_select_environment(&self, Parameters(args): Parameters<NameArgs>) -> String {
        match self.service.select(&args.name).await {
            Ok(selection) => answer(json!({
                "message": format!("Selected environment: {}", selection.env_name),
                "environment": selection.env_name,
                "file_path": selection.env_file,
                "configurable_fields": selection.config.len(),
                "fell_back": selection.fell_back,
            })),
            Err(err) => {
                let available = self.service.environments().names();
                answer(json!({ "error": err.to_string(), "available": available }))
            }
        }
    }

    #[tool(
        description = "The selected environment's configurable fields (with current values) and locked fields."
    )]
    async fn rl_get_current_config(&self) -> String {
        match self.service.config().await {
            Ok(view) => {
                let configurable: Vec<Value> = view
                    .configurable_fields
                    .iter()
                    .map(|f| json!({ "name": f.name, "type": f.type_name, "default": f.default, "description": f.description, "current_value": f.value }))
                    .collect();
                let locked: Vec<Value> = view
                    .locked_fields
                    .iter()
                    .map(|f| json!({ "name": f.name, "locked_value": f.value }))
                    .collect();
                answer(json!({
                    "environment": view.environment,
                    "configurable_fields": configurable,
                    "locked_fields": locked,
                    "tip": "Use rl_edit_config(field, value) to change any configurable field.",
                }))
            }
            Err(err) => error(err),
        }
    }

    #[tool(
        description = "Change one configurable field of the selected environment (locked fields are refused)."
    )]
    async fn rl_edit_config(&self, Parameters(args): Parameters<EditArgs>) -> String {
        let raw = match &args.value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match self.service.set_config(&args.field, &raw).await {
            Ok(value) => {
                let config = self.service.selection().await.map(|s| json!(s.config)).unwrap_or(Value::Null);
                answer(
                    json!({ "message": format!("Updated {} = {value}", args.field), "field": args.field, "value": value, "config": config }),
                )
            }
            Err(err) => error(err),
        }
    }

    #[tool(
        description = "Queue a training run of the selected environment and return at once with its run id."
    )]
    async fn rl_start_training(&self, Parameters(args): Parameters<StartArgs>) -> String {
        let env_name = self.service.selection().await.ok().map(|s| s.env_name);
        let request = SubmitRequest { workflow: args.workflow, env_name, ..SubmitRequest::default() };
        match self.service.submit(request).await {
            Ok(run) => {
                let position = self.service.status_of(&run).await.ok().and_then(|s| s.queue_position);
                let stages: BTreeMapValue = run
                    .spec
                    .stages
                    .iter()
                    .map(|s| (s.name.clone(), json!(run.run_dir.join(s.log_file()))))
                    .collect();
                answer(json!({
                    "run_id": run.id,
                    "status": run.state,
                    "environment": run.env_name,
                    "workflow": run.workflow,
                    "config": run.params.config,
                    "wandb_run_name": run.env_name.as_ref().map(|e| format!("{e}-{}", run.short_id())),
                    "config_path": run.run_dir.join("config.yaml"),
                    "logs": stages,
                    "queue_position": position,
                    "message": "Run queued. Use rl_check_status(run_id) to monitor it.",
                }))
            }
            Err(err) => error(err),
        }
    }

    #[tool(
        description = "A run's status: state, stage exit codes, running time, recent events. Rate limited per run; inside the window the last snapshot is returned."
    )]
    async fn rl_check_status(&self, Parameters(args): Parameters<RunArgs>) -> String {
        let run = match self.service.resolve(&args.run_id).await {
            Ok(run) => run,
            Err(err) => return error(err),
        };
        let key = run.id.to_string();
        if let Some((at, snapshot)) = self.snapshots.lock().ok().and_then(|s| s.get(&key).cloned())
            && at.elapsed() < self.interval
        {
            let remaining = self.interval - at.elapsed();
            let mut snapshot = snapshot;
            snapshot["rate_limited"] = json!(true);
            snapshot["snapshot_age_seconds"] = json!(at.elapsed().as_secs());
            snapshot["next_check_in_seconds"] = json!(remaining.as_secs());
            snapshot["message"] = json!(format!(
                "Rate limited: this is the last status; a fresh one is available in {} minutes.",
                remaining.as_secs().div_ceil(60)
            ));
            return answer(snapshot);
        }
        let fresh = self.status_json(&key).await;
        if let Ok(mut snapshots) = self.snapshots.lock() {
            snapshots.insert(key, (Instant::now(), fresh.clone()));
        }
        answer(fresh)
    }

    #[tool(
        description = "Stop a run (a queued one is cancelled); its stages get SIGTERM, then SIGKILL after the grace period."
    )]
    async fn rl_stop_training(&self, Parameters(args): Parameters<RunArgs>) -> String {
        match self.service.stop(&args.run_id).await {
            Ok(run) => answer(
                json!({ "message": format!("Stopping run '{}'", run.id), "run_id": run.id, "status": run.state }),
            ),
            Err(err) => error(err),
        }
    }

    #[tool(
        description = "A run's results: final state, reason, per-stage exit codes and durations, trained weights if the trainer reported them. Also takes an inference-test id."
    )]
    async fn rl_get_results(&self, Parameters(args): Parameters<RunArgs>) -> String {
        if let Ok(crate::service::TestStatus { test, tasks, .. }) =
            self.service.test_status(&args.run_id).await
        {
            return answer(
                json!({ "test_id": test.id, "status": test.state, "environment": test.env_name, "reason": test.reason, "results": test.results, "tasks": tasks }),
            );
        }
        match self.service.results(&args.run_id).await {
            Ok(results) => {
                let stages: Vec<Value> = results
                    .status
                    .stages
                    .iter()
                    .map(|s| json!({ "stage": s.name, "state": s.record.state, "exit": s.record.exit, "duration_seconds": results.durations.get(&s.name), "log": s.log_path }))
                    .collect();
                let run = &results.status.run;
                answer(json!({
                    "run_id": run.id,
                    "status": run.state,
                    "environment": run.env_name,
                    "reason": run.reason,
                    "wandb_project": results.metrics.wandb_project,
                    "wandb_run_name": results.metrics.wandb_run_name,
                    "metrics": results.metrics.snapshot,
                    "metrics_age": results.metrics.age,
                    "wandb_error": results.metrics.wandb_error,
                    "stages": stages,
                    "trained_weights": results.trained_weights,
                    "history": results.history,
                    "metric_history": results.metric_history,
                }))
            }
            Err(err) => error(err),
        }
    }

    #[tool(description = "List runs, newest first.")]
    async fn rl_list_runs(&self) -> String {
        match self.service.list(&RunFilter { state: None, limit: Some(100) }).await {
            Ok(runs) => {
                let runs: Vec<Value> = runs
                    .iter()
                    .map(|r| json!({ "run_id": r.id, "environment": r.env_name, "workflow": r.workflow, "status": r.state, "reason": r.reason }))
                    .collect();
                answer(json!({ "runs": runs, "count": runs.len() }))
            }
            Err(err) => error(err),
        }
    }

    #[tool(
        description = "Queue an inference test of the selected environment against models (OpenRouter); returns its id at once. Results via rl_get_results(id)."
    )]
    async fn rl_test_inference(&self, Parameters(args): Parameters<TestArgs>) -> String {
        let request = TestRequest {
            steps: args.num_steps,
            group_size: args.group_size,
            models: args.models.unwrap_or_default(),
            ..TestRequest::default()
        };
        match self.service.submit_test(request).await {
            Ok(test) => answer(json!({
                "test_id": test.id,
                "status": test.state,
                "environment": test.env_name,
                "models": test.spec.models,
                "test_config": { "num_steps": test.spec.steps, "group_size": test.spec.group_size },
                "message": "Inference test queued; use rl_get_results(test_id) for results.",
            })),
            Err(err) => error(err),
        }
    }

    #[tool(
        description = "Check what runs need: store, daemon, Python, environments, credentials (values never shown)."
    )]
    async fn rl_health_check(&self) -> String {
        answer(crate::doctor::report(&self.service).await.to_json())
    }
}

type BTreeMapValue = std::collections::BTreeMap<String, Value>;

impl RlTools {
    pub fn new(service: Service) -> RlTools {
        RlTools { service, interval: status_interval(), snapshots: Arc::default() }
    }

    /// A fresh status; the run is resolved once and everything else read by its id.
    async fn status_json(&self, id: &str) -> Value {
        let status = match self.service.resolve(id).await {
            Ok(full) => match self.service.status_of(&full).await {
                Ok(status) => (full, status),
                Err(err) => return json!({ "error": err.to_string() }),
            },
            Err(err) => return json!({ "error": err.to_string() }),
        };
        let (full, status) = status;
        let run = &status.run;
        let now = crate::model::now_millis();
        let running_ms = run.started_at.map(|s| run.ended_at.unwrap_or(now) - s);
        let processes: BTreeMapValue = status
            .stages
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    json!({ "state": s.record.state, "exit": s.record.exit, "pid": s.record.process.as_ref().map(|p| p.pid) }),
                )
            })
            .collect();
        let logs: BTreeMapValue = status.stages.iter().map(|s| (s.name.clone(), json!(s.log_path))).collect();
        let events = self.service.events_after(run.id, 0).await.unwrap_or_default();
        let recent: Vec<Value> = events
            .iter()
            .rev()
            .take(10)
            .rev()
            .map(|e| json!({ "at": e.at, "stage": e.stage, "message": e.message }))
            .collect();
        let metrics = self.service.run_metrics(&full).await;
        json!({
            "run_id": run.id,
            "status": run.state,
            "environment": run.env_name,
            "workflow": run.workflow,
            "attempt": run.attempt,
            "node": run.node,
            "reason": run.reason,
            "progress": run.progress,
            "running_time_minutes": running_ms.map(|ms| ms as f64 / 60_000.0),
            "processes": processes,
            "logs": logs,
            "queue_position": status.queue_position,
            "events": recent,
            "metrics": metrics.snapshot,
            "metrics_age": metrics.age,
            "wandb_error": metrics.wandb_error,
            "rate_limited": false,
        })
    }
}

/// Serves the tools on stdin/stdout until the client goes away. Logs go to stderr only.
pub async fn serve(service: Service) -> Result<(), Box<dyn std::error::Error>> {
    let running = RlTools::new(service).serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
