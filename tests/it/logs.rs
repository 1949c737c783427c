//! Stage logs of any size: bounded pages over HTTP and the CLI from a 10 GB (sparse) log, and
//! a rotating log followed for progress by the daemon.

use std::io::Write;
use std::time::Duration;

use lachesis::model::RunState;
use serde_json::Value;

use crate::support::{TestHome, wait_for};

const T: Duration = Duration::from_secs(30);
const TOKEN: &str = "logs-test-token-7f3a9c2e5b1d";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn get(http: &reqwest::Client, url: &str) -> (reqwest::StatusCode, Value) {
    let response = http.get(url).bearer_auth(TOKEN).send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn a_10_gb_log_is_served_in_bounded_pages() {
    let mut home = TestHome::new();
    home.workflow("chatty", "name: chatty\nstages:\n  - {name: t, argv: [sh, -c, 'echo first line']}\n");
    let addr = format!("127.0.0.1:{}", free_port());
    home.environ.push(("LACHESIS_API_TOKEN".into(), TOKEN.into()));
    home.start_daemon_with(&["--listen", &addr]);
    let id = home.submit(&["--workflow", "chatty"]);
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    // The log grows to 10 GiB (a hole), with real lines at its end.
    let end = b"\nsaved tinker://chatty/weights-7\nStep 9/9\n";
    let log = std::fs::OpenOptions::new().append(true).open(&stages[0].log_path).unwrap();
    log.set_len(10 << 30).unwrap();
    (&log).write_all(end).unwrap();
    let size = (10u64 << 30) + end.len() as u64;

    let http = lachesis::http_client::builder().build().unwrap();
    let base = format!("http://{addr}/runs/{id}");
    wait_for("the API to answer", T, || {
        let (http, url) = (http.clone(), format!("http://{addr}/health"));
        async move { http.get(url).send().await.ok().map(drop) }
    })
    .await;
    let (status, body) = get(&http, &format!("{base}/logs?tail=2")).await;
    assert_eq!(status, 200, "{body}");
    let page = &body["t"];
    assert_eq!(page["text"], "saved tinker://chatty/weights-7\nStep 9/9\n");
    assert_eq!((page["size"].as_u64(), page["end"].as_u64()), (Some(size), Some(size)));
    assert_eq!(page["start"].as_u64(), Some(size - 41));
    assert!(page["file"].as_u64().is_some_and(|inode| inode > 0), "a page names its file: {page}");
    // By default the last 200 lines, at most 1 MiB of them: here the hole's zeros end it.
    let (_, body) = get(&http, &format!("{base}/logs")).await;
    assert_eq!(body["t"]["text"].as_str().unwrap().len() as u64, lachesis::logs::MAX_ANSWER);
    assert_eq!(body["t"]["cut"], true);
    let (_, body) = get(&http, &format!("{base}/logs?stage=t&offset=0&limit=11")).await;
    assert_eq!((body["t"]["text"].as_str(), body["t"]["end"].as_u64()), (Some("first line\n"), Some(11)));
    let (_, body) = get(&http, &format!("{base}/logs?offset={}&limit=10", size + 5)).await;
    assert_eq!((body["t"]["start"].as_u64(), body["t"]["text"].as_str()), (Some(size), Some("")));
    let (_, body) = get(&http, &format!("{base}/logs?limit=99999999999")).await;
    assert_eq!(body["t"]["text"].as_str().unwrap().len() as u64, lachesis::logs::MAX_ANSWER);
    for bad in ["tail=1&offset=0", "tail=x", "offset=-1"] {
        let (status, body) = get(&http, &format!("{base}/logs?{bad}")).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (reqwest::StatusCode::BAD_REQUEST, Some("invalid_query")),
            "{bad}"
        );
    }
    let (status, _) = get(&http, &format!("{base}/logs?stage=nope")).await;
    assert_eq!(status, 404);
    let (_, results) = get(&http, &format!("{base}/results")).await;
    assert_eq!(results["trained_weights"], "tinker://chatty/weights-7");

    // The CLI: the last lines, and by default no more than one page with a note saying so.
    let id = id.to_string();
    assert_eq!(home.cli_ok(&["run", "logs", &id, "--tail", "1"]), "Step 9/9\n");
    let out = home.cli(&["run", "logs", &id]);
    assert!(out.status.success());
    assert!(out.stdout.len() as u64 <= lachesis::logs::MAX_ANSWER + 1 && out.stdout.ends_with(b"Step 9/9\n"));
    let note = crate::support::stderr(&out);
    assert!(note.contains("the last 1.0 MiB of 10.0 GiB") && note.contains("--tail N"), "{note}");
    let json: Value = serde_json::from_str(&home.cli_ok(&["run", "logs", &id, "-n", "1", "--json"])).unwrap();
    assert_eq!((json[0]["stage"].as_str(), json[0]["size"].as_u64()), (Some("t"), Some(size)));
    let follow = home.cli_ok(&["run", "logs", &id, "--tail", "2", "--follow"]);
    assert_eq!(follow, "saved tinker://chatty/weights-7\nStep 9/9\n", "an ended run's follow ends");
}

