//! verifiers environments found, selected and configured without running their code: a real
//! Python venv (made with `python3 -m venv --without-pip`, so no network) whose site-packages
//! holds distributions written as pip writes them (`*.dist-info` with METADATA, RECORD,
//! top_level.txt), and `vf-init` layouts under the environment directories. Broken ones are
//! warnings that leave the listing whole; every surface (CLI, HTTP, MCP) serves both kinds.

use std::path::{Path, PathBuf};
use std::process::Command;

use lachesis::environments::verifiers::PythonSite;
use lachesis::environments::{EnvKind, EnvSource, discover_all};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{TestHome, stderr};

/// A flat module, required verifiers, every kind of parameter.
const REVERSE_TEXT: &str = r#""""Reverse a text, word by word."""
import verifiers as vf


def load_environment(
    split: str,
    num_examples: int = 8,
    temperature: float = 0.7,
    strict: bool = False,
    seed: int | None = None,
    tags: list[str] | None = None,
    weights: dict = {"exact": 1.0},
    system_prompt: str = SYSTEM_PROMPT,
    **kwargs,
) -> vf.Environment:
    raise RuntimeError("discovery must not run me")
"#;

/// A Python 3 interpreter to make venvs with, or `None` (the test is skipped with a word).
fn python3() -> Option<PathBuf> {
    let ok =
        Command::new("python3").args(["-c", "import venv, sys; assert sys.version_info >= (3, 10)"]).status();
    if ok.is_ok_and(|s| s.success()) {
        Some(PathBuf::from("python3"))
    } else {
        eprintln!("skipped: no python3 >= 3.10 with venv");
        None
    }
}

/// A venv without pip under `dir`; its interpreter and its site-packages.
fn venv(python: &Path, dir: &Path) -> (PathBuf, PathBuf) {
    let out = Command::new(python).args(["-m", "venv", "--without-pip"]).arg(dir).output().unwrap();
    assert!(out.status.success(), "venv: {}", String::from_utf8_lossy(&out.stderr));
    let lib = dir.join("lib");
    let site = std::fs::read_dir(&lib)
        .unwrap()
        .map(|e| e.unwrap().path().join("site-packages"))
        .find(|p| p.is_dir())
        .expect("a site-packages");
    (dir.join("bin/python"), site)
}

/// Writes a distribution as pip installs one: its files, and `NAME-VERSION.dist-info` with
/// METADATA (depending on verifiers when `requires` says so), RECORD listing the files, and
/// `top_level.txt` when given.
fn install(
    site: &Path,
    name: &str,
    version: &str,
    requires: bool,
    files: &[(&str, &str)],
    top_level: Option<&str>,
) {
    let info = site.join(format!("{}-{version}.dist-info", name.replace('-', "_")));
    std::fs::create_dir_all(&info).unwrap();
    let requires = if requires { "Requires-Dist: verifiers>=0.1.9\n" } else { "" };
    std::fs::write(
        info.join("METADATA"),
        format!("Metadata-Version: 2.4\nName: {name}\nVersion: {version}\nSummary: {name} for tests\n{requires}\nLong text.\n"),
    )
    .unwrap();
    let mut record = String::new();
    for (path, text) in files {
        let file = site.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, text).unwrap();
        record.push_str(&format!("{path},sha256=x,{}\n", text.len()));
    }
    record.push_str(&format!("{}/RECORD,,\n", info.file_name().unwrap().to_string_lossy()));
    std::fs::write(info.join("RECORD"), record).unwrap();
    if let Some(top) = top_level {
        std::fs::write(info.join("top_level.txt"), top).unwrap();
    }
}

