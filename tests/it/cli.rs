//! Bad input from people: one clear line, a non-zero exit, nothing half-written.

use crate::support::{TestHome, stderr};

async fn run_count(home: &mut TestHome) -> usize {
    home.service().await.runs(&Default::default()).await.unwrap().len()
}

#[tokio::test]
async fn malformed_workflow_yaml_is_refused_naming_file_and_line() {
    let mut home = TestHome::new();
    home.workflow("bad", "name: bad\nstages:\n  - name: a\n   argv: [x\n");
    let out = home.cli(&["run", "start", "--workflow", "bad"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.starts_with("lachesis: ") && err.contains("bad.yaml: stages[0]: missing field `argv` at line 3"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(run_count(&mut home).await, 0);
}

#[tokio::test]
async fn invalid_workflows_name_the_field() {
    let mut home = TestHome::new();
    home.workflow("bad", "name: bad\nstages:\n  - {name: a, argv: [run, \"{nope}\"]}\n");
    let err = stderr(&home.cli(&["run", "start", "--workflow", "bad"]));
    assert!(err.contains("bad.yaml: stages[0].argv[1]: unknown variable '{nope}'"), "{err}");
    assert_eq!(run_count(&mut home).await, 0);
}

#[tokio::test]
async fn unknown_workflow_lists_the_available_ones() {
    let mut home = TestHome::new();
    let out = home.cli(&["run", "start", "--workflow", "nope"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).starts_with(
            "lachesis: unknown workflow 'nope' (available: demo, demo-cleanup, demo-eval, demo-pbt, demo-tune, tinker-atropos, tinker-cookbook, tinker-verifiers)"
        ),
        "{}",
        stderr(&out)
    );
    // A path: workflows are catalog names, and the message says where the catalog is.
    let err = stderr(&home.cli(&["run", "start", "-w", "./my.yaml"]));
    let catalog = home.workflows().display().to_string();
    assert!(
        err.starts_with("lachesis: './my.yaml' is a file path, but workflows are catalog names"),
        "{err}"
    );
    assert!(
        err.contains(&format!("copy it to {catalog} as NAME.yaml")) && err.trim().lines().count() == 1,
        "{err}"
    );
    assert_eq!(run_count(&mut home).await, 0);
}

#[tokio::test]
async fn missing_credentials_are_listed_and_nothing_is_queued() {
    let mut home = TestHome::new();
    let out = home.cli(&["run", "start", "--workflow", "tinker-atropos", "--env", "x"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("needs TINKER_API_KEY, WANDB_API_KEY in the environment"), "{err}");
    assert_eq!(run_count(&mut home).await, 0);
}

#[tokio::test]
async fn unknown_variables_and_bad_assignments_are_refused() {
    let home = TestHome::new();
    let err = stderr(&home.cli(&["run", "start", "--workflow", "demo", "--var", "stepz=3"]));
    assert!(err.contains("unknown variable 'stepz' for workflow 'demo' (variables: steps)"), "{err}");
    let err = stderr(&home.cli(&["run", "start", "--workflow", "demo", "--var", "steps"]));
    assert!(err.contains("invalid --var 'steps': expected NAME=VALUE"), "{err}");
    // Built-ins are the operator's: never a caller's, even for a workflow that uses them.
    for var in ["python=/tmp/evil", "home=/tmp", "tinker_atropos=/tmp", "run_dir=/tmp"] {
        let out = home.cli(&["run", "start", "--workflow", "tinker-atropos", "--env", "x", "--var", var]);
        let err = stderr(&out);
        let name = var.split('=').next().unwrap();
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!("variable '{name}' is set by lachesis and can't be given per run")),
            "{err}"
        );
    }
    let err = stderr(&home.cli(&[
        "run",
        "start",
        "--workflow",
        "tinker-atropos",
        "--var",
        "tinker_atropos_root=/tmp",
    ]));
    assert!(
        err.contains(
            "unknown variable 'tinker_atropos_root' for workflow 'tinker-atropos' (variables: none)"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn unknown_and_ambiguous_run_ids() {
    let home = TestHome::new();
    // Ids are random: queue runs until two share their first digit, so one digit is ambiguous.
    let mut seen: Vec<uuid::Uuid> = Vec::new();
    let (a, b) = loop {
        let id = home.submit(&["--workflow", "demo"]);
        let first = id.to_string().chars().next();
        if let Some(other) = seen.iter().find(|s| s.to_string().chars().next() == first) {
            break (*other, id);
        }
        seen.push(id);
    };
    let err = stderr(&home.cli(&["run", "status", "ffffffff-0000"]));
    assert_eq!(err.trim(), "lachesis: no run matches 'ffffffff-0000'");
    let common: String = a
        .to_string()
        .chars()
        .zip(b.to_string().chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect();
    let err = stderr(&home.cli(&["run", "status", &common]));
    assert!(
        err.contains("matches several runs") && err.contains(&a.to_string()) && err.contains(&b.to_string()),
        "{err}"
    );
    // A unique prefix works; so does a LIKE metacharacter, which must match nothing.
    let out = home.cli_ok(&["run", "status", &a.to_string()[..common.len() + 1], "--json"]);
    assert!(out.contains(&a.to_string()));
    assert!(stderr(&home.cli(&["run", "status", "%"])).contains("no run matches '%'"));
    // A control character in an id is shown escaped: the error stays one printable line.
    let odd = stderr(&home.cli(&["run", "status", "a\u{1}b\nc"]));
    assert_eq!(odd.trim_end(), "lachesis: no run matches 'a\\u{1}b\\nc'", "{odd:?}");
}

#[tokio::test]
async fn read_commands_speak_json() {
    let home = TestHome::new();
    let id = home.submit(&["--workflow", "demo", "--priority", "2"]);
    let list: serde_json::Value = serde_json::from_str(&home.cli_ok(&["run", "list", "--json"])).unwrap();
    assert_eq!(list[0]["id"], id.to_string());
    assert_eq!(list[0]["state"], "pending");
    assert_eq!(list[0]["priority"], 2);
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &id.to_string(), "--json"])).unwrap();
    assert_eq!(status["stages"].as_array().unwrap().len(), 3);
    let events: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "events", &id.to_string(), "--json"])).unwrap();
    assert_eq!(events[0]["message"], "submitted (workflow demo, priority 2)");
    let workflows: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["workflow", "list", "--json"])).unwrap();
    assert_eq!(workflows.as_array().unwrap().len(), 8);
}

