//! The MCP surface, driven by the official Python MCP SDK (from the test venv) as an agent would.

use crate::atropos::{atropos, atropos_home, repo};
use std::os::unix::fs::PermissionsExt;

use crate::support::{BIN, processes_mentioning};

#[tokio::test]
async fn an_agent_selects_edits_starts_checks_stops_and_reads_results() {
    let Some((python, _)) = atropos() else { return };
    let home = atropos_home(&python);
    // No daemon: `lachesis mcp` starts one. A key comes from the home's .env (mode 600).
    let env_file = home.path().join(".env");
    std::fs::write(&env_file, "OPENROUTER_API_KEY=sk-or-from-file-5150\n").unwrap();
    std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut cmd = std::process::Command::new(&python);
    cmd.arg(repo().join("tests/python/mcp_client.py")).args([BIN, "arith"]);
    cmd.env("LACHESIS_HOME", home.path()).envs(home.environ.iter().map(|(k, v)| (k, v)));
    cmd.env_remove("OPENROUTER_API_KEY");
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();

    // The daemon it started outlives it, in a session of its own, logging to daemon.log.
    let daemons: Vec<i32> = processes_mentioning(home.path())
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline.split(|b| *b == 0).any(|arg| arg == b"daemon")
        })
        .collect();
    assert_eq!(daemons.len(), 1, "one daemon left running: {daemons:?}");
    let pid = rustix::process::Pid::from_raw(daemons[0]).unwrap();
    assert_eq!(rustix::process::getsid(Some(pid)).unwrap(), pid, "the daemon leads its own session");
    assert!(std::fs::read_to_string(home.path().join("daemon.log")).unwrap().contains("daemon"));
    // doctor (rl_health_check) says where the key came from, never its value.
    let key =
        r["health"]["checks"].as_array().unwrap().iter().find(|c| c["name"] == "OPENROUTER_API_KEY").unwrap();
    assert_eq!(key["detail"], format!("set (from {})", env_file.display()), "{key:#}");
    assert!(!r.to_string().contains("sk-or-from-file"));

    // A file others can read is refused, with the fix.
    std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused = home.cli(&["doctor"]);
    let err = crate::support::stderr(&refused);
    assert!(!refused.status.success() && err.contains(&format!("chmod 600 {}", env_file.display())), "{err}");

    // The reference's ten tools plus the health check, each with an object input schema.
    let tools = r["tools"].as_object().unwrap();
    for name in [
        "rl_list_environments",
        "rl_select_environment",
        "rl_get_current_config",
        "rl_edit_config",
        "rl_start_training",
        "rl_check_status",
        "rl_stop_training",
        "rl_get_results",
        "rl_list_runs",
        "rl_test_inference",
        "rl_health_check",
    ] {
        assert_eq!(tools[name]["type"], "object", "{name}: {:#}", tools[name]);
    }
    assert_eq!(tools["rl_select_environment"]["required"], serde_json::json!(["name"]));
    let edit = &tools["rl_edit_config"]["properties"];
    assert!(edit.get("field").is_some() && edit.get("value").is_some(), "{edit:#}");
    assert!(tools["rl_test_inference"]["properties"].get("num_steps").is_some());

    assert_eq!(r["environments"]["count"], 1);
    assert_eq!(r["select"]["environment"], "arith");
    assert_eq!(r["edit"]["value"], 8);
    assert!(r["edit_locked"]["error"].as_str().unwrap().starts_with("Field 'total_steps' is locked"));
    let group = r["config"]["configurable_fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "group_size")
        .unwrap()
        .clone();
    assert_eq!(group["current_value"], 8);
    assert!(r["start"]["run_id"].is_string() && r["start"]["status"] == "pending");
    assert_eq!(r["status"]["rate_limited"], false);
    // The reference's process strings; lachesis's stage objects beside them.
    let trainer = r["status"]["processes"]["trainer"].as_str().unwrap_or_default();
    assert!(trainer == "running" || trainer.starts_with("exited ("), "{:#}", r["status"]);
    assert_eq!(r["status"]["stages"].as_array().unwrap().len(), 3, "{:#}", r["status"]);
    // Each stage's W&B run, which every attempt continues.
    let short = r["start"]["run_id"].as_str().unwrap_or_default().chars().take(8).collect::<String>();
    let wandb = r["status"]["wandb_runs"].as_array().cloned().unwrap_or_default();
    let trainer_run = wandb.iter().find(|w| w["stage"] == "trainer").map(|w| w["id"].clone());
    assert_eq!(trainer_run, Some(serde_json::json!(format!("{short}-trainer"))), "{:#}", r["status"]);
    // Inside the rate-limit window the agent gets the last snapshot and when to ask again.
    assert_eq!(r["status_again"]["rate_limited"], true);
    assert_eq!(r["status_again"]["run_id"], r["status"]["run_id"]);
    assert!(r["status_again"]["next_check_in_seconds"].as_u64().unwrap() > 0);
    // The demo may have finished on its own by the time the stop arrives.
    let stopped = r["stop"]["status"] == "stopping";
    let ended = r["stop"]["message"].as_str().is_some_and(|e| e.contains("is not running (status: "));
    assert!(stopped || ended, "{:#}", r["stop"]);
    assert!(
        ["stopped", "completed"].contains(&r["results"]["status"].as_str().unwrap()),
        "{:#}",
        r["results"]
    );
    assert_eq!(r["results"]["stages"].as_array().unwrap().len(), 3);
    // No W&B here: the reference's `history` is there, empty.
    assert_eq!(r["results"]["history"], serde_json::json!([]), "{:#}", r["results"]);
    assert_eq!(r["unknown"]["error"], "Run 'ffffffff' not found");
    assert!(r["unknown"]["active_runs"].is_array());
    assert!(
        r["health"]["checks"].as_array().unwrap().iter().any(|c| c["name"] == "daemon" && c["ok"] == true)
    );
}

