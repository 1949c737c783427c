//! Sweep tools, an extension beyond the reference's tools (it has no sweeps): start a sweep
//! (`rl_start_sweep`: a file of the workflows' `sweeps/`, or the sweep inline) and read its
//! leaderboard (`rl_sweep_status`), stop it and resume it (`rl_stop_sweep`, `rl_resume_sweep`). Answers are JSON text like the other tools'; errors are
//! `{"error": ONE LINE}`.

use serde_json::{Value, json};

use super::RlTools;
use super::answers::{self, answer};
use super::args::{StartSweepArgs, SweepIdArgs, SweepRequest, SweepStatusArgs};
use crate::service::RunRequest;

/// Members an answer lists when the agent names no `top`; the most it may name.
const DEFAULT_TOP: usize = 20;
const MAX_TOP: usize = 200;

/// What a stop or a resume did to a sweep.
fn moved(sweep: &crate::service::SweepSummary, message: &str) -> String {
    answer(json!({
        "sweep_id": sweep.id,
        "workflow": sweep.workflow,
        "state": sweep.state,
        "reason": sweep.reason,
        "members": sweep.members,
        "message": message,
    }))
}

fn refused(message: impl Into<String>) -> String {
    answer(json!({ "error": crate::text::one_line(&message.into()) }))
}

impl RlTools {
    pub(super) async fn start_sweep(&self, args: StartSweepArgs) -> String {
        let request = match SweepRequest::from_args(args) {
            Ok(request) => request,
            Err(err) => return refused(err),
        };
        let text = match (request.file, request.sweep) {
            (Some(file), None) => {
                let read = self
                    .service
                    .settings
                    .catalog()
                    .map_err(|e| e.to_string())
                    .and_then(|catalog| catalog.sweep_text(&file).map_err(|e| e.to_string()));
                match read {
                    Ok(text) => text,
                    Err(err) => return refused(err),
                }
            }
            (None, Some(Value::String(text))) => text,
            // A JSON document is a YAML one: the sweep file as the object says it.
            (None, Some(object @ Value::Object(_))) => object.to_string(),
            (None, Some(_)) => {
                return refused("sweep: expected the sweep as an object (or its YAML as a string)");
            }
            (Some(_), Some(_)) => return refused("give the sweep by file or inline as sweep, not both"),
            (None, None) => {
                let known = self.service.settings.catalog().map(|c| c.sweep_names()).unwrap_or_default();
                let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
                return refused(format!(
                    "give the sweep: file (a name in the workflows directory's sweeps/: {known}) or sweep (the sweep as an object)"
                ));
            }
        };
        let overrides = RunRequest { hold: request.hold.filter(|h| *h), ..RunRequest::default() };
        match self.service.submit_sweep(&text, None, overrides).await {
            Ok(started) => {
                let sweep = &started.sweep;
                let mut out = json!({
                    "sweep_id": sweep.id,
                    "workflow": sweep.workflow,
                    "state": sweep.state,
                    "members": started.members.len(),
                    "max_live": sweep.max_live,
                    "run_ids": started.members,
                    "held": request.hold.unwrap_or(false),
                    "daemon_running": answers::daemon_running(&self.service),
                    "message": format!(
                        "Sweep queued: {} member runs (run_ids, in member order). Follow its leaderboard with rl_sweep_status(sweep_id); each member is a run for rl_check_status(run_id).",
                        started.members.len()
                    ),
                });
                if let Some(note) = answers::start_note(&self.service, crate::model::RunState::Pending, None)
                {
                    out["note"] = json!(note);
                }
                answer(out)
            }
            Err(err) => answers::error(&self.service, &err),
        }
    }

    pub(super) async fn stop_sweep(&self, args: SweepIdArgs) -> String {
        match self.service.stop_sweep(&args.sweep_id).await {
            Ok(sweep) => moved(
                &sweep,
                "Sweep stopped: its pending members cancelled, its running ones stopping. rl_resume_sweep(sweep_id) continues it.",
            ),
            Err(err) => answers::error(&self.service, &err),
        }
    }

