//! `lachesis mcp`: the reference's RL tools for agents, over MCP on stdio (rmcp). Every tool
//! calls the service layer and answers JSON text with the reference's keys and types, plus what
//! lachesis knows more under keys of its own (queue position, stage states, events). Errors are
//! answers too (`{"error": …}`), as in the reference, worded to name MCP tools.
//! `answers` shapes run results; `inference` waits for inference tests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod answers;
mod inference;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServiceExt, schemars, tool, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::environments::EditError;
use crate::model::RunQuery;
use crate::service::{Service, ServiceError, SubmitRequest, TestRequest};

use answers::answer;

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
    /// Queue it held: not started until it is released
    #[serde(default)]
    pub hold: bool,
    /// Fail the run when an attempt runs this long (e.g. "10h"); overrides the workflow's
    /// `time_limit`
    #[serde(default)]
    pub time_limit: Option<String>,
    /// Runs to wait for before this one starts (default: none)
    #[serde(default)]
    pub after: Vec<AfterArg>,
}

/// One run to wait for.
#[derive(Deserialize, schemars::JsonSchema, Default)]
pub struct AfterArg {
    /// The run id (or a unique prefix of it)
    pub run: String,
    /// "ok" (it completed; the default), "any" (it ended) or "failed" (it failed)
    #[serde(default)]
    pub when: Option<String>,
    /// A name for its values in this run's variables ({after.NAME.trained_weights})
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct TestArgs {
    /// Steps (groups) per model (default 3; more is rarely needed for a test)
    #[serde(default = "default_steps")]
    pub num_steps: u32,
    /// Completions per step (default 16, as in training)
    #[serde(default = "default_group_size")]
    pub group_size: u32,
    /// Model ids at the provider (default: qwen/qwen3-8b, z-ai/glm-4.7-flash, minimax/minimax-m2.7)
    #[serde(default)]
    pub models: Option<Vec<String>>,
    /// An OpenAI-compatible base URL (default: OpenRouter)
    #[serde(default)]
    pub provider: Option<String>,
    /// The provider's server type: openai (default), vllm or sglang
    #[serde(default)]
    pub server_type: Option<String>,
    /// The environment variable holding the provider's key (default OPENROUTER_API_KEY for OpenRouter)
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Wait for the results (default true); false answers at once with the test id
    #[serde(default)]
    pub wait: Option<bool>,
}

fn default_steps() -> u32 {
    crate::inference::spec::DEFAULT_STEPS
}

fn default_group_size() -> u32 {
    crate::inference::spec::DEFAULT_GROUP_SIZE
}

#[tool_router(server_handler)]
impl RlTools {
    #[tool(
        description = "List the RL environments lachesis can train (name, class, file path, description). Read an environment's file_path to learn how it loads data, builds prompts and scores answers before choosing one."
    )]
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
            "tips": [
                "Use rl_select_environment(name) to pick one, then rl_get_current_config().",
                "Read the file_path with file tools to see how the environment loads data and scores answers.",
            ],
        }))
    }

    #[tool(
        description = "Select the environment to train; loads its configurable fields with their defaults. Next: rl_get_current_config() to see them, rl_edit_config() to change them, rl_test_inference() to check the environment works."
    )]
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
                answer(json!({ "error": answers::agent_error(&self.service, &err), "available": available }))
            }
        }
    }

    #[tool(
        description = "The selected environment's configuration: fields you may change (with current values) and locked infrastructure fields (tokenizer, URLs, limits, LoRA rank, learning rate) that you may not."
    )]
    async fn rl_get_current_config(&self) -> String {
        match self.service.config().await {
            Ok(view) => {
                let field = |f: &crate::service::FieldView| {
                    let mut item = json!({ "name": f.name, "type": f.type_name, "default": f.default, "description": f.description.clone().unwrap_or_default(), "current_value": f.value });
                    if f.locked {
                        item["locked_value"] = f.value.clone();
                    }
                    item
                };
                answer(json!({
                    "environment": view.environment,
                    "configurable_fields": view.configurable_fields.iter().map(field).collect::<Vec<_>>(),
                    "locked_fields": view.locked_fields.iter().map(field).collect::<Vec<_>>(),
                    "tip": "Use rl_edit_config(field, value) to change any configurable field.",
                }))
            }
            Err(err) => answers::error(&self.service, &err),
        }
    }

    #[tool(
        description = "Change one configurable field of the selected environment (see rl_get_current_config() for the fields; each environment has its own). Locked infrastructure fields are refused."
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
            Err(ServiceError::Edit(EditError::Locked { field, value })) => answer(json!({
                "error": format!("Field '{field}' is locked and cannot be changed"),
                "locked_value": value,
            })),
            Err(ServiceError::Edit(EditError::Unknown { field, .. })) => {
                let all = self.service.config().await.map(|view| {
                    view.configurable_fields
                        .iter()
                        .chain(&view.locked_fields)
                        .map(|f| f.name.clone())
                        .collect()
                });
                answer(json!({
                    "error": format!("Unknown field '{field}'"),
                    "available_fields": all.unwrap_or_else(|_| Vec::<String>::new()),
                }))
            }
            Err(err) => answers::error(&self.service, &err),
        }
    }

    #[tool(
        description = "Start training the selected environment with its current config; answers at once with the run id. Training takes hours: test the environment with rl_test_inference() first, then follow the run with rl_check_status(run_id) no more often than every 30 minutes."
    )]
    async fn rl_start_training(&self, Parameters(args): Parameters<StartArgs>) -> String {
        // The selected environment, as the reference starts it; with none selected, the service
        // asks for one only if the workflow runs an environment (the demo starts without).
        let env_name = self.service.selection().await.ok().map(|selection| selection.env_name);
        let mut after = Vec::with_capacity(args.after.len());
        for dep in args.after {
            let when = match dep.when.as_deref().map(str::parse).transpose() {
                Ok(when) => when.unwrap_or_default(),
                Err(problem) => return answer(json!({ "error": problem })),
            };
            after.push(crate::service::After {
                target: crate::service::AfterTarget::Run(dep.run),
                when,
                name: dep.name,
            });
        }
        let time_limit = match args.time_limit.as_deref().map(str::parse::<crate::workflow::Dur>) {
            None => None,
            Some(Ok(limit)) => Some(limit.0),
            Some(Err(problem)) => return answer(json!({ "error": format!("time_limit: {problem}") })),
        };
        let request = SubmitRequest {
            workflow: args.workflow,
            env_name,
            hold: args.hold,
            time_limit,
            after,
            ..SubmitRequest::default()
        };
        match self.service.submit(request).await {
            Ok(run) => {
                let position = self.service.status_of(&run).await.ok().and_then(|s| s.queue_position);
                let logs: BTreeMapValue = run
                    .spec
                    .stages
                    .iter()
                    .map(|s| (s.name.clone(), json!(run.run_dir.join(s.log_file()))))
                    .collect();
                let mut out = json!({
                    "run_id": run.id,
                    "status": run.state,
                    "environment": run.env_name,
                    "config": run.params.config,
                    "wandb_project": crate::service::wandb_project(&run),
                    "wandb_run_name": crate::service::wandb_run_name(run.env_name.as_deref(), &run.id),
                    "config_path": run.run_dir.join("config.yaml"),
                    "logs": logs,
                    "message": "Training queued. Use rl_check_status(run_id) to follow it, no more often than every 30 minutes.",
                    "workflow": run.workflow,
                    "queue_position": position,
                    "daemon_running": answers::daemon_running(&self.service),
                    "held": run.held_at.is_some(),
                });
                if let Some(note) = answers::start_note(&self.service, run.state, position) {
                    out["note"] = json!(note);
                }
                answer(out)
            }
            Err(err) => answers::error(&self.service, &err),
        }
    }

    #[tool(
        description = "A training run's status: state, each process, running time, W&B metrics (step, reward_mean, percent_correct) and recent events. Check at most every 30 minutes per run: inside that window you get the last answer again and when a fresh one is due."
    )]
    async fn rl_check_status(&self, Parameters(args): Parameters<RunArgs>) -> String {
        let run = match self.service.resolve(&args.run_id).await {
            Ok(run) => run,
            Err(err) => return self.unknown_run(&err).await,
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
        let fresh = match self.service.status_of(&run).await {
            Ok(status) => answers::status(&self.service, &run, &status).await,
            Err(err) => return answers::error(&self.service, &err),
        };
        if let Ok(mut snapshots) = self.snapshots.lock() {
            snapshots.insert(key, (Instant::now(), fresh.clone()));
        }
        answer(fresh)
    }

    #[tool(
        description = "Stop a training run (a queued one is cancelled): use it when metrics look bad, training has stalled, or you want other settings. Its processes get SIGTERM, then SIGKILL after a grace period."
    )]
    async fn rl_stop_training(&self, Parameters(args): Parameters<RunArgs>) -> String {
        match self.service.stop(&args.run_id).await {
            Ok(run) => answer(json!({
                "message": format!("Stopping training run '{}'", run.id),
                "run_id": run.id,
                "status": run.state,
            })),
            Err(ServiceError::AlreadyEnded { id, state }) => answer(json!({
                "message": format!("Run '{id}' is not running (status: {state})"),
                "run_id": id,
                "status": state,
            })),
            Err(err @ ServiceError::UnknownRun(_)) => self.unknown_run(&err).await,
            Err(err) => answers::error(&self.service, &err),
        }
    }

    #[tool(
        description = "Final results of a training run: W&B summary (final_metrics), sampled history, trained weights, and each process's exit and duration. Also takes an inference-test id from rl_test_inference(wait=false)."
    )]
    async fn rl_get_results(&self, Parameters(args): Parameters<RunArgs>) -> String {
        if let Ok(status) = self.service.test_status(&args.run_id).await {
            return answer(if status.test.state.is_terminal() {
                inference::layout(&status)
            } else {
                inference::queued(&status.test)
            });
        }
        let results = match self.service.results(&args.run_id).await {
            Ok(results) => results,
            Err(err) => return answers::error(&self.service, &err),
        };
        // W&B's history read now; the stored one stands in when W&B can't answer.
        let history = match self.service.resolve(&results.status.run.id.to_string()).await {
            Ok(run) => self.service.run_history(&run).await,
            Err(err) => Err(err.to_string()),
        };
        answer(answers::results(&results, history))
    }

    #[tool(
        description = "List all training runs (queued, running and ended) with their status, newest first."
    )]
    async fn rl_list_runs(&self) -> String {
        match self.service.list(&RunQuery { state: None, limit: Some(100) }).await {
            Ok(runs) => {
                let runs: Vec<Value> = runs.iter().map(answers::run_item).collect();
                answer(json!({ "runs": runs, "count": runs.len() }))
            }
            Err(err) => answers::error(&self.service, &err),
        }
    }

    #[tool(
        description = "Test the selected environment before training: a few steps of inference and scoring per model through an OpenAI-compatible provider (OpenRouter by default; 3 steps x 16 completions per model, 3 models). Shows whether the environment loads, builds prompts, parses answers and scores them. Waits for the results (minutes), reporting progress; wait=false answers at once with a test id for rl_get_results()."
    )]
    async fn rl_test_inference(
        &self,
        Parameters(args): Parameters<TestArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> String {
        if self.service.selection().await.is_err() {
            return answer(json!({ "error": answers::NO_SELECTION }));
        }
        let request = TestRequest {
            steps: Some(args.num_steps),
            group_size: Some(args.group_size),
            models: args.models.unwrap_or_default(),
            provider: args.provider,
            server_type: args.server_type,
            api_key_env: args.api_key_env,
            ..TestRequest::default()
        };
        let test = match self.service.submit_test(request).await {
            Ok(test) => test,
            Err(err) => return answers::error(&self.service, &err),
        };
        if args.wait == Some(false) {
            let mut out = inference::queued(&test);
            if !answers::daemon_running(&self.service) {
                out["note"] =
                    json!(answers::start_note(&self.service, crate::model::RunState::Pending, None));
            }
            return answer(out);
        }
        if !answers::daemon_running(&self.service) {
            let mut out = inference::queued(&test);
            out["note"] = json!(answers::start_note(&self.service, crate::model::RunState::Pending, None));
            out["message"] = json!(
                "Not waiting: no daemon runs the test. rl_get_results(test_id) gives its results once one has."
            );
            return answer(out);
        }
        match inference::wait(&self.service, &test, &ctx).await {
            (Some(status), cancelled) => {
                let mut out = inference::layout(&status);
                if cancelled {
                    out["error"] = json!("the client cancelled the call: the test was cancelled");
                }
                answer(out)
            }
            (None, _) => answer(
                json!({ "error": "the test could not be read back from the store", "test_id": test.id }),
            ),
        }
    }

    #[tool(
        description = "Check what training needs: the store, a running daemon, Python and atroposlib, environments, and keys (where each comes from, never its value). Call it when a start or test fails for an unclear reason."
    )]
    async fn rl_health_check(&self) -> String {
        let mut out = crate::doctor::checkup(&self.service).await.to_json();
        let running = answers::daemon_running(&self.service);
        let filter = RunQuery { state: Some(crate::model::RunState::Pending), limit: Some(100) };
        let queued = self.service.list(&filter).await.map(|r| r.len()).unwrap_or(0);
        out["daemon_running"] = json!(running);
        out["queued_runs"] = json!(queued);
        out["active_runs"] = json!(answers::active_runs(&self.service).await);
        if !running {
            out["note"] = json!(answers::start_note(&self.service, crate::model::RunState::Pending, None));
        } else if queued > 0 {
            out["note"] = json!(format!("{queued} run(s) queued, waiting for a free slot."));
        }
        answer(out)
    }
}

