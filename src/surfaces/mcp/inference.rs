//! `rl_test_inference`: waiting for a queued inference test while telling the client how many
//! groups each model has written (MCP progress notifications), cancelling the test when the client
//! cancels the call, and answering in the reference's layout with lachesis's extras.

use std::time::Duration;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};

use super::RlTools;
use super::answers::{self, answer};
use super::args::TestArgs;
use crate::inference::results::{ModelResult, StepResult};
use crate::inference::spec::{output_path, wandb_run_name};
use crate::model::InferenceTest;
use crate::service::{Service, TestRequest, TestStatus};

/// How often a waiting call looks at the test (the store read is cheap; groups take seconds).
const POLL: Duration = Duration::from_millis(500);

/// The reference's named test models; any other model is `custom`, named by its id.
const KNOWN_MODELS: [(&str, &str, &str); 3] = [
    ("qwen/qwen3-8b", "Qwen3 8B", "small"),
    ("z-ai/glm-4.7-flash", "GLM-4.7 Flash", "medium"),
    ("minimax/minimax-m2.7", "MiniMax M2.7", "large"),
];

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Waits for `test` to end. Sends a progress notification whenever the groups written change
/// (when the client gave a progress token); cancels the test if the client cancels the call.
/// Returns the last status, and whether the client cancelled.
pub async fn wait(
    service: &Service,
    test: &InferenceTest,
    ctx: &RequestContext<RoleServer>,
) -> (Option<TestStatus>, bool) {
    let token = ctx.meta.get_progress_token();
    let total = f64::from(test.spec.steps) * test.spec.models.len() as f64;
    let mut last_sent: Option<usize> = None;
    let id = test.id.to_string();
    loop {
        let status = service.test_status(&id).await.ok();
        if let Some(status) = &status {
            let written: usize = status.groups_written.iter().sum();
            if let Some(token) = &token
                && last_sent != Some(written)
            {
                last_sent = Some(written);
                report_progress(&ctx.peer, token.clone(), written as f64, total, progress_message(status))
                    .await;
            }
            if status.test.state.is_terminal() {
                return (Some(status.clone()), false);
            }
        }
        tokio::select! {
            _ = ctx.ct.cancelled() => {
                let _ = service.stop_test(&id).await;
                return (service.test_status(&id).await.ok(), true);
            }
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

async fn report_progress(
    peer: &Peer<RoleServer>,
    token: ProgressToken,
    progress: f64,
    total: f64,
    message: String,
) {
    let param = ProgressNotificationParam::new(token, progress).with_total(total).with_message(message);
    // A client that went away gets no progress; the wait notices the cancellation.
    let _ = peer.notify_progress(param).await;
}

/// "test <id>: qwen/qwen3-8b 2/3 groups, stub 0/3 groups (running)"; the id lets a client that
/// cancels or loses the call find the test with rl_get_results.
fn progress_message(status: &TestStatus) -> String {
    let steps = status.test.spec.steps;
    let parts: Vec<String> = status
        .tasks
        .iter()
        .zip(&status.groups_written)
        .map(|(task, written)| format!("{} {written}/{steps} groups", task.model))
        .collect();
    format!("test {}: {} ({})", status.test.id, parts.join(", "), status.test.state)
}

/// The immediate answer (`wait: false`): the test's id and what it will run.
pub fn queued(test: &InferenceTest) -> Value {
    json!({
        "test_id": test.id,
        "status": test.state,
        "environment": test.env_name,
        "environment_file": test.spec.env_file,
        "models": test.spec.models,
        "test_config": test_config(test),
        "message": "Inference test queued; rl_get_results(test_id) gives its results once it has ended.",
    })
}

fn test_config(test: &InferenceTest) -> Value {
    let per_model = test.spec.steps * test.spec.group_size;
    json!({
        "num_steps": test.spec.steps,
        "group_size": test.spec.group_size,
        "rollouts_per_model": per_model,
        "total_rollouts": per_model as usize * test.spec.models.len(),
    })
}

/// The reference's layout of an ended (or cancelled) test, with lachesis's extras: the test id
/// and state, per-step mean scores, regressions and lachesis's own summary.
pub fn layout(status: &TestStatus) -> Value {
    let test = &status.test;
    let stored: Vec<ModelResult> = test
        .results
        .as_ref()
        .and_then(|r| serde_json::from_value(r["models"].clone()).ok())
        .unwrap_or_default();
    let models: Vec<Value> = test
        .spec
        .models
        .iter()
        .map(|model| {
            let result = stored.iter().find(|r| &r.model == model).cloned().unwrap_or_else(|| {
                let mut empty = ModelResult::new(model, &output_path(&test.test_dir, model));
                empty.error = Some(test.reason.clone().unwrap_or_else(|| format!("test {}", test.state)));
                empty
            });
            model_entry(test, &result)
        })
        .collect();
    let working: Vec<&Value> = models.iter().filter(|m| m["steps_tested"].as_u64() > Some(0)).collect();
    // Over the rounded accuracies, first of equals, as the reference computes them.
    let mut best: Option<&Value> = None;
    for m in &working {
        // A verifiers test's best model is the one with the highest mean reward.
        let score = |m: &Value| m["reward"].as_f64().or_else(|| m["accuracy"].as_f64());
        if best.is_none_or(|b| score(m) > score(b)) {
            best = Some(m);
        }
    }
    let avg = if working.is_empty() {
        0.0
    } else {
        round3(working.iter().filter_map(|m| m["accuracy"].as_f64()).sum::<f64>() / working.len() as f64)
    };
    json!({
        "environment": test.env_name,
        "environment_file": test.spec.env_file,
        "test_config": test_config(test),
        "models_tested": models,
        "summary": {
            "steps_requested": test.spec.steps,
            "models_tested": models.len(),
            "models_succeeded": working.len(),
            "best_model": best.map(|m| m["model"].clone()),
            "avg_accuracy": avg,
            "environment_working": !working.is_empty(),
            "output_directory": test.test_dir,
        },
        "env_kind": test.spec.env_kind,
        // lachesis's extras
        "test_id": test.id,
        "status": test.state,
        "reason": test.reason,
        "regressions": test.results.as_ref().map(|r| r["regressions"].clone()).filter(|r| !r.is_null()),
        "lachesis_summary": test.results.as_ref().map(|r| r["summary"].clone()),
    })
}

fn model_entry(test: &InferenceTest, r: &ModelResult) -> Value {
    let (name, scale) = KNOWN_MODELS
        .iter()
        .find(|(id, _, _)| *id == r.model)
        .map_or((r.model.as_str(), "custom"), |(_, name, scale)| (*name, *scale));
    let steps: Vec<Value> = r.steps.iter().map(step_entry).collect();
    let mut entry = json!({
        "model": r.model,
        "name": name,
        "scale": scale,
        "wandb_run": wandb_run_name(&test.env_name, &test.test_dir),
        "output_file": r.output_path,
        "steps": steps,
        "steps_tested": r.steps_tested,
        "total_completions": r.total_completions,
        "correct_completions": r.correct_completions,
        "accuracy": round3(r.accuracy),
        "steps_with_correct": r.steps_with_correct,
        "step_success_rate": round3(r.step_success_rate),
        "log_file": r.log_path.clone().unwrap_or_else(|| {
            crate::inference::spec::log_path(&test.test_dir, &r.model).display().to_string()
        }),
        // lachesis's extras
        "exit": r.exit,
        "malformed_lines": r.malformed_lines,
        "notes": r.notes,
    });
    if let Some(reward) = r.reward {
        // A verifiers environment's figure: the mean reward over vf-eval's rollouts.
        entry["reward"] = json!(round3(reward));
    }
    if let Some(error) = &r.error {
        entry["error"] = json!(error);
    }
    entry
}

fn step_entry(s: &StepResult) -> Value {
    json!({ "step": s.step, "completions": s.completions, "correct": s.correct, "scores": s.scores, "mean_score": s.mean_score })
}

impl RlTools {
    pub(super) async fn test_inference(&self, args: TestArgs, ctx: RequestContext<RoleServer>) -> String {
        if self.service.environment_selection().await.is_err() {
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
            let mut out = queued(&test);
            if !answers::daemon_running(&self.service) {
                out["note"] =
                    json!(answers::start_note(&self.service, crate::model::RunState::Pending, None));
            }
            return answer(out);
        }
        if !answers::daemon_running(&self.service) {
            let mut out = queued(&test);
            out["note"] = json!(answers::start_note(&self.service, crate::model::RunState::Pending, None));
            out["message"] = json!(
                "Not waiting: no daemon runs the test. rl_get_results(test_id) gives its results once one has."
            );
            return answer(out);
        }
        match wait(&self.service, &test, &ctx).await {
            (Some(status), cancelled) => {
                let mut out = layout(&status);
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
}
