//! Inference-test tests with the real environment in `process` mode against the stub server.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::atropos::{atropos, atropos_home, repo};
use crate::support::{TestHome, files_containing, stderr};

/// The stub inference server on a free port; killed when dropped.
pub struct Stub {
    child: Child,
    pub port: u16,
}

impl Stub {
    pub fn start(python: &Path, tokenizer: &Path, hang: &[&str]) -> Stub {
        let mut cmd = Command::new(python);
        cmd.arg(repo().join("tests/python/stub_inference.py"))
            .args(["--port", "0", "--tokenizer"])
            .arg(tokenizer);
        for model in hang {
            cmd.args(["--hang-model", model]);
        }
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("READY ").expect("the stub says READY <port>").parse().unwrap();
        Stub { child, port }
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A workflow whose locked profile points inference tests at the local tokenizer.
pub fn test_profile(home: &TestHome, tokenizer: &Path) {
    home.workflow(
        "arith-tests",
        &format!(
            "name: arith-tests\nstages:\n  - {{name: unused, argv: [\"true\"]}}\nlocked:\n  env:\n    tokenizer_name: {}\n    max_token_length: 256\n    max_num_workers: 4\n    max_batches_offpolicy: 3\n",
            tokenizer.display()
        ),
    );
}

pub const KEY: &str = "sk-stub-7d41c0ffee9b2a55e3";

#[tokio::test]
async fn a_test_runs_each_model_and_a_silent_endpoint_is_killed_at_its_timeout() {
    let Some((python, tokenizer)) = atropos() else { return };
    let stub = Stub::start(&python, &tokenizer, &["silent-model"]);
    let mut home = atropos_home(&python);
    home.environ.push(("STUB_KEY".into(), KEY.into()));
    home.environ.push(("LACHESIS_PROVIDER_KEYS".into(), "STUB_KEY".into()));
    test_profile(&home, &tokenizer);
    home.start_daemon();
    let url = format!("http://127.0.0.1:{}/v1", stub.port);
    // What `ps` shows every user: all command lines, read throughout the test.
    let ps = crate::support::ArgvWatch::start(KEY, " process --config ");
    let out = home.cli(&[
        "test",
        "start",
        "--env",
        "arith",
        "--models",
        "good-model,silent-model",
        "--steps",
        "2",
        "--group-size",
        "4",
        "--provider",
        &url,
        "--server-type",
        "openai",
        "--api-key-env",
        "STUB_KEY",
        "--timeout",
        "45s",
        "--workflow",
        "arith-tests",
        "--wait",
        "--json",
    ]);
    let (seen_env_processes, leaks) = ps.stop();
    assert!(leaks.is_empty(), "the key showed in a command line: {leaks:#?}");
    assert!(seen_env_processes > 0, "the scan saw the environment processes running");
    let text = String::from_utf8_lossy(&out.stdout);
    let shown: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}\n{}", stderr(&out)));
    let test = &shown["test"];
    assert_eq!(test["state"], "succeeded", "{shown:#}");
    let models = test["results"]["models"].as_array().unwrap();
    let good = models.iter().find(|m| m["model"] == "good-model").unwrap();
    // The stub answers right, wrong, right, wrong: half the completions score.
    assert_eq!((good["steps_tested"].as_u64(), good["total_completions"].as_u64()), (Some(2), Some(8)));
    assert_eq!(good["accuracy"], 0.5);
    assert_eq!(good["steps_with_correct"], 2);
    assert!(good["error"].is_null(), "{good:#}");
    let silent = models.iter().find(|m| m["model"] == "silent-model").unwrap();
    assert!(
        silent["error"].as_str().unwrap().starts_with("timed out after 45s and was killed"),
        "{silent:#}"
    );
    let tasks = shown["tasks"].as_array().unwrap();
    assert_eq!(tasks.iter().find(|t| t["model"] == "silent-model").unwrap()["timed_out"], true);
    let summary = &test["results"]["summary"];
    assert_eq!((summary["models_tested"].as_u64(), summary["models_succeeded"].as_u64()), (Some(2), Some(1)));
    assert_eq!(summary["best_model"], "good-model");
    assert_eq!(summary["environment_working"], true);

    // The key reached the processes (they talked to the stub) but was written nowhere.
    home.kill_daemon();
    let found = files_containing(home.path(), KEY.as_bytes());
    assert!(found.is_empty(), "the API key was written to {found:?}");
    assert_eq!(
        crate::support::processes_mentioning(home.path()),
        Vec::<i32>::new(),
        "the killed group is gone"
    );
}

#[tokio::test]
async fn test_start_wait_and_test_show_give_a_models_whole_error() {
    let Some((python, tokenizer)) = atropos() else { return };
    let stub = Stub::start(&python, &tokenizer, &[]);
    let mut home = atropos_home(&python);
    // A tokenizer that isn't there: the environment dies with transformers' exception.
    test_profile(&home, Path::new("/nonexistent/lachesis-tokenizer"));
    home.start_daemon();
    let url = format!("http://127.0.0.1:{}/v1", stub.port);
    let args = ["test", "start", "--env", "arith", "--models", "m", "--steps", "1", "--group-size", "2"];
    let mut args = args.to_vec();
    args.extend(["--provider", &url, "--timeout", "60s", "--workflow", "arith-tests", "--wait"]);
    let out = home.cli(&args);
    assert!(!out.status.success());
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(shown.contains("error of m:\n  process code 1; last lines:\n"), "{shown}");
    assert!(
        shown.contains("OSError: ") && shown.contains("/nonexistent/lachesis-tokenizer"),
        "the cause: {shown}"
    );
    let id = shown.lines().find_map(|l| l.strip_prefix("test      ")).unwrap().trim().to_string();
    let again = home.cli_ok(&["test", "show", &id]);
    assert!(again.contains("error of m:") && again.contains("/nonexistent/lachesis-tokenizer"), "{again}");
}

#[tokio::test]
async fn a_test_without_its_key_is_refused() {
    let mut home = TestHome::new();
    home.environ = vec![("LACHESIS_ENV_DIRS".into(), crate::atropos::envs_dir().display().to_string())];
    let err = stderr(&home.cli(&["test", "start", "--env", "arith"]));
    assert!(err.contains("needs OPENROUTER_API_KEY in the environment"), "{err}");
    let err = stderr(&home.cli(&["test", "show", "abc"]));
    assert!(err.contains("no test matches 'abc'"), "{err}");
}

#[tokio::test]
async fn a_test_survives_a_daemon_restart_without_running_twice() {
    let Some((python, tokenizer)) = atropos() else { return };
    let stub = Stub::start(&python, &tokenizer, &["slow-model"]);
    let mut home = atropos_home(&python);
    test_profile(&home, &tokenizer);
    home.start_daemon();
    let url = format!("http://127.0.0.1:{}/v1", stub.port);
    let id = home
        .cli_ok(&[
            "test",
            "start",
            "--env",
            "arith",
            "--models",
            "slow-model",
            "--steps",
            "1",
            "--group-size",
            "2",
            "--provider",
            &url,
            "--timeout",
            "6s",
            "--workflow",
            "arith-tests",
        ])
        .trim()
        .to_string();
    let service = home.service().await;
    let test_id = uuid::Uuid::parse_str(&id).unwrap();
    crate::support::wait_for("the task to start", Duration::from_secs(60), || {
        let service = service.clone();
        async move { service.test_tasks(test_id).await.unwrap()[0].record.process.is_some().then_some(()) }
    })
    .await;
    home.kill_daemon();
    home.start_daemon();
    let test = crate::support::wait_for("the test to end", Duration::from_secs(60), || {
        let service = service.clone();
        async move { service.test(test_id).await.unwrap().filter(|j| j.state.is_terminal()) }
    })
    .await;
    // Re-attached, then killed at the timeout counted from its real start: failed, not re-run.
    assert_eq!(test.state, lachesis::model::TestState::Failed, "{test:?}");
    let messages = home.messages(test_id).await;
    assert!(messages.iter().any(|m| m == "re-attached after a daemon restart"), "{messages:#?}");
    assert_eq!(messages.iter().filter(|m| m.starts_with("started (pid")).count(), 1, "{messages:#?}");
    assert!(messages.iter().any(|m| m.starts_with("timed out after 6s")), "{messages:#?}");
    let started = messages.iter().find(|m| m.starts_with("started (pid")).unwrap();
    assert!(started.contains(" process --config "), "{started}");
    assert!(started.contains(".secret.yaml --env.total_steps 1 --env.group_size 2 "), "{started}");
    assert!(started.contains("--openai.model_name slow-model") && !started.contains("api_key"), "{started}");
}

#[tokio::test]
async fn a_scheduled_test_below_its_baseline_is_marked_regressed() {
    let Some((python, tokenizer)) = atropos() else { return };
    let stub = Stub::start(&python, &tokenizer, &[]);
    let mut home = atropos_home(&python);
    test_profile(&home, &tokenizer);
    let url = format!("http://127.0.0.1:{}/v1", stub.port);
    // The webhook fails once, so the notification has to be retried.
    let hook = crate::support::Receiver::start(vec![500]).await;
    home.cli_ok(&[
        "schedule",
        "add",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--env",
        "arith",
        "--models",
        "good-model",
        "--steps",
        "2",
        "--group-size",
        "4",
        "--provider",
        &url,
        "--timeout",
        "60s",
        "--workflow",
        "arith-tests",
        "--webhook",
        &hook.url,
    ]);
    // Three earlier nights at 0.9 accuracy make the baseline; the stub scores 0.5.
    let service = home.service().await;
    let mut schedule = service.stored_schedules().await.unwrap().remove(0);
    for _ in 0..3 {
        let mut test = lachesis::model::InferenceTest::queued(
            uuid::Uuid::new_v4(),
            schedule.spec.clone(),
            Some(schedule.id),
            &home.path().join("tests"),
        );
        test.state = lachesis::model::TestState::Succeeded;
        test.results = Some(
            serde_json::json!({"models": [{"model": "good-model", "accuracy": 0.9, "steps_tested": 2, "error": null}]}),
        );
        service.insert_test_as_given(&test, &[]).await.unwrap();
    }
    schedule.last_fired -= 24 * 3600 * 1000;
    service.overwrite_schedule(&schedule).await.unwrap();
    home.start_daemon();
    let test = crate::support::wait_for("the scheduled test to end", Duration::from_secs(120), || {
        let service = service.clone();
        async move {
            let tests = service.schedule_tests(schedule.id, 1).await.unwrap();
            tests.into_iter().next().filter(|j| {
                j.state.is_terminal() && j.results.as_ref().is_some_and(|r| r.get("summary").is_some())
            })
        }
    })
    .await;
    assert_eq!(test.state, lachesis::model::TestState::Regressed, "{test:#?}");
    let reason = test.reason.unwrap();
    assert!(reason.starts_with("regressed: good-model accuracy 0.5"), "{reason}");
    let regressions = &test.results.unwrap()["regressions"];
    assert_eq!(regressions[0]["baseline"], 0.9);

    // Both notifications arrive (one after a retry), and how each went is an event of the test.
    let regression = crate::support::wait_for("the regression webhook", Duration::from_secs(30), || {
        let got = hook.of_kind("regression");
        async move { got.into_iter().next() }
    })
    .await;
    assert_eq!(regression["ids"]["test"], test.id.to_string());
    assert_eq!(regression["ids"]["schedule"], "nightly");
    assert_eq!(regression["state"], "regressed");
    let finished = crate::support::wait_for("the test_finished webhook", Duration::from_secs(30), || {
        let got = hook.of_kind("test_finished");
        async move { got.into_iter().next() }
    })
    .await;
    assert_eq!(finished["summary"]["models_succeeded"], 1);
    let messages = crate::support::wait_for("delivery events", Duration::from_secs(10), || {
        let service = service.clone();
        async move {
            let messages: Vec<String> =
                service.events_after(test.id, 0).await.unwrap().into_iter().map(|e| e.message).collect();
            (messages.iter().filter(|m| m.starts_with("webhook ")).count() == 2).then_some(messages)
        }
    })
    .await;
    assert!(messages.iter().any(|m| m.contains("told of") && m.contains("(attempt 2)")), "{messages:#?}");
}

#[tokio::test]
async fn a_managed_server_environment_runs_against_an_openai_type_provider() {
    let Some((python, tokenizer)) = atropos() else { return };
    let stub = Stub::start(&python, &tokenizer, &[]);
    let mut home = atropos_home(&python);
    let dirs = format!("{}:{}", crate::atropos::envs_dir().display(), managed_envs_dir().display());
    home.environ.retain(|(k, _)| k != "LACHESIS_ENV_DIRS");
    home.environ.push(("LACHESIS_ENV_DIRS".into(), dirs));
    home.environ.push(("STUB_KEY".into(), KEY.into()));
    home.environ.push(("LACHESIS_PROVIDER_KEYS".into(), "STUB_KEY".into()));
    test_profile(&home, &tokenizer);
    home.start_daemon();
    let url = format!("http://127.0.0.1:{}/v1", stub.port);
    let out = home.cli(&[
        "test",
        "start",
        "--env",
        "arith_managed",
        "--models",
        "stub",
        "--steps",
        "1",
        "--group-size",
        "2",
        "--provider",
        &url,
        "--server-type",
        "openai",
        "--api-key-env",
        "STUB_KEY",
        "--timeout",
        "120s",
        "--workflow",
        "arith-tests",
        "--wait",
        "--json",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let shown: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}\n{}", stderr(&out)));
    // Without ATROPOS_ALLOW_DUMMY_MANAGED_SERVER=1 atroposlib raises NotImplementedError here.
    assert_eq!(shown["test"]["state"], "succeeded", "{shown:#}");
    let model = &shown["test"]["results"]["models"][0];
    assert_eq!(
        (model["steps_tested"].as_u64(), model["accuracy"].as_f64()),
        (Some(1), Some(0.5)),
        "{model:#}"
    );
}

/// Test environments kept apart from `envs/` (so listings there keep their count).
pub fn managed_envs_dir() -> std::path::PathBuf {
    repo().join("tests/python/envs_managed")
}