/// The golden file `tests/python/reference_keys.json` describes every answer of the reference
/// tool; `conformance.py` drives every tool through every case with the official SDK and checks
/// each answer holds the golden keys with the golden types. A demo run goes through status,
/// results (from a fake W&B with a history) and stop; the inference test waits on the stub.
#[tokio::test]
async fn every_answer_holds_the_reference_keys_and_types() {
    use crate::inference_tests::{KEY, Stub, test_profile};
    let Some((python, tokenizer)) = atropos() else { return };
    let stub = Stub::start(&python, &tokenizer, &["silent-model"]);
    let mut home = atropos_home(&python);
    home.environ.push(("STUB_KEY".into(), KEY.into()));
    home.environ.push(("LACHESIS_PROVIDER_KEYS".into(), "STUB_KEY".into()));
    test_profile(&home, &tokenizer);
    // The inference test's locked profile comes from the default workflow; the start without a
    // workflow (the default) must be refused for want of the Tinker key, as the reference's is.
    let profile = std::fs::read_to_string(home.workflows().join("arith-tests.yaml")).unwrap();
    home.workflow("arith-tests", &format!("default: true\ncredentials: [TINKER_API_KEY]\n{profile}"));
    // With nothing selected, a workflow that runs the environment is refused; the demo starts.
    home.workflow(
        "arith-env",
        "name: arith-env\nstages:\n  - {name: env, argv: [\"{python}\", \"{env_file}\", serve]}\n",
    );
    home.start_daemon();
    let url = format!("http://127.0.0.1:{}/v1", stub.port);
    let mut cmd = std::process::Command::new(&python);
    cmd.arg(repo().join("tests/python/conformance.py"))
        .args([BIN, "arith", "--provider", &url, "--server-type", "openai", "--api-key-env", "STUB_KEY"])
        .args(["--models", "stub", "--workflow", "demo", "--env-workflow", "arith-env", "--fake-wandb"])
        .args(["--test-timeout", "300"])
        .args(["--server-args", "mcp --no-daemon", "--cancel-model", "silent-model"]);
    cmd.env("LACHESIS_HOME", home.path()).envs(home.environ.iter().map(|(k, v)| (k, v)));
    cmd.env_remove("TINKER_API_KEY").env_remove("OPENROUTER_API_KEY");
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = String::from_utf8_lossy(&out.stderr);
    let r: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("{}")).unwrap_or_default();
    assert!(out.status.success() && r["ok"] == true, "{report}\n{:#}", r["mismatches"]);

    let a = |step: &str| r["answers"][step]["answer"].clone();
    // Results: the fake W&B's summary and sampled history, top level as in the reference.
    let results = a("results");
    assert_eq!(results["final_metrics"]["_step"], 19, "{results:#}");
    assert_eq!(results["history"].as_array().map(Vec::len), Some(10), "{results:#}");
    assert!(results["wandb_url"].as_str().unwrap().contains("/lab/atropos-tinker/runs/fake"), "{results:#}");
    // Status read the same W&B run.
    assert_eq!(a("status")["metrics"]["step"], 19, "{:#}", a("status"));
    // The waiting inference test: the stub answers half right; progress came per model.
    let test = a("test");
    assert_eq!(test["models_tested"][0]["accuracy"], 0.5, "{test:#}");
    assert_eq!(test["summary"]["environment_working"], true);
    assert_eq!(test["status"], "succeeded");
    let progress = r["answers"]["test"]["progress"].as_array().cloned().unwrap_or_default();
    assert!(!progress.is_empty(), "no progress notifications");
    assert!(
        progress.iter().all(|p| p["message"].as_str().unwrap_or_default().contains("stub ")),
        "{progress:?}"
    );
    // The client that gave up on the silent model's test cancelled it.
    assert_eq!(r["answers"]["cancel"]["answer"]["test_status"], "cancelled", "{:#}", r["answers"]["cancel"]);
    let listed: serde_json::Value = serde_json::from_str(&home.cli_ok(&["test", "list", "--json"])).unwrap();
    let silent =
        listed.as_array().unwrap().iter().find(|t| t["spec"]["models"][0] == "silent-model").cloned();
    assert_eq!(silent.map(|t| t["state"].clone()), Some(serde_json::json!("cancelled")), "{listed:#}");
    // Agent wording: errors name MCP tools, never shell commands.
    assert_eq!(
        a("config_no_env")["error"],
        "No environment selected. Use rl_select_environment(name) first."
    );
    assert!(a("start_no_tinker_key")["error"].as_str().unwrap().starts_with("TINKER_API_KEY not set"));
    assert!(!stdout.contains("`lachesis "), "a shell command in an answer");
}

