//! One run request: every field a run request has is taken, and stored, by every surface that
//! queues runs: the command line's flags, a `run start --from` line, a `POST /runs` body, a
//! pipeline step and `rl_start_training`'s arguments.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use lachesis::model::{Dependency, Run};
use lachesis::service::RunRequest;

use crate::support::{TestHome, wait_for};

/// Reads a field back from a stored run and its dependencies.
type Reader = Box<dyn Fn(&Run, &[Dependency]) -> Value>;

/// One field: its name, a value for it (as JSON), the same as flags, and what the stored run
/// must then hold, read back from it.
struct Field {
    name: &'static str,
    value: Value,
    flags: Vec<String>,
    stored: Reader,
    want: Value,
}

fn field(
    name: &'static str,
    value: Value,
    flags: &[&str],
    stored: impl Fn(&Run, &[Dependency]) -> Value + 'static,
    want: Value,
) -> Field {
    Field {
        name,
        value,
        flags: flags.iter().map(|f| f.to_string()).collect(),
        stored: Box::new(stored),
        want,
    }
}

/// Every field of a run request, waiting for the run `base` and the sweep `sweep`.
fn fields(base: Uuid, sweep: Uuid) -> Vec<Field> {
    let base_flag = format!("base={base}");
    let sweep_flag = format!("tune={}", &sweep.to_string()[..8]);
    let text = |v: Option<&Value>| v.map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
    vec![
        field("workflow", json!("req"), &["--workflow", "req"], |r, _| json!(r.workflow), json!("req")),
        field("env", json!("arith"), &["--env", "arith"], |r, _| json!(r.env_name), json!("arith")),
        field(
            "vars",
            json!({ "steps": 3 }),
            &["--var", "steps=3"],
            |r, _| json!(r.params.vars),
            json!({ "steps": "3" }),
        ),
        field(
            "set",
            json!({ "group_size": 16 }),
            &["--set", "group_size=16"],
            move |r, _| json!(text(r.params.config.get("group_size"))),
            json!("16"),
        ),
        field("priority", json!(7), &["--priority", "7"], |r, _| json!(r.priority), json!(7)),
        field(
            "stall_timeout",
            json!("45m"),
            &["--stall-timeout", "45m"],
            |r, _| json!(r.spec.stall_timeout.map(|d| d.0.as_secs())),
            json!(2700),
        ),
        field("hold", json!(true), &["--hold"], |r, _| json!(r.held_at.is_some()), json!(true)),
        field(
            "time_limit",
            json!("10h"),
            &["--time-limit", "10h"],
            |r, _| json!(r.spec.time_limit.map(|d| d.0.as_secs())),
            json!(36_000),
        ),
        field(
            "needs",
            json!({ "gpu": 1 }),
            &["--needs", "gpu=1"],
            |r, _| json!(r.params.needs),
            json!({ "gpu": 1 }),
        ),
        field("preemptible", json!(true), &["--preemptible"], |r, _| json!(r.spec.preemptible), json!(true)),
        field(
            "after",
            json!([
                { "run": base.to_string(), "when": "any", "name": "base" },
                { "sweep": &sweep.to_string()[..8], "name": "tune" },
            ]),
            &["--after-any", &base_flag, "--after-sweep", &sweep_flag],
            |_, deps| {
                json!(
                    deps.iter()
                        .map(|d| json!([d.awaited.id(), d.awaited.kind(), d.when, d.name]))
                        .collect::<Vec<_>>()
                )
            },
            json!([[base, "run", "any", "base"], [sweep, "sweep", "ok", "tune"]]),
        ),
    ]
}

/// The request every surface is given: each field of the table.
fn request(fields: &[Field]) -> Value {
    Value::Object(fields.iter().map(|f| (f.name.to_string(), f.value.clone())).collect())
}

#[test]
fn the_table_lists_every_field_a_run_request_has() {
    let schema = serde_json::to_value(schemars::schema_for!(RunRequest)).unwrap();
    let mut declared: Vec<&str> =
        schema["properties"].as_object().unwrap().keys().map(String::as_str).collect();
    let table = fields(Uuid::nil(), Uuid::nil());
    let mut listed: Vec<&str> = table.iter().map(|f| f.name).collect();
    declared.sort_unstable();
    listed.sort_unstable();
    assert_eq!(listed, declared, "a field a run request takes is missing from this test's table");
    // And the table's request is one the shared parser takes whole.
    RunRequest::from_value(request(&table)).unwrap();
}

