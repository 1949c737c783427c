//! The real Atropos stack, offline: atroposlib 0.4.0 from a cached venv (tests/python/venv.sh),
//! its `run-api`, a real environment in `serve` and `process` mode, and stand-ins (in
//! tests/python) only for what can't exist here: the hosted trainer and hosted models.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lachesis::model::{Exit, RunState};

use crate::support::{TestHome, assert_no_stage_alive, stderr};

const T: Duration = Duration::from_secs(180);

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn envs_dir() -> PathBuf {
    repo().join("tests/python/envs")
}

/// The venv's interpreter and tokenizer directory, or None (saying so) when the test command
/// did not provide them; `LACHESIS_REQUIRE_ATROPOS=1` turns the skip into a failure.
pub fn atropos() -> Option<(PathBuf, PathBuf)> {
    match std::env::var_os("LACHESIS_TEST_PYTHON") {
        Some(python) => {
            let python = PathBuf::from(python);
            let tokenizer =
                std::env::var_os("LACHESIS_TOKENIZER_DIR").map(PathBuf::from).unwrap_or_else(|| {
                    python.parent().and_then(Path::parent).unwrap().join("lachesis-tokenizer")
                });
            Some((python, tokenizer))
        }
        None => {
            assert!(
                std::env::var_os("LACHESIS_REQUIRE_ATROPOS").is_none(),
                "LACHESIS_TEST_PYTHON is required (run tests through tests/run.sh)"
            );
            eprintln!("skipped: LACHESIS_TEST_PYTHON not set (tests/run.sh sets it up)");
            None
        }
    }
}

/// A home whose CLI and daemon use the venv's Python and find the test environments.
pub fn atropos_home(python: &Path) -> TestHome {
    let mut home = TestHome::new();
    home.environ = vec![
        ("LACHESIS_PYTHON".into(), python.display().to_string()),
        ("LACHESIS_ENV_DIRS".into(), envs_dir().display().to_string()),
        ("HF_HUB_OFFLINE".into(), "1".into()),
        ("HF_DATASETS_OFFLINE".into(), "1".into()),
        ("WANDB_MODE".into(), "disabled".into()),
    ];
    home
}

/// The locked profile of the test workflows: the reference's shape, pointed at local servers.
const LOCKED: &str = r#"
locked:
  env:
    tokenizer_name: "{tokenizer}"
    rollout_server_url: "http://127.0.0.1:{port.api}"
    use_wandb: false
    total_steps: 2
    max_token_length: 256
    max_num_workers: 4
    steps_per_eval: 0
  openai:
    - model_name: stand-in
      base_url: "http://127.0.0.1:{port.trainer}/v1"
      api_key: x
      server_type: sglang
      tokenizer_name: "{tokenizer}"
  tinker:
    lora_rank: 32
    checkpoint_dir: ./checkpoints/
    save_checkpoint_interval: 0
  slurm: false
  testing: false
"#;

/// run-api, the stand-in trainer and the real environment in `serve` mode: the reference's
/// three stages with auto ports and real readiness probes.
pub fn training_workflow(name: &str) -> String {
    format!(
        r#"name: {name}
vars: {{tokenizer: "", tests: "", python_bin: ""}}
ports: {{api: auto, trainer: auto}}
stages:
  - name: api
    argv: ["{{python_bin}}/run-api", --host, 127.0.0.1, --port, "{{port.api}}"]
    probe: {{http: "http://127.0.0.1:{{port.api}}/"}}
    start_timeout: 60s
  - name: trainer
    argv: ["{{python}}", "{{tests}}/stand_in_trainer.py", --config, "{{config_path}}", --port, "{{port.trainer}}"]
    env: {{PYTHONUNBUFFERED: "1"}}
    probe: {{http: "http://127.0.0.1:{{port.trainer}}/health"}}
    start_timeout: 60s
  - name: env
    argv: ["{{python}}", "{{env_file}}", serve, --config, "{{config_path}}"]
    env: {{PYTHONUNBUFFERED: "1"}}
    start_delay: 1s
completion: {{stages: [trainer, env]}}
stop_grace: 5s
{LOCKED}"#
    )
}

pub fn vars(python: &Path, tokenizer: &Path) -> Vec<String> {
    vec![
        "--var".into(),
        format!("tokenizer={}", tokenizer.display()),
        "--var".into(),
        format!("tests={}", repo().join("tests/python").display()),
        "--var".into(),
        format!("python_bin={}", python.parent().unwrap().display()),
    ]
}