    pub(super) async fn resume_sweep(&self, args: SweepIdArgs) -> String {
        match self.service.resume_sweep(&args.sweep_id).await {
            Ok(sweep) => moved(
                &sweep,
                "Sweep resumed: the members its stop ended are queued again. Follow it with rl_sweep_status(sweep_id).",
            ),
            Err(err) => answers::error(&self.service, &err),
        }
    }

    pub(super) async fn sweep_status(&self, args: SweepStatusArgs) -> String {
        let status = match self.service.sweep_status(&args.sweep_id).await {
            Ok(status) => status,
            Err(err) => return answers::error(&self.service, &err),
        };
        let top = args.top.unwrap_or(DEFAULT_TOP).clamp(1, MAX_TOP);
        let leaderboard: Vec<Value> = status
            .leaderboard
            .iter()
            .take(top)
            .map(|m| {
                json!({
                    "k": m.k,
                    "run_id": m.run,
                    "state": m.state,
                    "parameters": m.parameters,
                    "best": m.best,
                    "best_step": m.best_step,
                    "last": m.last,
                    "readings": m.iterations,
                    "early_terminated": m.early_terminated,
                    "reason": m.reason,
                    "winner": status.winner == Some(m.k),
                })
            })
            .collect();
        let s = &status.sweep;
        let mut out = json!({
            "sweep_id": s.id,
            "workflow": s.workflow,
            "state": s.state,
            "reason": s.reason,
            "members": s.members,
            "counts": status.counts,
            "metric": status.metric,
            "goal": status.goal,
            "winner": status.winner,
            "leaderboard": leaderboard,
            "more_members": status.leaderboard.len().saturating_sub(top),
        });
        if let Some(unreported) = &status.unreported {
            out["waiting"] = json!(unreported);
        }
        if !status.exploits.is_empty() {
            // A pbt sweep's lineage, newest last: which member continued from which, and how.
            let skip = status.exploits.len().saturating_sub(MAX_TOP);
            let exploits: Vec<Value> = status.exploits[skip..]
                .iter()
                .map(|e| {
                    json!({
                        "k": e.k,
                        "donor": e.donor,
                        "boundary": e.boundary,
                        "checkpoint_step": e.step,
                        "checkpoint": e.path,
                        "values": e.values,
                        "applied": e.applied_at.is_some(),
                        "message": e.describe(),
                    })
                })
                .collect();
            out["exploits"] = json!(exploits);
        }
        answer(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::Service;

    async fn tools() -> (tempfile::TempDir, RlTools) {
        let home = tempfile::tempdir().unwrap();
        let settings = crate::settings::Settings::new(Some(home.path().to_path_buf()), None);
        let service = Service::open(settings).await.unwrap();
        (home, RlTools::new(service))
    }

    fn args(value: Value) -> StartSweepArgs {
        serde_json::from_value(value).unwrap()
    }

    async fn start(tools: &RlTools, value: Value) -> Value {
        serde_json::from_str(&tools.start_sweep(args(value)).await).unwrap()
    }

    /// By name, inline as an object and inline as YAML: the sweep id, its members' run ids
    /// in order and its state; the status tool reads the same leaderboard.
    #[tokio::test]
    async fn a_sweep_starts_by_name_or_inline_and_its_status_reads_back() {
        let (_home, tools) = tools().await;
        let started = start(&tools, json!({ "file": "demo-sweep", "hold": true })).await;
        assert_eq!(started["state"], "live", "{started:#}");
        assert_eq!(started["members"], 6);
        assert_eq!(started["held"], true);
        let ids = started["run_ids"].as_array().unwrap();
        assert_eq!(ids.len(), 6);
        let member = tools.service.resolve_run(ids[2].as_str().unwrap()).await.unwrap();
        assert!(member.held_at.is_some(), "held");
        let sweep_id = started["sweep_id"].as_str().unwrap().to_string();
        assert_eq!(member.params.sweep.map(|m| (m.sweep.to_string(), m.k)), Some((sweep_id.clone(), 2)));

        let inline = json!({ "method": "grid", "workflow": "demo-tune", "metric": {"name": "reward", "goal": "maximize"},
            "parameters": {"lr": {"values": [0.1, 0.01]}} });
        let started = start(&tools, json!({ "sweep": inline })).await;
        assert_eq!(
            (started["members"].as_u64(), started["held"].as_bool()),
            (Some(2), Some(false)),
            "{started:#}"
        );
        let yaml = "method: grid\nworkflow: demo-tune\nparameters:\n  lr: {values: [0.5]}\n";
        assert_eq!(start(&tools, json!({ "sweep": yaml })).await["members"], 1);

        let status: Value = serde_json::from_str(
            &tools.sweep_status(SweepStatusArgs { sweep_id: sweep_id[..8].to_string(), top: Some(4) }).await,
        )
        .unwrap();
        assert_eq!(
            (status["state"].as_str(), status["members"].as_u64()),
            (Some("live"), Some(6)),
            "{status:#}"
        );
        assert_eq!(status["leaderboard"].as_array().map(Vec::len), Some(4));
        assert_eq!(status["more_members"], 2);
        assert_eq!(status["leaderboard"][0]["parameters"]["lr"], 1e-5, "{status:#}");
        assert_eq!(status["counts"]["pending"], 6);
        let unknown: Value = serde_json::from_str(
            &tools.sweep_status(SweepStatusArgs { sweep_id: "ffffffff".into(), top: None }).await,
        )
        .unwrap();
        assert_eq!(unknown["error"], "no sweep matches 'ffffffff'");
    }

    /// What an agent may get wrong: each is one line naming it, and nothing is queued.
    #[tokio::test]
    async fn a_bad_sweep_is_one_line_and_queues_nothing() {
        let (_home, tools) = tools().await;
        let cases = [
            (
                json!({}),
                "give the sweep: file (a name in the workflows directory's sweeps/: demo-pbt, demo-sweep)",
            ),
            (json!({ "file": "nope" }), "unknown sweep 'nope' (available: demo-pbt, demo-sweep)"),
            (json!({ "file": "../../../etc/passwd" }), "is outside the workflows directory"),
            (json!({ "file": "demo-sweep", "sweep": {} }), "not both"),
            (json!({ "sweep": 3 }), "sweep: expected the sweep as an object"),
            (
                json!({ "sweep": {"method": "bayes", "workflow": "demo-tune", "metric": {"name": "reward"}, "run_cap": 4,
                                  "parameters": {"lr": {"values": [{"a": 1}]}}} }),
                "parameters.lr.values: value 0 is a mapping, which bayes cannot place",
            ),
            (
                json!({ "sweep": {"method": "pbt", "workflow": "demo-tune", "metric": {"name": "reward"}, "run_cap": 4,
                                  "perturbation_interval": 10, "quantile_fraction": 0.6,
                                  "parameters": {"lr": {"values": [0.1, 0.2]}}} }),
                "quantile_fraction: 0.6 is not above 0 and at most 0.5",
            ),
            (
                json!({ "sweep": {"method": "pbt", "workflow": "demo-tune", "metric": {"name": "reward"}, "run_cap": 4,
                                  "perturbation_interval": 10, "parameters": {"lr": {"values": [0.1, 0.2]}}} }),
                "workflow 'demo-tune' records no checkpoints",
            ),
            (json!({ "fil": "demo-sweep" }), "unknown field `fil`"),
            (json!({ "hold": "yes" }), "hold: invalid type"),
            (
                json!({ "sweep": "method: grid\nworkflow: demo-tune\nparameters:\n  warmup: {values: [1]}\n" }),
                "has no variable 'warmup'",
            ),
        ];
        for (given, says) in cases {
            let answer = start(&tools, given.clone()).await;
            let error = answer["error"].as_str().unwrap_or_else(|| panic!("{given}: {answer:#}"));
            assert!(error.contains(says), "{given}: {error}");
            assert!(!error.contains('\n'), "{given}: {error}");
        }
        assert!(tools.service.sweeps().await.unwrap().is_empty());
        assert!(tools.service.runs(&Default::default()).await.unwrap().is_empty());
    }

    /// Arguments of any shape, the tool's own keys and a sweep's likely, with file names that
    /// climb out of the catalog: an answer every time (no panic), an error on one line.
    #[test]
    fn any_arguments_are_answered_and_refusals_are_one_line() {
        use proptest::prelude::*;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (_home, tools) = runtime.block_on(tools());
        let key = prop_oneof![
            Just("file".to_string()),
            Just("sweep".to_string()),
            Just("hold".to_string()),
            Just("method".to_string()),
            Just("workflow".to_string()),
            Just("parameters".to_string()),
            Just("metric".to_string()),
            Just("values".to_string()),
            "\\PC{0,8}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            prop_oneof![
                Just("demo-sweep".to_string()),
                Just("grid".to_string()),
                Just("demo-tune".to_string()),
                Just("../../../../etc/passwd".to_string()),
                Just("sweeps/../../x.yaml".to_string()),
                Just("/proc/self/environ".to_string()),
                "\\PC{0,16}",
            ]
            .prop_map(Value::from),
        ];
        let value = leaf.prop_recursive(4, 32, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(key.clone(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        let arguments = proptest::collection::btree_map(
            prop_oneof![
                Just("file".to_string()),
                Just("sweep".to_string()),
                Just("hold".to_string()),
                "\\PC{0,6}"
            ],
            value,
            0..3,
        );
        let config =
            proptest::test_runner::Config { cases: 64, failure_persistence: None, ..Default::default() };
        // A fixed seed, as the fuzz tier's: every run sees the same cases.
        let rng = proptest::test_runner::TestRng::deterministic_rng(config.rng_algorithm);
        proptest::test_runner::TestRunner::new_with_rng(config, rng)
            .run(&arguments, |arguments| {
                let args = StartSweepArgs(arguments.into_iter().collect());
                let text = runtime.block_on(tools.start_sweep(args));
                let answer: Value = serde_json::from_str(&text).expect("an answer is JSON");
                if let Some(error) = answer.get("error") {
                    let error = error.as_str().expect("an error is text");
                    prop_assert!(!error.contains('\n') && !error.is_empty(), "{error:?}");
                } else {
                    prop_assert!(answer["sweep_id"].is_string(), "{answer:#}");
                }
                Ok(())
            })
            .unwrap();
    }

    /// A sweep stopped through the tool resumes through the other; a second resume, and an
    /// unknown sweep, are refused in one line.
    #[tokio::test]
    async fn a_sweep_stops_and_resumes_through_the_tools() {
        let (_home, tools) = tools().await;
        let started = start(&tools, json!({ "file": "demo-sweep", "hold": true })).await;
        let sweep_id = started["sweep_id"].as_str().unwrap().to_string();
        let id = |prefix: &str| SweepIdArgs { sweep_id: prefix.to_string() };
        let stopped: Value = serde_json::from_str(&tools.stop_sweep(id(&sweep_id[..8])).await).unwrap();
        assert_eq!(
            (stopped["sweep_id"].as_str(), stopped["state"].as_str()),
            (Some(&*sweep_id), Some("stopped"))
        );
        let resumed: Value = serde_json::from_str(&tools.resume_sweep(id(&sweep_id)).await).unwrap();
        assert_eq!(resumed["state"], "live", "{resumed:#}");
        let again: Value = serde_json::from_str(&tools.resume_sweep(id(&sweep_id)).await).unwrap();
        let error = again["error"].as_str().unwrap();
        assert!(error.contains("cannot resume") && !error.contains('\n'), "{error}");
        let unknown: Value = serde_json::from_str(&tools.stop_sweep(id("ffffffff")).await).unwrap();
        assert!(unknown["error"].as_str().unwrap().contains("ffffffff"), "{unknown:#}");
    }
}
