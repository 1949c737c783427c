//! Training tools: start a run, check, stop, list runs, get results.

use std::time::Instant;

use serde_json::{Value, json};

use super::RlTools;
use super::answers::{self, answer};
use super::args::{RunArgs, StartArgs};
use super::inference;
use crate::model::RunQuery;
use crate::service::{RunRequest, ServiceError};

impl RlTools {
    pub(super) async fn start_training(&self, args: StartArgs) -> String {
        let mut request = match RunRequest::from_value(Value::Object(args.0)) {
            Ok(request) => request,
            Err(err) => return answer(json!({ "error": err.to_string() })),
        };
        // The selected environment, as the reference starts it; with none selected, the service
        // asks for one only if the workflow runs an environment (the demo starts without).
        if request.env.is_none() {
            request.env = self.service.environment_selection().await.ok().map(|selection| selection.env_name);
        }
        match self.service.submit_run(request).await {
            Ok(run) => {
                let position = self.service.run_status_of(&run).await.ok().and_then(|s| s.queue_position);
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

    pub(super) async fn check_status(&self, args: RunArgs) -> String {
        let run = match self.service.resolve_run(&args.run_id).await {
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
        let fresh = match self.service.run_status_of(&run).await {
            Ok(status) => answers::status(&self.service, &run, &status).await,
            Err(err) => return answers::error(&self.service, &err),
        };
        if let Ok(mut snapshots) = self.snapshots.lock() {
            snapshots.insert(key, (Instant::now(), fresh.clone()));
        }
        answer(fresh)
    }

    pub(super) async fn stop_training(&self, args: RunArgs) -> String {
        match self.service.stop_run(&args.run_id).await {
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

    pub(super) async fn get_results(&self, args: RunArgs) -> String {
        if let Ok(status) = self.service.test_status(&args.run_id).await {
            return answer(if status.test.state.is_terminal() {
                inference::layout(&status)
            } else {
                inference::queued(&status.test)
            });
        }
        let results = match self.service.run_results(&args.run_id).await {
            Ok(results) => results,
            Err(err) => return answers::error(&self.service, &err),
        };
        // W&B's history read now; the stored one stands in when W&B can't answer.
        let history = match self.service.resolve_run(&results.status.run.id.to_string()).await {
            Ok(run) => self.service.run_history(&run).await,
            Err(err) => Err(err.to_string()),
        };
        answer(answers::results(&results, history))
    }

    pub(super) async fn list_runs(&self) -> String {
        match self.service.runs(&RunQuery { state: None, limit: Some(100) }).await {
            Ok(runs) => {
                let runs: Vec<Value> = runs.iter().map(answers::run_item).collect();
                answer(json!({ "runs": runs, "count": runs.len() }))
            }
            Err(err) => answers::error(&self.service, &err),
        }
    }
}

type BTreeMapValue = std::collections::BTreeMap<String, Value>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::Service;
    use std::time::Duration;

    fn start(workflow: Option<&str>) -> StartArgs {
        args(json!({ "workflow": workflow }))
    }

    fn args(value: Value) -> StartArgs {
        serde_json::from_value(value).unwrap()
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

        let started: Value = serde_json::from_str(&tools.start_training(start(Some("demo"))).await).unwrap();
        assert_eq!(started["status"], "pending", "{started:#}");
        assert_eq!(started["workflow"], "demo");
        assert_eq!(started["environment"], Value::Null);

        let refused: Value = serde_json::from_str(&tools.start_training(start(Some("envy"))).await).unwrap();
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
        service.insert_runs_as_given(&[(run, stages)]).await.unwrap();
        let tools = RlTools::new(service);
        let status: Value =
            serde_json::from_str(&tools.check_status(RunArgs { run_id: id.to_string() }).await).unwrap();
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
        let limited =
            |time_limit: &str| args(json!({ "workflow": "demo", "hold": true, "time_limit": time_limit }));
        let started: Value = serde_json::from_str(&tools.start_training(limited("10h")).await).unwrap();
        assert_eq!(started["held"], true, "{started:#}");
        let run = service.resolve_run(started["run_id"].as_str().unwrap()).await.unwrap();
        assert!(run.held_at.is_some());
        assert_eq!(run.spec.time_limit, Some(crate::workflow::Dur(Duration::from_secs(36_000))));
        let refused: Value = serde_json::from_str(&tools.start_training(limited("soon")).await).unwrap();
        let error = refused["error"].as_str().unwrap();
        assert!(error.starts_with("time_limit: 'soon' is not a duration"), "{error}");
        // A misspelt argument is an answer naming it, not a default silently taken.
        let typo: Value =
            serde_json::from_str(&tools.start_training(args(json!({ "workflw": "demo" }))).await).unwrap();
        assert!(typo["error"].as_str().unwrap().contains("unknown field `workflw`"), "{typo:#}");
    }
}