/// `--no-daemon`: none is started, and the health tool says that nothing will start.
#[tokio::test]
async fn without_a_daemon_the_tools_say_so() {
    let Some((python, _)) = atropos() else { return };
    let home = atropos_home(&python);
    let script = r#"
import asyncio, json, os, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
async def main():
    params = StdioServerParameters(command=sys.argv[1], args=["mcp", "--no-daemon"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("rl_health_check", {})
            print(result.content[0].text.replace("\n", " "))
asyncio.run(main())
"#;
    let mut cmd = std::process::Command::new(&python);
    cmd.args(["-c", script, BIN]);
    cmd.env("LACHESIS_HOME", home.path()).envs(home.environ.iter().map(|(k, v)| (k, v)));
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let health: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(health["daemon_running"], false, "{health:#}");
    assert!(health["note"].as_str().unwrap().starts_with("No lachesis daemon is running"), "{health:#}");
    assert!(!home.path().join("daemon.log").exists(), "no daemon was started");
}

/// `lachesis mcp` over stdio as a client speaks it (JSON-RPC lines): lists the tools, then
/// calls each of `calls` in turn; the tool list and each call's answer, parsed.
pub(crate) fn mcp_session(
    home: &crate::support::TestHome,
    calls: &[(&str, serde_json::Value)],
) -> (serde_json::Value, Vec<serde_json::Value>) {
    use serde_json::json;
    use std::io::{BufRead, BufReader, Write};
    let mut child = home
        .command(&["mcp", "--no-daemon"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut send = |message: serde_json::Value| writeln!(stdin, "{message}").unwrap();
    let mut reply = |id: i64| loop {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "lachesis mcp closed its output");
        let message: serde_json::Value = serde_json::from_str(&line).unwrap();
        if message["id"] == id {
            return message;
        }
    };
    let init = json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "it", "version": "0" } });
    send(json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init }));
    reply(1);
    send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    send(json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" }));
    let tools = reply(2)["result"]["tools"].clone();
    let mut answers = Vec::new();
    for (i, (tool, arguments)) in calls.iter().enumerate() {
        let id = 3 + i as i64;
        send(
            json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": tool, "arguments": arguments } }),
        );
        let answer = reply(id);
        let text = answer["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{answer:#}"));
        answers.push(serde_json::from_str(text).unwrap());
    }
    drop(stdin);
    child.wait().unwrap();
    (tools, answers)
}

