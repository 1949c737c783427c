//! Shaping service answers into the reference tool's result keys and types, with lachesis's
//! extras under keys of their own; and errors worded for an agent (they name MCP tools, not
//! shell commands).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::model::{Exit, ProcessState, Run, RunState, Stage};
use crate::service::{RunResults, RunStatus, Service, ServiceError, wandb_run_name};

pub const NO_SELECTION: &str = "No environment selected. Use rl_select_environment(name) first.";

pub fn answer(value: Value) -> String {
    serde_json::to_string_pretty(&value).unwrap_or_else(|_| "{}".into())
}

/// An error as an agent should read it.
pub fn agent_error(service: &Service, err: &ServiceError) -> String {
    match err {
        ServiceError::NoSelection | ServiceError::NeedsEnvironment(_) => NO_SELECTION.into(),
        ServiceError::MissingCredentials { missing, workflow, .. } => format!(
            "{} not set (needed by {workflow}). Add it to {} (mode 600) or to the MCP server's environment, then call again; rl_health_check shows what is set.",
            missing.join(", "),
            service.settings.home.join(".env").display()
        ),
        ServiceError::MissingEnvArgument { env, parameter } => format!(
            "Environment '{env}' needs a value for '{parameter}' (its load_environment has no default for it). Use rl_edit_config(field=\"{parameter}\", value=...) first."
        ),
        ServiceError::UnknownRun(id) => format!("Run '{id}' not found"),
        ServiceError::EnvironmentFileMissing { name, path } => format!(
            "Environment file not found for '{name}' ({}). Use rl_list_environments() and rl_select_environment(name) again.",
            path.display()
        ),
        other => other.to_string(),
    }
}

pub fn error(service: &Service, err: &ServiceError) -> String {
    answer(json!({ "error": agent_error(service, err) }))
}

/// Ids of the runs that have not ended (the reference's `active_runs`), newest first.
pub async fn active_runs(service: &Service) -> Vec<String> {
    let filter = crate::model::RunQuery { state: None, limit: Some(100) };
    let runs = service.runs(&filter).await.unwrap_or_default();
    runs.iter().filter(|r| !r.state.is_terminal()).map(|r| r.id.to_string()).collect()
}

/// A stage as the reference shows a process: "running" until it has exited, then "exited (N)"
/// (a signal as -N, Python's convention). The real state is under `stages`.
pub fn process_text(stage: &Stage) -> String {
    match (stage.record.exit, stage.record.state) {
        (Some(Exit::Code(code)), _) => format!("exited ({code})"),
        (Some(Exit::Signal(signal)), _) => format!("exited (-{signal})"),
        (None, ProcessState::Lost) => "exited (-1)".into(),
        (None, _) => "running".into(),
    }
}

fn stage_logs(stages: &[Stage]) -> BTreeMap<String, Value> {
    stages.iter().map(|s| (s.name.clone(), json!(s.log_path))).collect()
}

fn stage_objects(stages: &[Stage]) -> Vec<Value> {
    stages
        .iter()
        .map(|s| json!({ "stage": s.name, "state": s.record.state, "exit": s.record.exit, "pid": s.record.process.as_ref().map(|p| p.pid), "log": s.log_path }))
        .collect()
}

/// Whether a daemon serves this home (it answers on the wake socket).
pub fn daemon_running(service: &Service) -> bool {
    crate::wake::poke(&service.settings.socket_path(), crate::wake::Poke::Probe)
}

/// What an agent should know about when a run will start: queued behind others, or no daemon.
pub fn start_note(service: &Service, state: RunState, queue_position: Option<usize>) -> Option<String> {
    if !daemon_running(service) {
        return Some(
            "No lachesis daemon is running for this store, so nothing starts until one does (`lachesis mcp` starts one unless given --no-daemon). rl_health_check says whether one is up."
                .into(),
        );
    }
    match (state, queue_position) {
        (RunState::Pending, Some(position)) if position > 1 => {
            Some(format!("Queued behind {} other run(s); it starts when a slot frees up.", position - 1))
        }
        _ => None,
    }
}

