//! The MCP surface, driven by the official Python MCP SDK (from the test venv) as an agent would.

use crate::atropos::{atropos, atropos_home, repo};
use crate::support::BIN;

#[tokio::test]
async fn an_agent_selects_edits_starts_checks_stops_and_reads_results() {
    let Some((python, _)) = atropos() else { return };
    let mut home = atropos_home(&python);
    home.start_daemon();
    let mut cmd = std::process::Command::new(&python);
    cmd.arg(repo().join("tests/python/mcp_client.py")).args([BIN, "arith"]);
    cmd.env("LACHESIS_HOME", home.path()).envs(home.env.iter().map(|(k, v)| (k, v)));
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();

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
    assert_eq!(r["unknown"]["error"], "Run 'ffffffff' not found");
    assert!(r["unknown"]["active_runs"].is_array());
    assert!(
        r["health"]["checks"].as_array().unwrap().iter().any(|c| c["name"] == "daemon" && c["ok"] == true)
    );
}