#[tokio::test]
async fn a_rotating_log_keeps_its_files_and_its_progress() {
    let mut home = TestHome::new();
    // 40 steps, each with a 60-byte line of chatter: the 400-byte log rotates every few steps.
    home.workflow(
        "rotating",
        r#"name: rotating
stages:
  - name: trainer
    argv: [sh, -c, "i=1; while [ $i -le 40 ]; do echo Step $i/40; echo chatter chatter chatter chatter chatter chatter chatter; i=$((i+1)); sleep 0.05; done; sleep 600"]
    log_max_size: 400
    log_max_files: 2
progress:
  log: {stage: trainer, pattern: 'Step (?P<step>\d+)/(?P<total>\d+)'}
stop_grace: 2s
"#,
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "rotating"]);
    home.wait_state(id, RunState::Running, T).await;
    let service = home.service().await;
    wait_for("the follower to reach step 40 through the rotations", T, || {
        let service = service.clone();
        async move { service.run_progress_in(id, 1).await.unwrap().last().filter(|p| p.step == 40).map(drop) }
    })
    .await;
    let log = &home.stages(id).await[0].log_path;
    let rotated = lachesis::logs::rotated(log, 1);
    assert!(rotated.exists() && !lachesis::logs::rotated(log, 2).exists(), "two files in all");
    for file in [log, &rotated] {
        assert!(std::fs::metadata(file).unwrap().len() <= 400, "{}", file.display());
    }
    home.cli_ok(&["run", "stop", &id.to_string()]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Stopped);
}

#[tokio::test]
async fn run_logs_follow_prints_a_live_run_to_its_end_and_stops() {
    let mut home = TestHome::new();
    home.workflow(
        "slow",
        "name: slow\nstages:\n  - {name: t, argv: [sh, -c, 'echo one; sleep 1; printf two; sleep 0.5; echo \" halves\"; sleep 0.5; echo three']}\n",
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "slow"]).to_string();
    // Started before the stage: it waits for the log, prints each line once, ends with the run.
    let out = home.cli(&["run", "logs", &id, "--follow"]);
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "one\ntwo halves\nthree\n");
    let run = home.run(uuid::Uuid::parse_str(&id).unwrap()).await;
    assert_eq!(run.state, RunState::Completed);
}

#[tokio::test]
async fn run_logs_follow_carries_on_through_rotations_with_every_line_once() {
    let mut home = TestHome::new();
    // 150 lines of 9 bytes, a 300-byte log: it rotates about every 33 lines, several times while
    // `--follow` polls.
    home.workflow(
        "rotating",
        r#"name: rotating
stages:
  - name: t
    argv: [sh, -c, "i=100; while [ $i -lt 250 ]; do echo line $i; i=$((i+1)); sleep 0.02; done"]
    log_max_size: 300
    log_max_files: 3
"#,
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "rotating"]).to_string();
    let out = home.cli(&["run", "logs", &id, "--follow"]);
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    let want: String = (100..250).map(|i| format!("line {i}\n")).collect();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), want);
    let stages = home.stages(uuid::Uuid::parse_str(&id).unwrap()).await;
    assert!(lachesis::logs::rotated(&stages[0].log_path, 2).exists(), "it rotated more than once");
}