/// A `vf-init` layout `envs/DIR/` with its pyproject.toml naming `id`, and `files`.
fn layout(envs: &Path, dir: &str, id: &str, files: &[(&str, &str)]) -> PathBuf {
    let root = envs.join(dir);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("pyproject.toml"),
        format!("[project]\nname = \"{id}\"\nversion = \"0.1.0\"\ndescription = \"{id}, laid out by vf-init\"\ndependencies = [\"verifiers>=0.1.9\"]\n"),
    )
    .unwrap();
    for (path, text) in files {
        std::fs::write(root.join(path), text).unwrap();
    }
    std::fs::canonicalize(root).unwrap()
}

/// A home whose Python has the test's distributions and whose environment directory has the
/// test's layouts (and one Atropos environment): what a researcher moving to verifiers has.
struct World {
    home: TestHome,
    site: PathBuf,
    envs: PathBuf,
}

fn world() -> Option<World> {
    let python = python3()?;
    let mut home = TestHome::new();
    let (interpreter, site) = venv(&python, &home.path().join("venv"));
    let envs = home.path().join("envs");
    std::fs::create_dir_all(&envs).unwrap();
    let envs = std::fs::canonicalize(envs).unwrap();
    install(&site, "reverse-text", "0.1.2", true, &[("reverse_text.py", REVERSE_TEXT)], None);
    // A package re-exporting its load_environment from a module of its own.
    install(
        &site,
        "math-python",
        "1.0.0",
        true,
        &[
            (
                "math_python/__init__.py",
                "from .env import load_environment\n\n__all__ = [\"load_environment\"]\n",
            ),
            (
                "math_python/env.py",
                "def load_environment(difficulty: Literal['easy', 'hard'] = 'easy'):\n    ...\n",
            ),
        ],
        Some("math_python\n"),
    );
    // Ordinary libraries: not environments, and nothing to say about them.
    install(
        &site,
        "plainlib",
        "2.0",
        false,
        &[("plainlib/__init__.py", "def load(x):\n    return x\n")],
        None,
    );
    install(
        &site,
        "helpers",
        "2.0",
        false,
        &[("helpers.py", "# mentions load_environment in a comment only\n")],
        None,
    );
    // Broken ones: a warning each, one line.
    install(
        &site,
        "broken-env",
        "0.0.1",
        true,
        &[("broken_env.py", "def load_environment(:\n    pass\n")],
        None,
    );
    install(&site, "nothing-env", "0.0.1", true, &[("nothing_env.py", "def make():\n    pass\n")], None);
    install(
        &site,
        "random",
        "9.9",
        true,
        &[("random.py", "def load_environment():\n    pass\n")],
        Some("random\n"),
    );
    let garbage = site.join("garbage-1.0.dist-info");
    std::fs::create_dir_all(&garbage).unwrap();
    std::fs::write(garbage.join("METADATA"), b"\xff\xfe not headers at all").unwrap();
    // Laid out by vf-init, not installed.
    layout(
        &envs,
        "vf_reverse",
        "vf-reverse",
        &[(
            "vf_reverse.py",
            "def load_environment(num_examples: int = 4, split: str = \"train\"):\n    ...\n",
        )],
    );
    layout(&envs, "vf_package", "vf-package", &[]);
    std::fs::create_dir_all(envs.join("vf_package/vf_package")).unwrap();
    std::fs::write(
        envs.join("vf_package/vf_package/__init__.py"),
        "def load_environment(k: int = 1):\n    ...\n",
    )
    .unwrap();
    // The same id as an installed one, from another file: a collision.
    layout(
        &envs,
        "reverse_text",
        "reverse-text",
        &[("reverse_text.py", "def load_environment():\n    ...\n")],
    );
    layout(&envs, "vf_nothing", "vf-nothing", &[("vf_nothing.py", "x = 1\n")]);
    // Python would import its own `json`, never this one.
    layout(&envs, "json", "json", &[("json.py", "def load_environment():\n    ...\n")]);
    std::fs::write(envs.join("arith.py"), "class ArithEnv(BaseEnv):\n    name = \"arith\"\n").unwrap();
    // The tinker-atropos checkout's environments: there, and empty.
    let atropos = home.path().join("tinker-atropos");
    std::fs::create_dir_all(atropos.join("tinker_atropos/environments")).unwrap();
    home.environ = vec![
        ("LACHESIS_PYTHON".into(), interpreter.display().to_string()),
        ("LACHESIS_TINKER_ATROPOS".into(), atropos.display().to_string()),
        ("LACHESIS_ENV_DIRS".into(), envs.display().to_string()),
        ("TINKER_API_KEY".into(), "tk-test".into()),
    ];
    Some(World { home, site: std::fs::canonicalize(site).unwrap(), envs })
}