#[tokio::test]
async fn environments_are_discovered_without_python() {
    let mut home = TestHome::new();
    home.environ = vec![("LACHESIS_ENV_DIRS".into(), envs_dir().display().to_string())];
    let list: serde_json::Value = serde_json::from_str(&home.cli_ok(&["env", "list", "--json"])).unwrap();
    let arith = list.as_array().unwrap().iter().find(|e| e["name"] == "arith").expect("arith is listed");
    assert_eq!(arith["class_name"], "ArithEnv");
    let err = stderr(&home.cli(&["env", "select", "nope"]));
    assert!(err.contains("unknown environment 'nope' (available: arith)"), "{err}");
}

#[tokio::test]
async fn selecting_and_editing_the_config_follows_the_locked_profile() {
    let Some((python, _)) = atropos() else { return };
    let home = atropos_home(&python);
    let out = home.cli_ok(&["env", "select", "arith"]);
    assert!(out.starts_with("selected arith"), "{out}");
    let view: serde_json::Value = serde_json::from_str(&home.cli_ok(&["config", "show", "--json"])).unwrap();
    let field = |list: &str, name: &str| {
        view[list].as_array().unwrap().iter().find(|f| f["name"] == name).cloned().unwrap_or_default()
    };
    // Real BaseEnvConfig fields, with the values the environment's config_init set.
    assert_eq!(field("configurable_fields", "group_size")["value"], 4);
    assert_eq!(field("configurable_fields", "batch_size")["value"], 8);
    assert!(field("configurable_fields", "wandb_name")["value"].as_str().unwrap().starts_with("arith-"));
    assert_eq!(field("locked_fields", "tokenizer_name")["value"], "Qwen/Qwen3-8B");
    assert_eq!(field("locked_fields", "total_steps")["value"], 2500);

    assert_eq!(home.cli_ok(&["config", "set", "group_size", "8"]).trim(), "group_size = 8");
    let err = stderr(&home.cli(&["config", "set", "total_steps", "10"]));
    assert!(err.starts_with("lachesis: field 'total_steps' is locked to 2500"), "{err}");
    let err = stderr(&home.cli(&["config", "set", "group_size", "lots"]));
    assert_eq!(err.trim(), "lachesis: field 'group_size' expects an integer, got 'lots'");
    let err = stderr(&home.cli(&["config", "set", "group_sise", "8"]));
    assert!(
        err.contains("unknown field 'group_sise' for environment 'arith' (configurable fields: "),
        "{err}"
    );
    let view: serde_json::Value = serde_json::from_str(&home.cli_ok(&["config", "show", "--json"])).unwrap();
    let group = view["configurable_fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "group_size")
        .unwrap()
        .clone();
    assert_eq!(group["value"], 8, "the edit is persisted for every surface");
}

#[tokio::test]
async fn missing_python_or_atroposlib_say_what_to_install() {
    let mut home = TestHome::new();
    home.environ = vec![
        ("LACHESIS_ENV_DIRS".into(), envs_dir().display().to_string()),
        ("LACHESIS_PYTHON".into(), "/no/such/python3".into()),
    ];
    let err = stderr(&home.cli(&["env", "select", "arith"]));
    assert!(
        err.contains("python interpreter '/no/such/python3' not found: install Python 3.11 or newer"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1);

    // The machine's own python3 has no atroposlib (the venv has it).
    let system_has_it = std::process::Command::new("python3")
        .args(["-c", "import atroposlib"])
        .output()
        .is_ok_and(|o| o.status.success());
    if system_has_it {
        eprintln!("skipped the atroposlib-missing half: the system python3 has atroposlib");
        return;
    }
    home.environ[1].1 = "python3".into();
    let err = stderr(&home.cli(&["env", "select", "arith"]));
    assert!(err.contains("atroposlib is not installed for python3"), "{err}");
}

#[tokio::test]
async fn the_run_config_file_is_accepted_by_atroposlib_in_process_mode() {
    let Some((python, tokenizer)) = atropos() else { return };
    let mut home = atropos_home(&python);
    home.cli_ok(&["env", "select", "arith"]);
    // A stub inference server, then the real environment in `process` mode reading lachesis's
    // config file; the stub stands where the trainer's inference server would.
    home.workflow(
        "arith-process",
        &format!(
            r#"name: arith-process
vars: {{tokenizer: "", tests: "", python_bin: ""}}
ports: {{api: auto, trainer: auto}}
stages:
  - name: stub
    argv: ["{{python}}", "{{tests}}/stub_inference.py", --port, "{{port.trainer}}"]
    probe: {{http: "http://127.0.0.1:{{port.trainer}}/health"}}
    start_timeout: 60s
  - name: env
    argv: ["{{python}}", "{{env_file}}", process, --config, "{{config_path}}", --env.data_path_to_save_groups, "{{run_dir}}/groups.jsonl"]
completion: {{stages: [env]}}
{LOCKED}"#
        ),
    );
    let mut args = vec!["--workflow".to_string(), "arith-process".to_string()];
    args.extend(vars(&python, &tokenizer));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    home.start_daemon();
    let id = home.submit(&args);
    let (run, stages) = home.wait_settled(id, T).await;
    let env_log = std::fs::read_to_string(&stages[1].log_path).unwrap_or_default();
    assert_eq!(run.state, RunState::Completed, "{:?}\nenv log:\n{env_log}", run.reason);
    assert_eq!(stages[1].record.exit, Some(Exit::Code(0)));
    let config = std::fs::read_to_string(run.run_dir.join("config.yaml")).unwrap();
    assert!(config.contains("wandb_run_name: arith-"), "{config}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(run.run_dir.join("config.yaml")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let groups = std::fs::read_to_string(run.run_dir.join("groups.jsonl")).unwrap();
    assert_eq!(groups.lines().count(), 2, "total_steps from the locked profile: 2 groups");
    let first: serde_json::Value = serde_json::from_str(groups.lines().next().unwrap()).unwrap();
    assert_eq!(first["scores"].as_array().unwrap().len(), 4, "group_size from the selection: 4");
    assert_no_stage_alive(&stages);
}

/// Runs the training workflow to its end; returns the run, its stages and their logs (read
/// before the temporary home goes away).
async fn train(
    crash_after: Option<u32>,
) -> Option<(lachesis::model::Run, Vec<lachesis::model::Stage>, Vec<String>)> {
    let (python, tokenizer) = atropos()?;
    let mut home = atropos_home(&python);
    if let Some(k) = crash_after {
        home.environ.push(("STAND_IN_TRAINER_CRASH_AFTER".into(), k.to_string()));
    }
    home.cli_ok(&["env", "select", "arith"]);
    home.workflow("atropos-loop", &training_workflow("atropos-loop"));
    let mut args = vec!["--workflow".to_string(), "atropos-loop".to_string()];
    args.extend(vars(&python, &tokenizer));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    home.start_daemon();
    let id = home.submit(&args);
    let (run, stages) = home.wait_settled(id, T).await;
    assert_no_stage_alive(&stages);
    // Nothing of the run survives it: run-api, trainer, environment and shims are gone.
    home.kill_daemon();
    let left: Vec<String> = crate::support::processes_mentioning(home.path())
        .into_iter()
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            format!("{pid}: {}", String::from_utf8_lossy(&cmd).replace('\0', " "))
        })
        .collect();
    assert!(left.is_empty(), "processes left behind: {left:#?}\nstages: {stages:#?}");
    let logs = stages.iter().map(|s| std::fs::read_to_string(&s.log_path).unwrap_or_default()).collect();
    Some((run, stages, logs))
}

#[tokio::test]
async fn the_real_loop_runs_to_completion() {
    let Some((run, stages, logs)) = train(None).await else { return };
    assert_eq!(run.state, RunState::Completed, "{:?}\n{logs:#?}", run.reason);
    let decided = run.reason.as_deref().unwrap_or_default();
    assert!(decided == "stage 'trainer' finished" || decided == "stage 'env' finished", "{decided}");
    assert!(logs[1].contains("Step 0/2") && logs[1].contains("Loss: "), "the trainer trained: {logs:#?}");
    for stage in &stages {
        assert!(stage.record.exit.is_some(), "stage {} has its exit recorded: {stage:?}", stage.name);
    }
    // Whichever of trainer and env finished first decided the run with exit 0.
    assert!(stages[1..].iter().any(|s| s.record.exit == Some(Exit::Code(0))), "{stages:#?}");
}

#[tokio::test]
async fn a_crashing_trainer_fails_the_run_naming_it() {
    let Some((run, stages, logs)) = train(Some(1)).await else { return };
    assert!(logs[1].contains("Step 0/2"), "{logs:#?}");
    assert_eq!(run.state, RunState::Failed);
    assert_eq!(run.reason.as_deref(), Some("stage 'trainer' exited with code 3"));
    assert_eq!(stages[1].record.exit, Some(Exit::Code(3)));
}