#[tokio::test]
async fn every_field_is_taken_by_every_surface_and_stored() {
    let mut home = TestHome::new();
    home.workflow(
        "req",
        "name: req\nvars:\n  steps: \"1\"\nmetrics:\n  jsonl: {file: m.jsonl, step: /step}\nstages:\n  - {name: main, argv: [\"true\"]}\n",
    );
    // A daemon with a gpu pool (a run's needs are checked against it) serving the HTTP API;
    // every run is queued held, so none is claimed under the test.
    let api = crate::http::start_with(&mut home, "127.0.0.1", None, &["--pool", "gpu=0,1"]).await;
    let dir = home.path().to_path_buf();
    wait_for("the daemon to publish its pools", Duration::from_secs(20), || {
        let dir = dir.clone();
        async move { lachesis::node_pools::published(&dir).ok().filter(|p| !p.is_empty()) }
    })
    .await;
    let base = home.submit(&["--workflow", "req", "--hold"]);
    // A sweep to wait for, its members held too.
    let sweep_file = home.path().join("tune.yaml");
    std::fs::write(
        &sweep_file,
        "method: grid\nworkflow: req\nmetric: {name: loss}\nparameters:\n  steps: {values: [1, 2]}\n",
    )
    .unwrap();
    let started: Value = serde_json::from_str(&home.cli_ok(&[
        "sweep",
        "start",
        sweep_file.to_str().unwrap(),
        "--hold",
        "--json",
    ]))
    .unwrap();
    let sweep: Uuid = started["id"].as_str().unwrap().parse().unwrap();
    let table = fields(base, sweep);
    let body = request(&table);

    let mut queued: Vec<(&str, Uuid)> = Vec::new();
    // The command line's flags.
    let flags: Vec<&str> = table.iter().flat_map(|f| f.flags.iter().map(String::as_str)).collect();
    queued.push(("flags", home.submit(&flags)));
    // A `--from` line.
    let lines = home.path().join("runs.jsonl");
    std::fs::write(&lines, format!("{body}\n")).unwrap();
    queued.push(("--from", id_of(&home.cli_ok(&["run", "start", "--from", lines.to_str().unwrap()]))));
    // A `POST /runs` body, alone and in a list.
    let (status, run) = api.post("/runs", body.clone()).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{run}");
    queued.push(("POST /runs", run["id"].as_str().unwrap().parse().unwrap()));
    let (status, runs) = api.post("/runs", json!([body.clone()])).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{runs}");
    queued.push(("POST /runs [list]", runs[0]["id"].as_str().unwrap().parse().unwrap()));
    // A pipeline step (JSON is YAML), with a name beside the request's fields.
    let mut step = body.clone();
    step["name"] = json!("only");
    let pipeline = home.path().join("p.yaml");
    std::fs::write(&pipeline, json!([step]).to_string()).unwrap();
    queued.push((
        "pipeline step",
        id_of(&home.cli_ok(&["run", "start", "--pipeline", pipeline.to_str().unwrap()])),
    ));
    // rl_start_training's arguments.
    let answer = mcp_call(&home, "rl_start_training", body.clone());
    assert!(answer["error"].is_null(), "{answer:#}");
    queued.push(("rl_start_training", answer["run_id"].as_str().unwrap().parse().unwrap()));

    let service = home.service().await;
    let mut wrong = Vec::new();
    for (surface, id) in &queued {
        let run = home.run(*id).await;
        let status = service.run_status(&id.to_string()).await.unwrap();
        for f in &table {
            let got = (f.stored)(&run, &status.after);
            if got != f.want {
                wrong.push(format!("{surface}: {}: stored {got}, want {}", f.name, f.want));
            }
        }
    }
    assert!(wrong.is_empty(), "fields lost on the way:\n{}", wrong.join("\n"));
}

/// Every surface refuses an unknown field, in one line that names it.
#[tokio::test]
async fn every_surface_refuses_an_unknown_field_naming_it() {
    let mut home = TestHome::new();
    home.workflow("req", "name: req\nstages:\n  - {name: main, argv: [\"true\"]}\n");
    let api = crate::http::start_with(&mut home, "127.0.0.1", None, &[]).await;
    let typo = json!({ "workflow": "req", "stall_timeot": "5m" });

    let lines = home.path().join("runs.jsonl");
    std::fs::write(&lines, format!("{}\n{typo}\n", json!({ "workflow": "req" }))).unwrap();
    let err = crate::support::stderr(&home.cli(&["run", "start", "--from", lines.to_str().unwrap()]));
    assert!(err.contains("line 2") && err.contains("unknown field `stall_timeot`"), "{err}");
    let (status, b) = api.post("/runs", typo.clone()).await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{b}");
    assert!(b["message"].as_str().unwrap().contains("unknown field `stall_timeot`"), "{b}");
    let (status, b) = api
        .post("/runs", json!([{ "workflow": "req" }, { "after": [{ "run": "x", "when": "soon" }] }]))
        .await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{b}");
    let message = b["message"].as_str().unwrap();
    assert!(message.starts_with("run 2 of the batch: after[0].when: "), "{b}");
    let pipeline = home.path().join("p.yaml");
    std::fs::write(&pipeline, "- {name: a, workflow: req}\n- {name: b, workflow: req, time_limit: never}\n")
        .unwrap();
    let err = crate::support::stderr(&home.cli(&["run", "start", "--pipeline", pipeline.to_str().unwrap()]));
    assert!(err.contains("[1].time_limit: 'never' is not a duration"), "{err}");
    let answer = mcp_call(&home, "rl_start_training", typo);
    assert!(answer["error"].as_str().unwrap().contains("unknown field `stall_timeot`"), "{answer:#}");
    for e in [&err, message] {
        assert!(!e.trim_end().contains('\n'), "{e}");
    }
    assert!(home.service().await.runs(&Default::default()).await.unwrap().is_empty(), "nothing was queued");
}

fn id_of(out: &str) -> Uuid {
    let line = out.lines().next().unwrap_or_default();
    Uuid::parse_str(line.trim()).unwrap_or_else(|_| panic!("not a run id: {out}"))
}

/// Calls one MCP tool of `lachesis mcp` over stdio, as a client would, and returns its answer.
pub(crate) fn mcp_call(home: &TestHome, tool: &str, arguments: Value) -> Value {
    let mut child = home
        .command(&["mcp", "--no-daemon"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut send = |message: Value| writeln!(stdin, "{message}").unwrap();
    let client = json!({ "name": "it", "version": "0" });
    let init = json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client });
    send(json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init }));
    let mut answer = |id: i64| loop {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "lachesis mcp closed its output");
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == id {
            return message;
        }
    };
    answer(1);
    send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    let call = json!({ "name": tool, "arguments": arguments });
    send(json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call }));
    let reply = answer(2);
    drop(stdin);
    child.wait().unwrap();
    let text = reply["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{reply:#}"));
    serde_json::from_str(text).unwrap()
}