/// `rl_check_status`'s fresh answer.
pub async fn status(service: &Service, run: &Run, status: &RunStatus) -> Value {
    let summary = &status.run;
    let now = crate::model::now_millis();
    let running_ms = summary.started_at.map_or(0, |s| summary.ended_at.unwrap_or(now) - s);
    let processes: BTreeMap<String, Value> =
        status.stages.iter().map(|s| (s.name.clone(), json!(process_text(s)))).collect();
    let events = service.events_after(summary.id, 0).await.unwrap_or_default();
    let recent: Vec<Value> = events
        .iter()
        .rev()
        .take(10)
        .rev()
        .map(|e| json!({ "at": e.at, "stage": e.stage, "message": e.message }))
        .collect();
    let metrics = service.run_metrics(run).await;
    let mut out = json!({
        "run_id": summary.id,
        "status": summary.state,
        "environment": summary.env_name,
        "running_time_minutes": running_ms as f64 / 60_000.0,
        "processes": processes,
        "wandb_project": metrics.wandb_project,
        "wandb_run_name": metrics.wandb_run_name,
        "logs": stage_logs(&status.stages),
        // lachesis's extras
        "workflow": summary.workflow,
        "attempt": summary.attempt,
        "node": summary.node,
        "reason": summary.reason,
        "progress": summary.progress,
        "stages": stage_objects(&status.stages),
        "queue_position": status.queue_position,
        "waiting_for": status.waiting_for,
        "wandb_runs": status.wandb_runs,
        "checkpoint": status.checkpoint,
        "resumed_from": status.resumed_from,
        "events": recent,
        "metrics_age": metrics.age,
        "rate_limited": false,
    });
    if let Some(reason) = summary.reason.as_ref().filter(|_| summary.state == RunState::Failed) {
        out["error"] = json!(reason);
    }
    if let Some(note) = start_note(service, summary.state, status.queue_position)
        .filter(|_| summary.state == RunState::Pending)
    {
        out["note"] = json!(note);
    }
    if let Some(snapshot) = &metrics.snapshot {
        out["metrics"] = json!({
            "step": snapshot.step.unwrap_or(0),
            "reward_mean": snapshot.reward_mean,
            "percent_correct": snapshot.percent_correct,
            "eval_percent_correct": snapshot.eval_percent_correct,
            "loss": snapshot.loss,
            "state": snapshot.state,
        });
        if let Some(url) = &snapshot.url {
            out["wandb_url"] = json!(url);
        }
    }
    if let Some(err) = metrics.wandb_error {
        out["wandb_error"] = json!(err);
    }
    out
}

/// `rl_get_results`'s answer. `history` is W&B's sampled history (every logged key, as the
/// reference gives it) when W&B answers now, else the sampled rows the daemon stored while the run
/// ran (lachesis's field names), so it outlives W&B.
pub fn results(results: &RunResults, history: Result<Option<Vec<Map<String, Value>>>, String>) -> Value {
    let run = &results.status.run;
    let stages: Vec<Value> = results
        .status
        .stages
        .iter()
        .map(|s| json!({ "stage": s.name, "state": s.record.state, "exit": s.record.exit, "duration_seconds": results.durations.get(&s.name), "log": s.log_path }))
        .collect();
    let metrics = &results.metrics;
    let mut out = json!({
        "run_id": run.id,
        "status": run.state,
        "environment": run.env_name,
        "wandb_project": metrics.wandb_project,
        "wandb_run_name": metrics.wandb_run_name,
        // lachesis's extras
        "reason": run.reason,
        "metrics": metrics.snapshot,
        "metrics_age": metrics.age,
        "stages": stages,
        "trained_weights": results.trained_weights,
        "checkpoints": results.checkpoints,
    });
    if let Some(snapshot) = &metrics.snapshot {
        out["final_metrics"] = json!(snapshot.summary);
        if let Some(url) = &snapshot.url {
            out["wandb_url"] = json!(url);
        }
    }
    let mut wandb_error = metrics.wandb_error.clone();
    out["history"] = match history {
        Ok(Some(rows)) if !rows.is_empty() => json!(rows),
        Ok(_) => json!(results.history),
        Err(err) => {
            wandb_error = wandb_error.or(Some(err));
            json!(results.history)
        }
    };
    if let Some(err) = wandb_error {
        out["wandb_error"] = json!(err);
    }
    out
}

/// `rl_list_runs`'s item for one run.
pub fn run_item(run: &crate::service::RunSummary) -> Value {
    json!({
        "run_id": run.id,
        "environment": run.env_name,
        "status": run.state,
        "wandb_run_name": wandb_run_name(run.env_name.as_deref(), &run.id),
        "workflow": run.workflow,
        "reason": run.reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProcessRecord;

    fn stage(state: ProcessState, exit: Option<Exit>) -> Stage {
        let mut stage = Stage::pending(uuid::Uuid::nil(), 0, "env", "/tmp/env.log".into());
        stage.record = ProcessRecord { state, exit, ..ProcessRecord::default() };
        stage
    }

    #[test]
    fn processes_read_as_the_reference_shows_them() {
        assert_eq!(process_text(&stage(ProcessState::Up, None)), "running");
        assert_eq!(process_text(&stage(ProcessState::Exited, Some(Exit::Code(3)))), "exited (3)");
        assert_eq!(process_text(&stage(ProcessState::Exited, Some(Exit::Signal(15)))), "exited (-15)");
        assert_eq!(process_text(&stage(ProcessState::Lost, None)), "exited (-1)");
    }
}