#[tokio::test]
async fn start_wait_shows_progress_and_logs_print_each_stage() {
    let mut home = TestHome::new();
    home.start_daemon();
    let out = home.cli(&["run", "start", "--workflow", "demo", "--var", "steps=2", "--wait"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(text.contains("stage trainer") && text.contains("up (start delay of 500ms elapsed)"), "{text}");
    assert!(text.contains("state     completed: stage 'trainer' finished"), "{text}");
    let id = text.lines().next().unwrap().trim().to_string();
    let logs = home.cli_ok(&["run", "logs", &id[..8]]);
    assert!(logs.contains("[trainer] Step 2/2") && logs.contains("[api] api: listening (demo)"), "{logs}");
    let trainer = home.cli_ok(&["run", "logs", &id, "--stage", "trainer", "--follow"]);
    assert!(trainer.starts_with("Loading model (demo)...\nStep 1/2"), "{trainer}");
    let err = stderr(&home.cli(&["run", "logs", &id, "--stage", "nope"]));
    assert!(err.contains("has no stage 'nope' (stages: api, trainer, env)"), "{err}");
    let _ = home.run(uuid::Uuid::parse_str(&id).unwrap()).await;
}

#[tokio::test]
async fn doctor_says_what_is_missing_and_never_prints_a_key() {
    let mut home = TestHome::new();
    home.environ = vec![
        ("LACHESIS_PYTHON".into(), "/no/such/python3".into()),
        ("TINKER_API_KEY".into(), "tnkr-doctor-5c1d0e2f9a8b7c6d".into()),
    ];
    let out = home.cli(&["doctor"]);
    assert!(!out.status.success(), "a missing Python fails the check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FAIL python") && text.contains("'/no/such/python3' not found"), "{text}");
    assert!(text.contains("FAIL daemon") && text.contains("ok   TINKER_API_KEY"), "{text}");
    assert!(!text.contains("tnkr-doctor"), "{text}");
    let report: serde_json::Value = serde_json::from_slice(&home.cli(&["doctor", "--json"]).stdout).unwrap();
    assert_eq!(report["healthy"], false);
}

#[tokio::test]
async fn bulk_start_queues_every_run_in_one_go_or_none() {
    let mut home = TestHome::new();
    let out = home.cli(&["run", "start", "--workflow", "demo", "--count", "25"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(ids.len(), 25);
    let listed: Vec<String> = home
        .service()
        .await
        .runs(&Default::default())
        .await
        .unwrap()
        .iter()
        .map(|r| r.id.to_string())
        .collect();
    let mut oldest_first = listed.clone();
    oldest_first.reverse();
    assert_eq!(oldest_first, ids, "printed in submission order");

    let lines = home.path().join("sweep.jsonl");
    std::fs::write(
        &lines,
        "{\"vars\": {\"steps\": 2}}\n\n{\"vars\": {\"steps\": \"3\"}, \"priority\": 4, \"hold\": true, \"time_limit\": \"2h\"}\n",
    )
    .unwrap();
    let out = home.cli(&["run", "start", "--workflow", "demo", "--from", lines.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 2);
    assert_eq!(runs[1]["priority"], 4);
    // A line's hold and time limit are that run's own.
    assert!(runs[0]["held_at"].is_null() && runs[1]["held_at"].is_i64(), "{runs:#}");
    let service = home.service().await;
    let limit = |i: usize| {
        let id: uuid::Uuid = runs[i]["id"].as_str().unwrap().parse().unwrap();
        let service = service.clone();
        async move { service.run(id).await.unwrap().unwrap().spec.time_limit }
    };
    assert_eq!(
        (limit(0).await, limit(1).await),
        (None, Some(lachesis::workflow::Dur(std::time::Duration::from_secs(7200))))
    );
    assert_eq!(run_count(&mut home).await, 27);

    // One bad line refuses the whole file, naming the run and the field.
    std::fs::write(&lines, "{\"vars\": {\"steps\": 2}}\n{\"vars\": {\"stepz\": 2}}\n").unwrap();
    let err = stderr(&home.cli(&["run", "start", "--workflow", "demo", "--from", lines.to_str().unwrap()]));
    assert!(err.contains("run 2 of the batch: unknown variable 'stepz'"), "{err}");
    std::fs::write(&lines, "{\"vars\": {\"steps\": 2}}\n{\"prio\": 1}\n").unwrap();
    let err = stderr(&home.cli(&["run", "start", "--workflow", "demo", "--from", lines.to_str().unwrap()]));
    assert!(err.contains("line 2: unknown field `prio`"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(run_count(&mut home).await, 27);
}

/// Subcommands are built only when entered (clap's `defer`), so clap's checks of a command's
/// definition (run in debug builds) would meet a broken one only when somebody uses it: walk
/// every command path's help here instead.
#[test]
fn every_command_path_has_help() {
    let home = TestHome::new();
    let mut paths: Vec<Vec<String>> = vec![Vec::new()];
    let mut seen = 0;
    while let Some(path) = paths.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = home.cli(&args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("Usage: lachesis"), "{args:?}: {}", stderr(&out));
        seen += 1;
        let commands = text.split("\nCommands:\n").nth(1).unwrap_or("").split("\n\n").next().unwrap_or("");
        for line in commands.lines() {
            let Some(name) = line.split_whitespace().next().filter(|n| *n != "help") else { continue };
            paths.push(path.iter().cloned().chain([name.to_string()]).collect());
        }
    }
    assert!(seen > 30, "only {seen} command paths found");
}

/// A script tells the outcomes apart by the exit code alone (docs/reference/exit-codes.md).
#[tokio::test]
async fn exit_codes_tell_done_refused_not_completed_and_unreachable_apart() {
    let mut home = TestHome::new();
    home.workflow(
        "fails",
        "name: fails\nstages:\n  - name: trainer\n    argv: [sh, -c, 'exit 7']\ncompletion: {stages: [trainer]}\n",
    );
    // Refused: nothing queued.
    let out = home.cli(&["run", "start", "--workflow", "nope"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let out = home.cli(&["run", "status", "ffffffff"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // Usage stays clap's.
    assert_eq!(home.cli(&["run", "start", "--no-such-flag"]).status.code(), Some(2));
    home.start_daemon();
    let out = home.cli(&["run", "start", "--workflow", "demo", "--var", "steps=1", "--wait"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Waited for, and ended other than completed.
    let out = home.cli(&["run", "start", "--workflow", "fails", "--wait"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("failed"));
    home.kill_daemon();
    // A store that cannot be reached.
    let out = home.cli(&["--database-url", "postgres://lachesis@127.0.0.1:1/none", "run", "list"]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
}