type BTreeMapValue = std::collections::BTreeMap<String, Value>;

impl RlTools {
    pub fn new(service: Service) -> RlTools {
        RlTools { service, interval: status_interval(), snapshots: Arc::default() }
    }

    /// The reference's answer for an id that names no run: the error and the runs still active.
    async fn unknown_run(&self, err: &ServiceError) -> String {
        answer(json!({
            "error": answers::agent_error(&self.service, err),
            "active_runs": answers::active_runs(&self.service).await,
        }))
    }
}

/// Serves the tools on stdin/stdout until the client goes away. Logs go to stderr only.
pub async fn serve(service: Service) -> Result<(), Box<dyn std::error::Error>> {
    let running = RlTools::new(service).serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(workflow: Option<&str>) -> Parameters<StartArgs> {
        Parameters(StartArgs {
            workflow: workflow.map(str::to_string),
            hold: false,
            time_limit: None,
            after: Vec::new(),
        })
    }

    /// Only a workflow that runs an environment asks for a selection; `run start -w demo` and
    /// `rl_start_training(workflow="demo")` agree.
    #[tokio::test]
    async fn a_workflow_without_an_environment_starts_with_nothing_selected() {
        let home = tempfile::tempdir().unwrap();
        let settings = crate::settings::Settings::new(Some(home.path().to_path_buf()), None);
        std::fs::create_dir_all(home.path().join("workflows")).unwrap();
        std::fs::write(
            home.path().join("workflows/envy.yaml"),
            "name: envy\nstages:\n  - name: env\n    argv: [\"{python}\", \"{env_file}\", serve]\n",
        )
        .unwrap();
        let tools = RlTools::new(Service::open(settings).await.unwrap());

        let started: Value =
            serde_json::from_str(&tools.rl_start_training(start(Some("demo"))).await).unwrap();
        assert_eq!(started["status"], "pending", "{started:#}");
        assert_eq!(started["workflow"], "demo");
        assert_eq!(started["environment"], Value::Null);

        let refused: Value =
            serde_json::from_str(&tools.rl_start_training(start(Some("envy"))).await).unwrap();
        assert_eq!(refused["error"], answers::NO_SELECTION, "{refused:#}");
    }

    /// The status names what the current attempt resumed from, beside the reference's keys.
    #[tokio::test]
    async fn the_status_says_what_the_attempt_resumed_from() {
        let home = tempfile::tempdir().unwrap();
        let settings = crate::settings::Settings::new(Some(home.path().to_path_buf()), None);
        let service = Service::open(settings).await.unwrap();
        let spec = crate::workflow::Workflow::parse(
            std::path::Path::new("r.yaml"),
            "name: r\nstages:\n  - {name: trainer, argv: ['true']}\n",
        )
        .unwrap();
        let mut params = crate::model::RunParams::default();
        params.resolved.insert("resume.step".into(), "6".into());
        params.resolved.insert("resume.path".into(), "tinker://a/weights/000006".into());
        let id = uuid::Uuid::new_v4();
        let mut run = crate::model::Run::queued(id, spec, home.path().join("runs"), 0, params);
        run.attempt = 2;
        let stages = run.pending_stages();
        service.insert_as_given(&[(run, stages)]).await.unwrap();
        let tools = RlTools::new(service);
        let status: Value = serde_json::from_str(
            &tools.rl_check_status(Parameters(RunArgs { run_id: id.to_string() })).await,
        )
        .unwrap();
        assert_eq!(
            status["resumed_from"],
            json!({"step": 6, "path": "tinker://a/weights/000006"}),
            "{status:#}"
        );
        assert_eq!(status["checkpoint"], Value::Null, "none recorded yet");
        assert_eq!(status["run_id"], json!(id), "the reference's keys stay");
    }

    /// `hold` and `time_limit` are the run's, as `run start --hold --time-limit` gives them.
    #[tokio::test]
    async fn a_run_started_by_an_agent_may_be_held_and_limited() {
        let home = tempfile::tempdir().unwrap();
        let settings = crate::settings::Settings::new(Some(home.path().to_path_buf()), None);
        let service = Service::open(settings).await.unwrap();
        let tools = RlTools::new(service.clone());
        let args = |time_limit: &str| {
            Parameters(StartArgs {
                workflow: Some("demo".into()),
                hold: true,
                time_limit: Some(time_limit.into()),
                after: Vec::new(),
            })
        };
        let started: Value = serde_json::from_str(&tools.rl_start_training(args("10h")).await).unwrap();
        assert_eq!(started["held"], true, "{started:#}");
        let run = service.resolve(started["run_id"].as_str().unwrap()).await.unwrap();
        assert!(run.held_at.is_some());
        assert_eq!(run.spec.time_limit, Some(crate::workflow::Dur(Duration::from_secs(36_000))));
        let refused: Value = serde_json::from_str(&tools.rl_start_training(args("soon")).await).unwrap();
        let error = refused["error"].as_str().unwrap();
        assert!(error.starts_with("time_limit: 'soon' is not a duration"), "{error}");
    }
}
