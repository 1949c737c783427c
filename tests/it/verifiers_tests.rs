//! Inference tests of verifiers environments with the real `vf-eval` (verifiers 0.1.9.post3, the
//! venv of tests/python/verifiers.sh) against the stand-in model server: each model's mean
//! reward is what the stand-in's answers must score; the key is in no command line and no file;
//! a silent model is killed at its timeout; a test survives a daemon SIGKILL; broken packages
//! fail their test saying why, and the daemon carries on.
//!
//! The selection is put in the store as `env select` would store it (the verifiers discovery is
//! not this module's), with the parameters of the environment's `load_environment`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lachesis::environments::{EnvKind, FieldInfo, FieldKind};
use lachesis::model::TestState;
use serde_json::{Value, json};

use crate::inference_tests::{KEY, Stub};
use crate::support::{TestHome, files_containing, stderr, wait_for};
use crate::verifiers_training::select_verifiers;

/// The verifiers venv's python; None (saying why) when the tier is not set up and not required.
fn verifiers_python() -> Option<PathBuf> {
    match std::env::var_os("LACHESIS_TEST_VERIFIERS_PYTHON") {
        Some(python) => Some(PathBuf::from(python)),
        None => {
            assert!(
                std::env::var_os("LACHESIS_REQUIRE_VERIFIERS").is_none(),
                "LACHESIS_TEST_VERIFIERS_PYTHON is required (run tests through tests/run.sh)"
            );
            eprintln!("skipped: LACHESIS_TEST_VERIFIERS_PYTHON not set (tests/run.sh sets it up)");
            None
        }
    }
}

fn vf_arith_source() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/vf_envs/vf_arith")
}

/// A home whose daemon runs the venv's Python, with the stub's key allowed as a provider key.
fn verifiers_home(python: &Path) -> TestHome {
    let mut home = TestHome::new();
    home.environ = [
        ("LACHESIS_PYTHON", python.display().to_string()),
        ("HF_HUB_OFFLINE", "1".into()),
        ("HF_DATASETS_OFFLINE", "1".into()),
        ("WANDB_MODE", "disabled".into()),
        ("STUB_KEY", KEY.into()),
        ("LACHESIS_PROVIDER_KEYS", "STUB_KEY".into()),
    ]
    .map(|(k, v)| (k.to_string(), v))
    .to_vec();
    home
}

fn int_field(name: &str, default: Option<i64>) -> FieldInfo {
    let default = default.map_or(Value::Null, |d| json!(d));
    FieldInfo {
        name: name.into(),
        type_name: "int".into(),
        kind: FieldKind::Int,
        optional: false,
        required: default.is_null(),
        default: default.clone(),
        value: default,
        description: None,
    }
}

/// Selects the test environment with `unanswerable` of its 4 questions beyond the stub.
async fn select_arith(home: &mut TestHome, unanswerable: i64) {
    let module = std::fs::read_to_string(vf_arith_source().join("vf_arith.py")).unwrap();
    let fields = vec![int_field("count", Some(4)), int_field("unanswerable", Some(1))];
    select_verifiers(home, "vf-arith", &module, fields, json!({"count": 4, "unanswerable": unanswerable}))
        .await;
}

/// `test start … --wait --json` of `models` against the stub, as JSON.
fn run_test(home: &TestHome, url: &str, models: &str, timeout: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "test",
        "start",
        "--models",
        models,
        "--steps",
        "4",
        "--group-size",
        "2",
        "--provider",
        url,
        "--api-key-env",
        "STUB_KEY",
        "--timeout",
        timeout,
        "--wait",
        "--json",
    ];
    args.extend(extra);
    let out = home.cli(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}\n{}", stderr(&out)))
}

fn model<'a>(shown: &'a Value, name: &str) -> &'a Value {
    let models = shown["test"]["results"]["models"].as_array().unwrap();
    models.iter().find(|m| m["model"] == name).unwrap_or_else(|| panic!("no {name} in {shown:#}"))
}

