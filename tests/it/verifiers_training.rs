//! The training tier of verifiers environments: the bundled `tinker-verifiers` workflow, with a
//! stand-in for the hosted trainer (tests/python/verifiers_trainer.py on the real
//! tinker-cookbook's checkpoint code, run for the workflow's own `python -m
//! tinker_cookbook.recipes.verifiers_rl.train` argv by tests/trainers/verifiers_python.sh), on a
//! verifiers environment laid out as `vf-init` lays it out and not installed. A run that names
//! no workflow trains it; its first attempt fails after a checkpoint and the retry resumes from
//! it; its metrics, checkpoints, weights and a sweep over the learning rate work as the
//! cookbook workflow's do. Submission refuses an environment of the wrong kind, and a required
//! parameter with no value, through every surface.
//!
//! The selection is put in the store as `env select` would store it (the verifiers discovery
//! is not this module's), with the parameters of the environment's `load_environment`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lachesis::environments::{EnvKind, EnvSource, FieldInfo, FieldKind, Selection};
use lachesis::model::RunState;
use lachesis::model::sweep::SweepState;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{TestHome, stderr, wait_for};

const T: Duration = Duration::from_secs(90);

/// The test environment: reverses a word; its `load_environment` answers with what it was
/// given, so the stand-in trainer can say what the environment saw.
const VF_REVERSE: &str = r#""""Reverse a word."""


def load_environment(num_examples: int = 8, difficulty: str = "easy", seed: int | None = None,
                     tags: list[str] | None = None):
    return {"num_examples": num_examples, "difficulty": difficulty, "seed": seed, "tags": tags}
"#;

fn field(name: &str, type_name: &str, kind: FieldKind, required: bool, default: Value) -> FieldInfo {
    FieldInfo {
        name: name.into(),
        type_name: type_name.into(),
        kind,
        optional: type_name.starts_with("Optional["),
        required,
        default: default.clone(),
        value: default,
        description: None,
    }
}

/// Writes the environment `id` as vf-init lays it out (module `NAME.py`, dashes as underscores,
/// in `envs/NAME/` with its pyproject.toml), not installed, and stores it as the selection with
/// `fields` and `config`; its directory.
pub async fn select_verifiers(
    home: &mut TestHome,
    id: &str,
    module: &str,
    fields: Vec<FieldInfo>,
    config: Value,
) -> PathBuf {
    let name = id.replace('-', "_");
    let dir = home.path().join("envs").join(&name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pyproject.toml"), format!("[project]\nname = \"{id}\"\nversion = \"0.1.0\"\n"))
        .unwrap();
    let file = dir.join(format!("{name}.py"));
    std::fs::write(&file, module).unwrap();
    let selection = Selection {
        env_name: id.into(),
        env_file: file,
        kind: EnvKind::Verifiers,
        source: Some(EnvSource::Directory { dir: dir.clone() }),
        class_name: "load_environment".into(),
        config_class: "load_environment".into(),
        fell_back: None,
        fields,
        config: serde_json::from_value(config).unwrap(),
        updated_at: lachesis::model::now_millis(),
    };
    home.service().await.put_selection_as_given(&selection).await.unwrap();
    dir
}

async fn select_reverse(home: &mut TestHome) -> PathBuf {
    let fields = vec![
        field("num_examples", "int", FieldKind::Int, false, json!(8)),
        field("difficulty", "str", FieldKind::Str, false, json!("easy")),
        field("seed", "Optional[int]", FieldKind::Int, false, Value::Null),
        field("tags", "Optional[List[str]]", FieldKind::List, false, Value::Null),
    ];
    let config = json!({"num_examples": 4, "difficulty": "easy", "seed": null, "tags": ["a", "b"]});
    select_verifiers(home, "vf-reverse", VF_REVERSE, fields, config).await
}

/// The bundled workflow as installed, its retry backoff (a minute) made short for the test.
fn bundled_workflow(home: &TestHome) {
    let bundled = include_str!("../../workflows/tinker-verifiers.yaml");
    let quick = bundled.replace("  backoff: 1m\n", "  backoff: 100ms\n");
    assert_ne!(quick, bundled, "the bundled workflow's backoff moved");
    home.workflow("tinker-verifiers", &quick);
}

