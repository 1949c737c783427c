//! What the commands show of a home no daemon serves: environments, workflows, a queued
//! inference test, a schedule, the selected environment's configuration and `doctor`.

use serde_json::Value;

use crate::golden::{Redactions, home, json, pin, pin_json, pin_text};

/// An inference provider nobody serves (the discard port): nothing here is ever sent.
const PROVIDER: &str = "http://127.0.0.1:9/v1";

#[tokio::test]
async fn environments_workflows_tests_schedules_and_doctor_as_each_command_shows_them() {
    let mut home = home();
    home.environ.push(("LACHESIS_ENV_DIRS".into(), crate::atropos::envs_dir().display().to_string()));
    home.environ.push(("GOLDEN_KEY".into(), "sk-golden-never-sent".into()));
    home.environ.push(("LACHESIS_PROVIDER_KEYS".into(), "GOLDEN_KEY".into()));
    let mut redactions = Redactions::new(home.path());
    pin_text(&home, &redactions, "env_list", &["env", "list"]);
    pin_json(&home, &redactions, "env_list_json", &["env", "list"]);
    pin_text(&home, &redactions, "env_show", &["env", "show", "arith"]);
    pin_json(&home, &redactions, "env_show_json", &["env", "show", "arith"]);
    pin_text(&home, &redactions, "workflow_list", &["workflow", "list"]);

    let provider = ["--provider", PROVIDER, "--server-type", "openai", "--api-key-env", "GOLDEN_KEY"];
    let mut test = vec!["test", "start", "--env", "arith", "--models", "m1,m2", "--steps", "2"];
    test.extend(provider);
    let queued = json(&home, &test);
    let id = queued["id"].as_str().or(queued["test"]["id"].as_str()).unwrap().to_string();
    redactions.id(&id, "test");
    let mut schedule =
        vec!["schedule", "add", "nightly", "--cron", "0 3 * * *", "--env", "arith", "--models", "m1"];
    schedule.extend(provider);
    home.cli_ok(&schedule);

    let r = &redactions;
    pin_text(&home, r, "test_list", &["test", "list"]);
    pin_json(&home, r, "test_list_json", &["test", "list"]);
    pin_text(&home, r, "test_show", &["test", "show", &id]);
    pin_json(&home, r, "test_show_json", &["test", "show", &id]);
    pin_text(&home, r, "schedule_list", &["schedule", "list"]);
    pin_json(&home, r, "schedule_list_json", &["schedule", "list"]);
    pin_text(&home, r, "schedule_show", &["schedule", "show", "nightly"]);
    pin_json(&home, r, "schedule_show_json", &["schedule", "show", "nightly"]);

    // `doctor` says what this home lacks (it exits 4 then); whether this machine's ports 8000
    // and 8001 are free is not the test's to say.
    let doctor = |json: bool| {
        let mut doctor = home.command(&["doctor"]);
        if json {
            doctor.arg("--json");
        }
        for key in ["TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY"] {
            doctor.env_remove(key);
        }
        let out = doctor.stdin(std::process::Stdio::null()).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let ports = regex::Regex::new(r"(?m)^\w+(\s+port \d+\s+).*$").unwrap();
    pin("doctor", &ports.replace_all(&r.text(&doctor(false)), "[verdict]${1}[whether free]"));
    let mut checks: Value = serde_json::from_str(&doctor(true)).unwrap();
    for check in checks["checks"].as_array_mut().unwrap() {
        if check["name"].as_str().is_some_and(|name| name.starts_with("port ")) {
            check["ok"] = "[whether free]".into();
            check["detail"] = "[whether free]".into();
        }
    }
    pin("doctor_json", &r.json(&checks.to_string()));

    // The configuration of a selected environment needs atroposlib's Python.
    let Some((python, _)) = crate::atropos::atropos() else { return };
    home.environ.push(("LACHESIS_PYTHON".into(), python.display().to_string()));
    let mut r = redactions;
    r.value(python.display(), "[python]");
    home.cli_ok(&["env", "select", "arith"]);
    pin_text(&home, &r, "config_show", &["config", "show"]);
    pin_json(&home, &r, "config_show_json", &["config", "show"]);
}