fn listed<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {list:#}"))
}

#[tokio::test]
async fn installed_and_vf_init_environments_are_listed_with_their_kind_and_source() {
    let Some(w) = world() else { return };
    let out = w.home.cli(&["env", "list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    // Atropos first, then installed distributions (in sys.path and name order), then layouts.
    assert_eq!(names, ["arith", "math-python", "reverse-text", "vf-package", "vf-reverse"], "{list:#}");

    let reverse = listed(&list, "reverse-text");
    assert_eq!(reverse["kind"], "verifiers");
    assert_eq!(reverse["source"], json!({"from": "package", "package": "reverse-text", "version": "0.1.2"}));
    assert_eq!(reverse["file_path"], w.site.join("reverse_text.py").display().to_string());
    assert_eq!(reverse["description"], "reverse-text for tests");
    assert_eq!(reverse["class_name"], "load_environment");
    // Its parameters live in the module it re-exports them from.
    assert_eq!(
        listed(&list, "math-python")["file_path"],
        w.site.join("math_python/env.py").display().to_string()
    );
    let vf = listed(&list, "vf-reverse");
    assert_eq!(
        vf["source"],
        json!({"from": "directory", "dir": w.envs.join("vf_reverse").display().to_string()})
    );
    assert_eq!(vf["description"], "vf-reverse, laid out by vf-init");
    assert_eq!(
        listed(&list, "vf-package")["file_path"],
        w.envs.join("vf_package/vf_package/__init__.py").display().to_string()
    );
    assert_eq!(listed(&list, "arith")["kind"], "atropos");

    // Each broken one is one warning line, and says what is wrong with it.
    let err = stderr(&out);
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("warning: ")).collect();
    let has = |needle: &str| {
        assert!(warnings.iter().any(|w| w.contains(needle)), "no warning with {needle:?}: {err}")
    };
    has("broken-env 0.0.1: syntax error at line 1");
    has("nothing-env 0.0.1: defines no load_environment");
    has("random 9.9: its module 'random' has the name of a standard-library module");
    has("garbage-1.0.dist-info: unreadable metadata");
    has("environment 'reverse-text' (directory ");
    has("environment 'vf-nothing': defines no load_environment");
    has("environment 'json': 'json' is a standard-library module name, which Python imports instead");
    assert_eq!(warnings.len(), 7, "{err}");
    assert!(!err.contains("plainlib") && !err.contains("helpers"), "{err}");
    assert_eq!(err.lines().count(), warnings.len(), "nothing but warnings: {err}");

    // The table has a KIND column and says where each came from.
    let table = w.home.cli_ok(&["env", "list"]);
    let header = table.lines().find(|l| l.contains("NAME")).unwrap();
    assert!(header.contains("KIND") && header.contains("FROM"), "{table}");
    let row = table.lines().find(|l| l.contains("reverse-text")).unwrap();
    assert!(row.contains("verifiers") && row.contains("package reverse-text 0.1.2"), "{table}");

    let show = w.home.cli_ok(&["env", "show", "reverse-text"]);
    assert!(show.contains("kind         verifiers"), "{show}");
    assert!(show.contains("from         package reverse-text 0.1.2"), "{show}");
    let show = w.home.cli_ok(&["env", "show", "vf-reverse"]);
    assert!(
        show.contains(&format!("from         directory {}", w.envs.join("vf_reverse").display())),
        "{show}"
    );
}

#[tokio::test]
async fn a_python_that_cannot_be_asked_leaves_the_directories_listed() {
    let Some(w) = world() else { return };
    let mut home = w.home;
    home.environ[0].1 = home.path().join("no-such-python").display().to_string();
    let out = home.cli(&["env", "list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(list.as_array().unwrap().iter().all(|e| e["source"]["from"] == "directory"), "{list:#}");
    let err = stderr(&out);
    assert!(err.contains("warning: installed verifiers environments are not listed: cannot run "), "{err}");
}

#[tokio::test]
async fn selecting_makes_the_parameters_the_configurable_fields() {
    let Some(mut w) = world() else { return };
    let home = &w.home;
    let out = home.cli_ok(&["env", "select", "reverse-text"]);
    assert!(out.starts_with("selected reverse-text"), "{out}");
    let view: Value = serde_json::from_str(&home.cli_ok(&["config", "show", "--json"])).unwrap();
    assert_eq!(view["kind"], "verifiers");
    assert_eq!(view["source"], "package reverse-text 0.1.2");
    assert_eq!(view["workflow"], "tinker-verifiers");
    let fields: Vec<(String, String, Value, bool)> = view["configurable_fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().into(),
                f["type"].as_str().unwrap().into(),
                f["default"].clone(),
                f["required"].as_bool().unwrap(),
            )
        })
        .collect();
    let field = |n: &str, t: &str, d: Value, r: bool| (n.to_string(), t.to_string(), d, r);
    assert_eq!(
        fields,
        vec![
            field("split", "str", Value::Null, true),
            field("num_examples", "int", json!(8), false),
            field("temperature", "float", json!(0.7), false),
            field("strict", "bool", json!(false), false),
            field("seed", "Optional[int]", Value::Null, false),
            field("tags", "Optional[list[str]]", Value::Null, false),
            field("weights", "dict", json!({"exact": 1.0}), false),
            field("system_prompt", "str", Value::Null, false),
        ]
    );
    let prompt = &view["configurable_fields"][7]["description"];
    assert!(prompt.as_str().unwrap().starts_with("default: SYSTEM_PROMPT (not a literal"), "{prompt}");
    // The recipe's infrastructure keys are locked; its training keys are the workflow's vars.
    let locked: Vec<&str> =
        view["locked_fields"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(
        locked,
        ["behavior_if_log_dir_exists", "log_path", "session_name", "wandb_name", "wandb_project"]
    );
    assert_eq!(view["locked_profile"]["behavior_if_log_dir_exists"], "resume");
    assert_eq!(view["workflow_vars"]["model_name"], "Qwen/Qwen3.5-4B");
    assert_eq!(view["workflow_vars"]["lora_rank"], "32");
    let text = home.cli_ok(&["config", "show"]);
    assert!(text.contains("(required)") && text.contains("--var NAME=VALUE"), "{text}");

    // Values are checked as they are for Atropos fields, each refusal one line.
    for (field, value, says) in [
        ("num_examples", "many", "field 'num_examples' expects an integer, got 'many'"),
        ("strict", "perhaps", "field 'strict' expects true or false, got 'perhaps'"),
        ("tags", "[1, 2]", "field 'tags' expects a list of strings"),
        ("weights", "[1]", "field 'weights' expects a JSON object"),
        (
            "log_path",
            "/tmp/x",
            "field 'log_path' is locked to \"{run_dir}/cookbook\" by the workflow's locked profile",
        ),
        ("nope", "1", "unknown field 'nope'"),
    ] {
        let out = home.cli(&["config", "set", field, value]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{field}={value}: {err}");
        assert!(err.contains(says) && err.trim_end().lines().count() == 1, "{field}={value}: {err}");
    }
    assert_eq!(home.cli_ok(&["config", "set", "seed", "none"]).trim(), "seed = null");
    assert_eq!(home.cli_ok(&["config", "set", "tags", "a, b"]).trim(), "tags = [\"a\",\"b\"]");

    // A run with the required parameter unset is refused; once set, it is queued.
    let out = home.cli(&["run", "start"]);
    let err = stderr(&out);
    assert!(
        !out.status.success() && err.contains("environment 'reverse-text' needs a value for 'split'"),
        "{err}"
    );
    home.cli_ok(&["config", "set", "split", "train"]);
    let id = uuid::Uuid::parse_str(home.cli_ok(&["run", "start"]).trim()).unwrap();
    let run = w.home.run(id).await;
    assert_eq!((run.workflow.as_str(), run.env_name.as_deref()), ("tinker-verifiers", Some("reverse-text")));
    assert_eq!(run.params.config["split"], "train");
    assert_eq!(run.params.config["tags"], json!(["a", "b"]));
    assert!(!run.params.config.contains_key("wandb_name"), "the workflow names the W&B run");
}

#[tokio::test]
async fn a_named_environment_with_a_required_parameter_is_refused_without_selection() {
    let Some(w) = world() else { return };
    let out = w.home.cli(&["run", "start", "--env", "reverse-text"]);
    let err = stderr(&out);
    assert!(!out.status.success() && err.contains("needs a value for 'split'"), "{err}");
    let id = w.home.cli_ok(&["run", "start", "--env", "reverse-text", "--set", "split=test"]);
    assert!(!id.trim().is_empty());
}

#[tokio::test]
async fn names_that_are_not_names_are_refused_in_one_line() {
    let Some(w) = world() else { return };
    for name in ["../reverse-text", "a/b", "..", "a\tb"] {
        for command in ["select", "show"] {
            let out = w.home.cli(&["env", command, name]);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(3), "{command} {name:?}: {err}");
            assert!(err.contains("is not a name") && err.trim_end().lines().count() == 1, "{err}");
        }
    }
    // A NUL cannot be in argv; through the service it is refused as the others are.
    let mut home = w.home;
    let err = home.service().await.select_environment("rev\0erse").await.unwrap_err().to_string();
    assert_eq!(
        err,
        "environment name 'rev\\u{0}erse' is not a name: it may not contain '/', '..', NUL or control characters"
    );
}

#[tokio::test]
async fn a_module_broken_after_selection_is_refused_when_selected_again() {
    let Some(w) = world() else { return };
    w.home.cli_ok(&["env", "select", "vf-reverse"]);
    std::fs::write(w.envs.join("vf_reverse/vf_reverse.py"), "def load_environment(\n").unwrap();
    let out = w.home.cli(&["env", "select", "vf-reverse"]);
    let err = stderr(&out);
    assert!(!out.status.success() && err.contains("unknown environment 'vf-reverse'"), "{err}");
    // The listing says why, and still lists the others.
    let out = w.home.cli(&["env", "list"]);
    assert!(stderr(&out).contains("environment 'vf-reverse': syntax error at line 1"), "{}", stderr(&out));
}

#[tokio::test]
async fn every_surface_serves_both_kinds() {
    let Some(w) = world() else { return };
    let mut home = w.home;
    // MCP: the reference's keys, and `kind`.
    let list = crate::requests::mcp_call(&home, "rl_list_environments", json!({}));
    let reverse = listed(&list["environments"], "reverse-text");
    for key in ["name", "class_name", "file_path", "description"] {
        assert!(reverse.get(key).is_some(), "{key} kept: {reverse:#}");
    }
    assert_eq!(reverse["kind"], "verifiers");
    assert_eq!(listed(&list["environments"], "arith")["kind"], "atropos");
    assert!(list["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("broken-env")));
    let selected = crate::requests::mcp_call(&home, "rl_select_environment", json!({ "name": "vf-reverse" }));
    assert_eq!(
        (selected["environment"].as_str(), selected["kind"].as_str()),
        (Some("vf-reverse"), Some("verifiers"))
    );
    let config = crate::requests::mcp_call(&home, "rl_get_current_config", json!({}));
    assert_eq!(config["kind"], "verifiers");
    let split =
        config["configurable_fields"].as_array().unwrap().iter().find(|f| f["name"] == "split").unwrap();
    for key in ["name", "type", "default", "description", "current_value"] {
        assert!(split.get(key).is_some(), "{key} kept: {split:#}");
    }
    assert_eq!(split["current_value"], "train");
    let edit =
        crate::requests::mcp_call(&home, "rl_edit_config", json!({ "field": "num_examples", "value": 12 }));
    assert_eq!(edit["value"], 12, "{edit:#}");
    let edit =
        crate::requests::mcp_call(&home, "rl_edit_config", json!({ "field": "num_examples", "value": "x" }));
    assert!(edit["error"].as_str().unwrap().contains("expects an integer"), "{edit:#}");
    let refused = crate::requests::mcp_call(&home, "rl_select_environment", json!({ "name": "../etc" }));
    assert!(refused["error"].as_str().unwrap().contains("is not a name"), "{refused:#}");

    // HTTP: the listing and one environment, with kind and source.
    let api = crate::http::start_with(&mut home, "127.0.0.1", None, &[]).await;
    let (status, body) = api.get("/environments").await;
    assert_eq!(status, 200);
    let reverse = listed(&body["environments"], "reverse-text");
    assert_eq!(
        (reverse["kind"].as_str(), reverse["source"]["version"].as_str()),
        (Some("verifiers"), Some("0.1.2"))
    );
    let (status, body) = api.get("/environments/vf-reverse").await;
    assert_eq!((status.as_u16(), body["kind"].as_str()), (200, Some("verifiers")));
    let (status, body) = api.get("/selection").await;
    assert_eq!((status.as_u16(), body["kind"].as_str()), (200, Some("verifiers")), "{body:#}");
    let (status, _) = api.get("/environments/a%2F..").await;
    assert_eq!(status.as_u16(), 400);

    // The dashboard's environments page: both kinds, where each came from, the warnings.
    let token = std::fs::read_to_string(home.path().join("api-token")).unwrap();
    let page = lachesis::http_client::builder()
        .build()
        .unwrap()
        .get(format!("{}/ui/environments", api.base()))
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(
        page.contains("<td>reverse-text</td><td>verifiers</td><td>package reverse-text 0.1.2</td>"),
        "{page}"
    );
    assert!(page.contains("<td>arith</td><td>atropos</td>"), "{page}");
    assert!(page.contains("selected <b>vf-reverse</b> (verifiers, directory "), "{page}");
    assert!(page.contains("broken-env 0.0.1: syntax error at line 1"), "{page}");
    home.kill_daemon();
}

/// Listing is the same in-process, and cheap to repeat: the Python is asked once.
#[tokio::test]
async fn discovery_in_process_matches_and_hostile_files_never_panic() {
    let Some(w) = world() else { return };
    let python = w.home.environ[0].1.clone();
    let site: PythonSite = lachesis::environments::verifiers::python_site(&python).await.unwrap();
    assert!(site.path.iter().any(|p| std::fs::canonicalize(p).ok().as_deref() == Some(w.site.as_path())));
    let found = discover_all(std::slice::from_ref(&w.envs), Ok(&site));
    let reverse = found.find("reverse-text").unwrap();
    assert_eq!(reverse.kind, EnvKind::Verifiers);
    assert_eq!(
        reverse.source,
        EnvSource::Package { package: "reverse-text".into(), version: "0.1.2".into() }
    );

    // Random bytes as METADATA, RECORD, top_level.txt, pyproject.toml and modules: warnings
    // of one line at most, never a panic.
    let scratch = tempfile::tempdir().unwrap();
    let bytes = proptest::collection::vec(any::<u8>(), 0..300);
    let texts = prop_oneof![
        bytes.clone().prop_map(|b| b),
        "(Name|Version|Requires-Dist): [a-z0-9._-]{0,12}(\n[A-Za-z-]{0,8}: \\PC{0,20}){0,4}"
            .prop_map(String::into_bytes),
        "(def load_environment\\(|from \\.x import load_environment|\\[project\\]\nname = \")\\PC{0,60}"
            .prop_map(String::into_bytes),
    ];
    let mut runner = proptest::test_runner::TestRunner::new_with_rng(
        proptest::test_runner::Config { cases: 64, failure_persistence: None, ..Default::default() },
        proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    );
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(
            &(texts.clone(), texts.clone(), texts.clone(), texts),
            |(metadata, record, module, pyproject)| {
                let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let root = scratch.path().join(format!("case{n}"));
                let site = root.join("site");
                let info = site.join("fuzz_env-1.dist-info");
                std::fs::create_dir_all(&info).unwrap();
                std::fs::write(info.join("METADATA"), &metadata).unwrap();
                std::fs::write(info.join("RECORD"), &record).unwrap();
                std::fs::write(info.join("top_level.txt"), &record).unwrap();
                std::fs::write(site.join("fuzz_env.py"), &module).unwrap();
                let layout = root.join("envs/fuzz_dir");
                std::fs::create_dir_all(&layout).unwrap();
                std::fs::write(layout.join("pyproject.toml"), &pyproject).unwrap();
                std::fs::write(layout.join("fuzz_dir.py"), &module).unwrap();
                let site = PythonSite { path: vec![site], stdlib: vec!["json".into()] };
                let found = discover_all(&[root.join("envs")], Ok(&site));
                for warning in &found.warnings {
                    prop_assert!(!warning.reason.contains('\n'), "{warning:?}");
                }
                Ok(())
            },
        )
        .unwrap();
}

/// `env list --check` imports each verifiers environment (listing never does): one that
/// imports is ok, one that raises says why in one line, one that hangs is killed at the
/// deadline and said; the listing itself stands.
#[tokio::test]
async fn checking_imports_each_one_bounded_by_a_deadline() {
    let Some(w) = world() else { return };
    let mut home = w.home;
    let envs = home.path().join("checked");
    std::fs::create_dir_all(&envs).unwrap();
    layout(&envs, "vf_ok", "vf-ok", &[("vf_ok.py", "def load_environment(n: int = 1):\n    return n\n")]);
    layout(
        &envs,
        "vf_raises",
        "vf-raises",
        &[(
            "vf_raises.py",
            "raise ImportError('needs the datasets package')\n\ndef load_environment():\n    ...\n",
        )],
    );
    let hangs = layout(
        &envs,
        "vf_hangs",
        "vf-hangs",
        &[("vf_hangs.py", "import time\ntime.sleep(600)\n\ndef load_environment():\n    ...\n")],
    );
    home.environ[2].1 = envs.display().to_string();
    let out = home.cli(&["env", "list", "--check", "--check-timeout", "2s", "--json"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed(&list, "vf-ok")["check"], "ok");
    let raised = listed(&list, "vf-raises")["check"].as_str().unwrap();
    assert!(
        raised.starts_with("import failed") && raised.ends_with("ImportError: needs the datasets package"),
        "{raised}"
    );
    assert_eq!(listed(&list, "vf-hangs")["check"], "the import did not finish within 2s; killed");
    // The installed one needs verifiers, which this Python lacks: said, not hidden.
    let installed = listed(&list, "reverse-text")["check"].as_str().unwrap();
    assert!(installed.contains("No module named 'verifiers'"), "{installed}");
    assert!(err.contains("checking vf-hangs: importing it in "), "progress is said: {err}");
    assert!(crate::support::processes_mentioning(&hangs).is_empty(), "the hung import is gone");
    // Without --check nothing is imported, and nothing is said about imports.
    let list: Value = serde_json::from_str(&home.cli_ok(&["env", "list", "--json"])).unwrap();
    assert!(listed(&list, "vf-hangs").get("check").is_none());
}