/// A home whose `{python}` is the stand-in, with the real tinker-cookbook beside it; None
/// (saying why) without the cookbook tier.
fn training_home() -> Option<TestHome> {
    let (python, cookbook) = crate::checkpoints::real_cookbook()?;
    let mut home = TestHome::new();
    let standin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/verifiers_python.sh");
    home.environ.extend(
        [
            ("LACHESIS_PYTHON", standin.display().to_string()),
            ("LACHESIS_TEST_PYTHON", python),
            ("LACHESIS_TEST_COOKBOOK", cookbook),
            ("TINKER_API_KEY", "tinker-test-key".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    bundled_workflow(&home);
    Some(home)
}

/// What each attempt of the stand-in was given (`attempts.jsonl` in the recipe's log_path).
fn attempts(run_dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(run_dir.join("cookbook/attempts.jsonl")).unwrap_or_default();
    text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

/// The `key=value` arguments an attempt was given, by key.
fn argv(attempt: &Value) -> BTreeMap<String, String> {
    let args = attempt["argv"].as_array().unwrap();
    let pairs = args.iter().map(|a| a.as_str().unwrap().split_once('=').expect("key=value"));
    pairs.map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[tokio::test]
async fn a_verifiers_run_is_handed_its_environment_and_resumes_from_its_checkpoint() {
    let Some(mut home) = training_home() else { return };
    home.environ.push(("VF_STANDIN_FAIL_AT".into(), "7".into()));
    let env_dir = select_reverse(&mut home).await;
    home.start_daemon();
    // No workflow named: the selection is a verifiers environment, so tinker-verifiers trains it.
    let id =
        home.submit(&["--var", "save_every=2", "--var", "learning_rate=1e-4", "--set", "difficulty=hard"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}\n{}", run.reason, home.daemon_log());
    assert_eq!((run.workflow.as_str(), run.attempt), ("tinker-verifiers", 2));
    assert_eq!(run.env_name.as_deref(), Some("vf-reverse"));

    let given = attempts(&run.run_dir);
    assert_eq!(given.len(), 2, "{given:#?}");
    for attempt in &given {
        let args = argv(attempt);
        assert_eq!(args["vf_env_id"], "vf-reverse");
        let env_args: Value = serde_json::from_str(&args["vf_env_args"]).unwrap();
        assert_eq!(env_args, json!({"num_examples": 4, "difficulty": "hard", "tags": ["a", "b"]}));
        assert_eq!(args["log_path"], run.run_dir.join("cookbook").display().to_string());
        assert_eq!(args["behavior_if_log_dir_exists"], "resume");
        assert_eq!((args["learning_rate"].as_str(), args["save_every"].as_str()), ("1e-4", "2"));
        assert_eq!((args["model_name"].as_str(), args["max_steps"].as_str()), ("Qwen/Qwen3.5-4B", "None"));
        assert_eq!(args["wandb_name"], format!("vf-reverse-{id}"));
        assert_eq!(
            (args["wandb_project"].as_str(), args["session_name"].as_str()),
            ("lachesis", args["wandb_name"].as_str())
        );
        // The environment imported from its directory, called with exactly those values.
        let module = env_dir.join("vf_reverse.py").display().to_string();
        assert_eq!(attempt["module"], module);
        assert_eq!(
            attempt["loaded"],
            json!({"num_examples": 4, "difficulty": "hard", "seed": null, "tags": ["a", "b"]})
        );
    }
    assert_eq!((given[0]["resume_step"].as_str(), given[1]["resume_step"].as_str()), (None, Some("6")));
    assert_eq!(given[1]["resume_path"], "tinker://cookbook/weights/000006");
    // The cookbook found the same checkpoint on its own as lachesis handed it.
    let log = home.cli_ok(&["run", "logs", &id.to_string(), "--stage", "trainer"]);
    assert!(
        log.contains(
            "cookbook resumes at batch 6 (tinker://cookbook/weights/000006); LACHESIS_RESUME_STEP=6"
        ),
        "{log}"
    );
    let messages = home.messages(id).await;
    assert!(
        messages.iter().any(|m| m == "attempt 2 resumes from step 6 (tinker://cookbook/weights/000006)"),
        "{messages:#?}"
    );

    // Metrics by name, checkpoints and trained weights, as the cookbook workflow's.
    let service = home.service().await;
    let reward = wait_for("the reward's last reading", T, || {
        let service = service.clone();
        async move {
            let series = service.run_metric_series(id, "env/all/reward/total").await.unwrap();
            series.last().is_some_and(|p| p.step == 9).then_some(series)
        }
    })
    .await;
    assert_eq!(reward.last().map(|p| (p.attempt, p.value)), Some((2, 1.0)));
    let listed: Value =
        serde_json::from_str(&home.cli_ok(&["run", "metrics", &id.to_string(), "--json"])).unwrap();
    let names: Vec<&str> =
        listed["metrics"].as_array().unwrap().iter().filter_map(|m| m["name"].as_str()).collect();
    assert!(names.contains(&"env/all/reward/total") && names.contains(&"progress/done_frac"), "{listed:#}");
    let rows: Vec<(i64, i64)> =
        service.run_checkpoints_of(id).await.unwrap().iter().map(|c| (c.attempt, c.step)).collect();
    assert_eq!(rows, [(1, 2), (1, 4), (1, 6), (2, 8), (2, 10)]);
    let checkpoints: Value =
        serde_json::from_str(&home.cli_ok(&["run", "checkpoints", &id.to_string(), "--json"])).unwrap();
    assert_eq!(checkpoints.as_array().map(Vec::len), Some(5), "{checkpoints:#}");
    let results = service.run_results(&id.to_string()).await.unwrap();
    assert_eq!(results.trained_weights.as_deref(), Some("tinker://cookbook/sampler_weights/final"));
    home.kill_daemon();
}

#[tokio::test]
async fn a_sweep_over_the_learning_rate_picks_the_best_reward() {
    let Some(mut home) = training_home() else { return };
    select_reverse(&mut home).await;
    let file = home.path().join("lr.yaml");
    std::fs::write(
        &file,
        "method: grid\nworkflow: tinker-verifiers\nmetric: {name: env/all/reward/total, goal: maximize}\n\
         parameters:\n  learning_rate: {values: [0.00001, 0.0001]}\n  max_steps: {value: 4}\n  save_every: {value: 2}\n",
    )
    .unwrap();
    let out: Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "start", &file.display().to_string(), "--json"]))
            .unwrap();
    let sweep = out["id"].as_str().unwrap().to_string();
    let members: Vec<Uuid> =
        out["members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().parse().unwrap()).collect();
    assert_eq!(members.len(), 2);
    home.start_daemon();
    for id in &members {
        let (run, _) = home.wait_settled(*id, T).await;
        assert_eq!(run.state, RunState::Completed, "{:?}\n{}", run.reason, home.daemon_log());
        assert_eq!(run.workflow, "tinker-verifiers");
        let args = argv(&attempts(&run.run_dir)[0]);
        assert_eq!(args["learning_rate"], run.params.vars["learning_rate"]);
        assert_eq!(args["max_steps"], "4");
    }
    let service = home.service().await;
    let done = wait_for("the sweep to be done", T, || {
        let (service, sweep) = (service.clone(), sweep.clone());
        async move {
            let record = service.resolve_sweep(&sweep).await.unwrap();
            (record.state == SweepState::Done).then_some(record)
        }
    })
    .await;
    let winner = done.winner.expect("a winner");
    // Reward grows with the learning rate: 1e-4 reaches 1.0 at its last step, 1e-5 0.1.
    assert_eq!((winner.k, winner.run, winner.value), (1, members[1], 1.0));
    home.kill_daemon();
}

/// Submission refuses a verifiers environment to a workflow that runs Atropos stages and an
/// Atropos one to tinker-verifiers, over the CLI and `POST /runs`; a request naming no workflow
/// gets the one that trains its environment's kind.
#[tokio::test]
async fn each_kind_goes_to_the_workflow_that_trains_it() {
    let mut home = TestHome::new();
    home.environ.extend(
        [("TINKER_API_KEY", "t"), ("WANDB_API_KEY", "w")].map(|(k, v)| (k.to_string(), v.to_string())),
    );
    select_reverse(&mut home).await;
    let out = home.cli(&["run", "start", "--workflow", "tinker-atropos"]);
    assert_eq!(
        stderr(&out).trim(),
        "lachesis: environment 'vf-reverse' is of kind verifiers, and workflow 'tinker-atropos' trains atropos \
         environments (tinker-verifiers trains it; a run that names no workflow gets it)"
    );
    let api = crate::http::start_with(&mut home, "127.0.0.1", None, &[]).await;
    let (status, body) = api.post("/runs", json!({})).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{body:#}");
    assert_eq!(
        (body["workflow"].as_str(), body["env_name"].as_str()),
        (Some("tinker-verifiers"), Some("vf-reverse"))
    );
    let (status, body) = api.post("/runs", json!({"workflow": "tinker-atropos"})).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (reqwest::StatusCode::BAD_REQUEST, Some("wrong_environment_kind"))
    );
    // arith, an Atropos environment of the API's environment directory.
    let (status, body) = api.post("/runs", json!({"env": "arith", "workflow": "tinker-verifiers"})).await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{body:#}");
    let message = body["message"].as_str().unwrap_or_default();
    assert_eq!(
        message,
        "environment 'arith' is of kind atropos, and workflow 'tinker-verifiers' trains verifiers environments \
         (a run that names no workflow gets the catalog's default)",
        "{body:#}"
    );
    let (status, body) = api.post("/runs", json!({"env": "arith"})).await;
    assert_eq!(
        (status, body["workflow"].as_str()),
        (reqwest::StatusCode::CREATED, Some("tinker-atropos")),
        "{body:#}"
    );
    home.kill_daemon();
}

/// A `load_environment` parameter without a default and without a value: refused at submission,
/// naming it (CLI and MCP); given one, for the run or in the selection, the run is queued with it.
#[tokio::test]
async fn a_required_parameter_without_a_value_is_refused_naming_it() {
    let mut home = TestHome::new();
    home.environ.push(("TINKER_API_KEY".into(), "t".into()));
    let fields = vec![
        field("split", "str", FieldKind::Str, true, Value::Null),
        field("num_examples", "int", FieldKind::Int, false, json!(8)),
    ];
    let module = "def load_environment(split: str, num_examples: int = 8):\n    return split\n";
    select_verifiers(&mut home, "vf-split", module, fields, json!({"split": null, "num_examples": 8})).await;
    let out = home.cli(&["run", "start"]);
    assert_eq!(
        stderr(&out).trim(),
        "lachesis: environment 'vf-split' needs a value for 'split' (its load_environment has no default for it): \
         `lachesis config set split VALUE`, or --set split=VALUE for one run"
    );
    let answer = crate::requests::mcp_call(&home, "rl_start_training", json!({}));
    assert_eq!(
        answer["error"],
        "Environment 'vf-split' needs a value for 'split' (its load_environment has no default for it). \
         Use rl_edit_config(field=\"split\", value=...) first.",
        "{answer:#}"
    );
    // A value is passed as written, braces and all: `{env_args}` is filled once, never expanded again.
    let id = home.submit(&["--set", "split={run_id}=\"x\""]);
    let run = home.run(id).await;
    assert_eq!(run.params.resolved["env_args"], r#"{"num_examples":8,"split":"{run_id}=\"x\""}"#);
    let plan = run.spec.stages[0].plan(&run.params.resolved, &run.run_dir).unwrap();
    let argv = plan.argv;
    assert_eq!(plan.environ["PYTHONPATH"], home.path().join("envs/vf_split").display().to_string());
    assert!(
        argv.contains(&r#"vf_env_args={"num_examples":8,"split":"{run_id}=\"x\""}"#.to_string()),
        "{argv:?}"
    );
    let import_dir = home.path().join("envs/vf_split").display().to_string();
    assert_eq!(run.params.resolved["env_import_dir"], import_dir);
}

/// Every `key=` the bundled workflow passes is a field of the recipe's `CLIConfig` in the
/// installed tinker-cookbook (read by tests/python/recipe_config.py without importing it), and
/// each var it declares has the recipe's default; the same for the tinker-cookbook workflow's
/// math_rl recipe. `resume` is one of the cookbook's log-directory behaviours.
#[test]
fn the_workflows_arguments_are_the_recipes() {
    let Some((python, cookbook)) = crate::checkpoints::real_cookbook() else { return };
    let cookbook = PathBuf::from(cookbook).join("tinker_cookbook");
    let reader = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/recipe_config.py");
    for (workflow, recipe, defaults) in [
        (include_str!("../../workflows/tinker-verifiers.yaml"), "verifiers_rl", true),
        (include_str!("../../workflows/tinker-cookbook.yaml"), "math_rl", false),
    ] {
        let spec = lachesis::workflow::Workflow::parse(Path::new("w.yaml"), workflow).unwrap();
        let argv = &spec.stages[0].argv;
        assert_eq!(argv[2], format!("tinker_cookbook.recipes.{recipe}.train"));
        let out = std::process::Command::new(&python)
            .arg(&reader)
            .arg(cookbook.join("recipes").join(recipe).join("train.py"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let fields: BTreeMap<String, Value> = serde_json::from_slice(&out.stdout).unwrap();
        for arg in &argv[3..] {
            let (key, value) =
                arg.split_once('=').unwrap_or_else(|| panic!("{recipe}: '{arg}' is not key=value"));
            assert!(
                fields.contains_key(key),
                "{recipe}: CLIConfig has no field '{key}' ({:?})",
                fields.keys()
            );
            let var = value.strip_prefix('{').and_then(|v| v.strip_suffix('}'));
            let Some(declared) = var.and_then(|v| spec.vars.get(v)) else { continue };
            if defaults {
                let recipe_default = &fields[key]["default"];
                let same = match recipe_default {
                    Value::Null => declared == "None",
                    Value::Number(n) => declared.parse::<f64>().ok() == n.as_f64(),
                    Value::String(s) => declared == s,
                    other => panic!("{recipe}: {key}'s default {other} is not compared"),
                };
                assert!(same, "{recipe}: var {key} is '{declared}', the recipe's default {recipe_default}");
            }
        }
    }
    let cli_utils = std::fs::read_to_string(cookbook.join("cli_utils.py")).unwrap();
    let behaviours = cli_utils.lines().find(|l| l.starts_with("LogdirBehavior = ")).unwrap();
    assert!(behaviours.contains("\"resume\""), "{behaviours}");
}

/// `doctor` checks each recipe a catalog workflow runs: both bundled recipes are found in the
/// installed cookbook, and the verifiers one says what it lacks (the test venv has no verifiers).
#[test]
fn doctor_checks_the_verifiers_recipe_the_catalog_runs() {
    let Some((python, cookbook)) = crate::checkpoints::real_cookbook() else { return };
    let mut home = TestHome::new();
    home.environ = vec![("LACHESIS_PYTHON".into(), python.clone()), ("PYTHONPATH".into(), cookbook)];
    let report: Value = serde_json::from_slice(&home.cli(&["doctor", "--json"]).stdout).unwrap();
    let check = |name: &str| {
        let checks = report["checks"].as_array().unwrap();
        checks.iter().find(|c| c["name"] == name).cloned().unwrap_or_else(|| panic!("no {name}: {report:#}"))
    };
    let math = check("tinker-cookbook math_rl");
    assert_eq!(math["ok"], true, "{math:#}");
    assert_eq!(math["detail"], "tinker_cookbook.recipes.math_rl found (needed by tinker-cookbook)");
    let verifiers = check("tinker-cookbook verifiers_rl");
    assert_eq!((verifiers["ok"].as_bool(), verifiers["required"].as_bool()), (Some(false), Some(false)));
    assert_eq!(
        verifiers["detail"],
        format!(
            "tinker_cookbook.recipes.verifiers_rl found, but verifiers is not importable: \
             run `{python} -m pip install 'tinker-cookbook[verifiers]'`; needed by tinker-verifiers"
        )
    );
}