#[tokio::test]
async fn vf_eval_scores_each_model_its_mean_reward_and_a_silent_one_is_killed() {
    let Some(python) = verifiers_python() else { return };
    let stub = Stub::start(&python, Path::new("/nonexistent/tokenizer"), &["silent-model"]);
    let url = format!("http://127.0.0.1:{}/v1", stub.port);
    let mut home = verifiers_home(&python);
    // Two of the four questions are beyond the stub: it scores 0.5.
    select_arith(&mut home, 2).await;
    home.start_daemon();
    let ps = crate::support::ArgvWatch::start(KEY, " -m verifiers.scripts.eval ");
    let shown = run_test(&home, &url, "good-model,other-model,silent-model", "50s", &[]);
    let (seen, leaks) = ps.stop();
    assert!(leaks.is_empty(), "the key showed in a command line: {leaks:#?}");
    assert!(seen > 0, "the scan saw vf-eval running");
    let test = &shown["test"];
    assert_eq!(test["state"], "succeeded", "{shown:#}");
    for name in ["good-model", "other-model"] {
        let m = model(&shown, name);
        assert!(m["error"].is_null(), "{m:#}");
        assert_eq!(m["reward"], 0.5, "{m:#}");
        // Examples are its steps, rollouts its completions, their rewards the scores.
        assert_eq!((m["steps_tested"].as_u64(), m["total_completions"].as_u64()), (Some(4), Some(8)));
        assert_eq!(m["steps"][0]["scores"], json!([1.0, 1.0]));
        assert_eq!(m["steps"][3]["scores"], json!([0.0, 0.0]));
        // vf-eval's own files are kept in the test's directory.
        let file = PathBuf::from(m["output_file"].as_str().unwrap());
        assert!(file.starts_with(test["test_dir"].as_str().unwrap()), "{file:?}");
        assert_eq!(file.file_name().unwrap(), "results.jsonl");
        assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 8);
        let metadata: Value =
            serde_json::from_str(&std::fs::read_to_string(file.with_file_name("metadata.json")).unwrap())
                .unwrap();
        assert_eq!(metadata["env_args"], json!({"count": 4, "unanswerable": 2}), "the configured values");
    }
    let silent = model(&shown, "silent-model");
    let error = silent["error"].as_str().unwrap();
    assert!(error.starts_with("timed out after 50s and was killed"), "{silent:#}");
    let summary = &test["results"]["summary"];
    assert_eq!((summary["models_tested"].as_u64(), summary["models_succeeded"].as_u64()), (Some(3), Some(2)));
    assert_eq!(summary["avg_reward"], 0.5);
    let id = test["id"].as_str().unwrap();
    let text = home.cli_ok(&["test", "show", id]);
    assert!(text.contains("REWARD") && !text.contains("ACCURACY"), "{text}");
    assert!(text.contains("average reward 0.5"), "{text}");
    assert!(text.contains("settings  4 examples x 2 rollouts per model"), "{text}");
    assert!(text.contains("(verifiers, "), "{text}");

    // `--env-args` goes over the configured values: one unanswerable question scores 0.75.
    let shown = run_test(&home, &url, "good-model", "60s", &["--env-args", r#"{"unanswerable": 1}"#]);
    assert_eq!(shown["test"]["state"], "succeeded", "{shown:#}");
    assert_eq!(model(&shown, "good-model")["reward"], 0.75);

    home.kill_daemon();
    let found = files_containing(home.path(), KEY.as_bytes());
    assert!(found.is_empty(), "the API key was written to {found:?}");
    assert_eq!(crate::support::processes_mentioning(home.path()), Vec::<i32>::new(), "nothing left running");
}

#[tokio::test]
async fn a_verifiers_test_survives_a_daemon_sigkill_without_running_twice() {
    let Some(python) = verifiers_python() else { return };
    let stub = Stub::start(&python, Path::new("/nonexistent/tokenizer"), &["slow-model"]);
    let url = format!("http://127.0.0.1:{}/v1", stub.port);
    let mut home = verifiers_home(&python);
    select_arith(&mut home, 1).await;
    home.start_daemon();
    let id = home
        .cli_ok(&[
            "test",
            "start",
            "--models",
            "good-model,slow-model",
            "--steps",
            "4",
            "--group-size",
            "2",
            "--provider",
            &url,
            "--api-key-env",
            "STUB_KEY",
            "--timeout",
            "40s",
        ])
        .trim()
        .to_string();
    let service = home.service().await;
    let test_id = uuid::Uuid::parse_str(&id).unwrap();
    wait_for("both tasks to start", Duration::from_secs(60), || {
        let service = service.clone();
        async move {
            let tasks = service.test_tasks(test_id).await.unwrap();
            tasks.iter().all(|t| t.record.process.is_some()).then_some(())
        }
    })
    .await;
    home.kill_daemon();
    home.start_daemon();
    let test = wait_for("the test to end", Duration::from_secs(120), || {
        let service = service.clone();
        async move { service.test(test_id).await.unwrap().filter(|j| j.state.is_terminal()) }
    })
    .await;
    // The model that answers finished (while the daemon was down, or after it came back) and
    // its results were read; the silent one was re-attached and killed at the timeout counted
    // from its real start. Nothing ran twice.
    assert_eq!(test.state, TestState::Succeeded, "{test:?}");
    let results = test.results.clone().unwrap();
    let models = results["models"].as_array().unwrap();
    let good = models.iter().find(|m| m["model"] == "good-model").unwrap();
    assert_eq!(good["reward"], 0.75, "{good:#}");
    let slow = models.iter().find(|m| m["model"] == "slow-model").unwrap();
    assert!(slow["error"].as_str().unwrap().starts_with("timed out after 40s and was killed"), "{slow:#}");
    let messages = home.messages(test_id).await;
    assert!(messages.iter().any(|m| m == "re-attached after a daemon restart"), "{messages:#?}");
    assert_eq!(messages.iter().filter(|m| m.starts_with("started (pid")).count(), 2, "{messages:#?}");
    let started = messages.iter().find(|m| m.contains("--model slow-model")).unwrap();
    assert!(started.contains(" -m verifiers.scripts.eval --model slow-model "), "{started}");
    assert!(started.contains("--api-key-var LACHESIS_SECRET_ARG_PROVIDER_KEY") && !started.contains(KEY));
}

#[tokio::test]
async fn a_scheduled_verifiers_test_below_its_reward_baseline_is_caught_up_and_regressed() {
    let Some(python) = verifiers_python() else { return };
    let stub = Stub::start(&python, Path::new("/nonexistent/tokenizer"), &[]);
    let url = format!("http://127.0.0.1:{}/v1", stub.port);
    let mut home = verifiers_home(&python);
    select_arith(&mut home, 2).await;
    home.cli_ok(&[
        "schedule",
        "add",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--models",
        "good-model",
        "--steps",
        "4",
        "--group-size",
        "2",
        "--provider",
        &url,
        "--api-key-env",
        "STUB_KEY",
        "--timeout",
        "60s",
    ]);
    // Three earlier nights at a mean reward of 0.9 make the baseline; the stub scores 0.5.
    let service = home.service().await;
    let mut schedule = service.stored_schedules().await.unwrap().remove(0);
    assert_eq!(schedule.spec.env_kind, EnvKind::Verifiers);
    for _ in 0..3 {
        let mut test = lachesis::model::InferenceTest::queued(
            uuid::Uuid::new_v4(),
            schedule.spec.clone(),
            Some(schedule.id),
            &home.path().join("tests"),
        );
        test.state = TestState::Succeeded;
        test.results = Some(json!({"models": [
            {"model": "good-model", "reward": 0.9, "accuracy": 0.5, "steps_tested": 4, "error": null}
        ]}));
        service.insert_test_as_given(&test, &[]).await.unwrap();
    }
    // Overdue by a day: the daemon catches up when it starts.
    schedule.last_fired -= 24 * 3600 * 1000;
    service.overwrite_schedule(&schedule).await.unwrap();
    home.start_daemon();
    let test = wait_for("the scheduled test to end", Duration::from_secs(120), || {
        let service = service.clone();
        async move {
            let tests = service.schedule_tests(schedule.id, 1).await.unwrap();
            tests.into_iter().next().filter(|j| {
                j.state.is_terminal() && j.results.as_ref().is_some_and(|r| r.get("summary").is_some())
            })
        }
    })
    .await;
    assert_eq!(test.state, TestState::Regressed, "{test:#?}");
    // Judged by the reward (its accuracy, 0.5, is the baseline's too).
    let reason = test.reason.clone().unwrap();
    assert_eq!(reason, "regressed: good-model reward 0.50 is 0.40 below the baseline 0.90");
    let results = test.results.unwrap();
    assert_eq!(results["models"][0]["reward"], 0.5);
    assert_eq!(results["regressions"][0]["baseline"], 0.9);
}

const RAISES: &str = r#"
def load_environment(split: str = "train"):
    raise ValueError(f"no such split: {split}")
"#;

const HANGS: &str = r#"
import time

time.sleep(3600)  # an import that never ends


def load_environment():
    return None
"#;

const NEEDS: &str = r#"
import verifiers as vf


def load_environment(dataset_path: str):
    raise AssertionError("never called without its argument")
"#;

#[tokio::test]
async fn broken_packages_fail_their_test_saying_why_and_the_daemon_carries_on() {
    let Some(python) = verifiers_python() else { return };
    let stub = Stub::start(&python, Path::new("/nonexistent/tokenizer"), &[]);
    let url = format!("http://127.0.0.1:{}/v1", stub.port);
    let mut home = verifiers_home(&python);
    home.start_daemon();

    // load_environment raises: vf-eval exits non-zero, and the test says with what.
    let split = FieldInfo {
        name: "split".into(),
        type_name: "str".into(),
        kind: FieldKind::Str,
        optional: false,
        required: false,
        default: json!("train"),
        value: json!("train"),
        description: None,
    };
    select_verifiers(&mut home, "vf-raises", RAISES, vec![split], json!({"split": "dev"})).await;
    let shown = run_test(&home, &url, "m", "60s", &[]);
    assert_eq!(shown["test"]["state"], "failed", "{shown:#}");
    assert_eq!(shown["test"]["reason"], "no model produced results");
    let error = model(&shown, "m")["error"].as_str().unwrap();
    assert!(error.starts_with("process code 1; last lines:"), "{error}");
    // verifiers wraps the environment's exception, saying which it was.
    assert!(
        error.contains("RuntimeError: Failed to load environment 'vf-raises': no such split: dev"),
        "{error}"
    );

    // An import that hangs: bounded by the timeout, killed, said.
    select_verifiers(&mut home, "vf-hangs", HANGS, vec![], json!({})).await;
    let shown = run_test(&home, &url, "m", "8s", &[]);
    assert_eq!(shown["test"]["state"], "failed", "{shown:#}");
    let error = model(&shown, "m")["error"].as_str().unwrap();
    assert!(error.starts_with("timed out after 8s and was killed"), "{error}");

    // A required argument nobody configured: refused at once, in one line.
    select_verifiers(&mut home, "vf-needs", NEEDS, vec![int_field("dataset_path", None)], json!({})).await;
    let out = home.cli(&["test", "start", "--models", "m", "--provider", &url, "--api-key-env", "STUB_KEY"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(
            "environment 'vf-needs' needs a value for 'dataset_path' (its load_environment has no default"
        ),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // …which `--env-args` can give for one test (here a path that makes it raise).
    let shown = run_test(&home, &url, "m", "60s", &["--env-args", r#"{"dataset_path": "/nowhere"}"#]);
    let error = model(&shown, "m")["error"].as_str().unwrap();
    assert!(error.contains("'vf-needs': never called without its argument"), "{error}");

    // `--env-args` that is not a JSON object: refused in one line (exit 3, refused, as every
    // invalid request).
    for bad in ["{not json", "[1, 2]", "\"text\""] {
        let out =
            home.cli(&["test", "start", "--provider", &url, "--api-key-env", "STUB_KEY", "--env-args", bad]);
        assert_eq!(out.status.code(), Some(3), "{bad}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("--env-args is not a JSON object ("), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }

    // The daemon carries on: the good environment still scores.
    select_arith(&mut home, 0).await;
    let shown = run_test(&home, &url, "m", "60s", &[]);
    assert_eq!(shown["test"]["state"], "succeeded", "{shown:#}");
    assert_eq!(model(&shown, "m")["reward"], 1.0);
}