/// The sweep tools, beyond the reference's: listed with their schemas; a sweep started by name
/// answers its id, its members' run ids and its state, and its status reads them back; a path
/// out of the workflows directory, or a bad field, is one line, and nothing is queued for it.
#[tokio::test]
async fn an_agent_starts_a_sweep_and_reads_its_leaderboard() {
    use serde_json::json;
    let mut home = crate::support::TestHome::new();
    let (tools, answers) = mcp_session(
        &home,
        &[
            ("rl_start_sweep", json!({ "file": "demo-sweep", "hold": true })),
            ("rl_start_sweep", json!({ "file": "../../../../../../etc/passwd" })),
            (
                "rl_start_sweep",
                json!({ "sweep": { "method": "grid", "workflow": "demo-tune", "parameters": { "warmup": { "values": [1] } } } }),
            ),
            ("rl_start_sweep", json!({ "file": "demo-sweep", "count": 3 })),
        ],
    );
    let schema = |name: &str| {
        tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {tools:#}"))["inputSchema"]
            .clone()
    };
    let start = schema("rl_start_sweep");
    assert_eq!(start["type"], "object", "{start:#}");
    for field in ["file", "sweep", "hold"] {
        assert!(start["properties"].get(field).is_some(), "{field}: {start:#}");
    }
    assert_eq!(schema("rl_sweep_status")["required"], json!(["sweep_id"]));

    let started = &answers[0];
    assert_eq!(
        (started["state"].as_str(), started["members"].as_u64()),
        (Some("live"), Some(6)),
        "{started:#}"
    );
    let run_ids: Vec<uuid::Uuid> = started["run_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().parse().unwrap())
        .collect();
    let sweep: uuid::Uuid = started["sweep_id"].as_str().unwrap().parse().unwrap();
    for (k, id) in run_ids.iter().enumerate() {
        let run = home.run(*id).await;
        assert_eq!(run.params.sweep.map(|m| (m.sweep, m.k)), Some((sweep, k as u64)), "member {k}");
        assert!(run.held_at.is_some(), "held as asked");
    }
    assert!(started["message"].as_str().unwrap().contains("rl_sweep_status(sweep_id)"), "{started:#}");
    assert_eq!(started["daemon_running"], false);
    assert!(started["note"].as_str().unwrap().starts_with("No lachesis daemon is running"), "{started:#}");
    for (answer, says) in [
        (&answers[1], "is outside the workflows directory"),
        (&answers[2], "parameters.warmup: workflow 'demo-tune' has no variable 'warmup'"),
        (&answers[3], "unknown field `count`"),
    ] {
        let error = answer["error"].as_str().unwrap_or_else(|| panic!("{answer:#}"));
        assert!(error.contains(says) && !error.contains('\n'), "{error}");
    }
    assert_eq!(home.service().await.sweeps().await.unwrap().len(), 1, "only the good sweep was queued");

    let (_, answers) =
        mcp_session(&home, &[("rl_sweep_status", json!({ "sweep_id": &sweep.to_string()[..8], "top": 2 }))]);
    let board = &answers[0];
    assert_eq!(
        (board["sweep_id"].as_str(), board["state"].as_str()),
        (Some(sweep.to_string().as_str()), Some("live"))
    );
    assert_eq!((board["metric"].as_str(), board["goal"].as_str()), (Some("reward"), Some("maximize")));
    assert_eq!(board["counts"], json!({ "pending": 6 }));
    assert_eq!(board["leaderboard"].as_array().map(Vec::len), Some(2));
    assert_eq!(board["leaderboard"][1]["run_id"], run_ids[1].to_string());
    assert_eq!(board["more_members"], 4);
}
