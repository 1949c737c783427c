//! `run start` hands its run to the home's daemon over `api.sock`, and each stage's parent is
//! the small `lachesis-shim`; without either, everything still works the old way.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use lachesis::model::RunState;
use uuid::Uuid;

use crate::support::{BIN, TestHome, stderr, wait_for};

const KEY: &str = "LACHESIS_TEST_HANDOFF_KEY";

async fn wait_for_api_socket(home: &TestHome) {
    let socket = home.path().join("api.sock");
    wait_for("the daemon's api.sock", Duration::from_secs(20), || {
        let there = socket.exists();
        async move { there.then_some(()) }
    })
    .await;
}

/// A raw HTTP/1.1 POST over the home socket, as any local client could send it.
fn post_raw(socket: &Path, headers: &str, body: &str) -> String {
    let mut stream = UnixStream::connect(socket).unwrap();
    write!(
        stream,
        "POST /runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[tokio::test]
async fn run_start_goes_through_the_daemon_which_checks_the_keys_it_will_use() {
    let mut home = TestHome::new();
    home.workflow(
        "keyed",
        &format!("name: keyed\ncredentials: [{KEY}]\nstages:\n  - {{name: main, argv: [\"true\"]}}\n"),
    );
    let cli = |home: &TestHome, args: &[&str]| home.command(args).env_remove(KEY).output().unwrap();

    // No daemon: the CLI checks its own environment, which lacks the key.
    let out = cli(&home, &["run", "start", "-w", "keyed"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains(KEY), "{}", stderr(&out));

    // The daemon has the key: the CLI without it hands the run over, and it runs.
    home.environ.push((KEY.into(), "a-key-for-the-daemon".into()));
    home.start_daemon();
    home.environ.clear();
    wait_for_api_socket(&home).await;
    let mode = std::fs::metadata(home.path().join("api.sock")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "api.sock must be private to its owner");
    let out = cli(&home, &["run", "start", "-w", "keyed"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = Uuid::parse_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    home.wait_state(id, RunState::Completed, Duration::from_secs(30)).await;

    // --json prints the same summary as the direct path.
    let out = cli(&home, &["run", "start", "-w", "keyed", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["workflow"], "keyed");
    assert!(summary["id"].as_str().is_some_and(|id| Uuid::parse_str(id).is_ok()));

    // The daemon's refusals read as the store's would: one line, exit 3 (refused), nothing queued.
    let out = cli(&home, &["run", "start", "-w", "nope"]);
    assert_eq!(out.status.code(), Some(3));
    let message = stderr(&out);
    assert!(message.starts_with("lachesis: unknown workflow 'nope'"), "{message}");
    assert_eq!(message.trim().lines().count(), 1, "{message}");
    let out = cli(&home, &["run", "start", "-w", "keyed", "--var", "x=1"]);
    assert!(stderr(&out).contains("unknown variable 'x'"), "{}", stderr(&out));
    let runs = home.service().await.runs(&Default::default()).await.unwrap();
    assert_eq!(runs.len(), 2, "only the two good runs are queued");
}

#[tokio::test]
async fn other_settings_are_not_handed_to_this_daemon() {
    let mut home = TestHome::new();
    home.workflow("one", "name: one\nstages:\n  - {name: main, argv: [\"true\"]}\n");
    home.start_daemon();
    wait_for_api_socket(&home).await;
    let socket = home.path().join("api.sock");

    // A request claiming other settings is refused before anything is done.
    let answer = post_raw(&socket, "x-lachesis-settings: 0123\r\n", r#"{"workflow": "one"}"#);
    assert!(answer.starts_with("HTTP/1.1 409"), "{answer}");
    assert!(answer.contains("other_settings"), "{answer}");
    // Without the header, the socket is the plain API.
    let answer = post_raw(&socket, "", r#"{"workflow": "one"}"#);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");

    // A CLI pointed at another store writes there itself: the daemon never sees that run.
    let other = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", other.path().join("other.db").display());
    let out =
        home.command(&["run", "start", "-w", "one"]).env("LACHESIS_DATABASE_URL", &url).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let id = Uuid::parse_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    let theirs = lachesis::service::Service::open(lachesis::settings::Settings::new(
        Some(other.path().to_path_buf()),
        Some(url.clone()),
    ))
    .await
    .unwrap();
    assert!(theirs.run(id).await.unwrap().is_some(), "the run is in the CLI's own store");
    assert!(home.service().await.run(id).await.unwrap().is_none(), "and not in the daemon's");
}

#[tokio::test]
async fn a_stale_socket_after_a_crash_leaves_run_start_working() {
    let mut home = TestHome::new();
    home.workflow("one", "name: one\nstages:\n  - {name: main, argv: [\"true\"]}\n");
    home.start_daemon();
    wait_for_api_socket(&home).await;
    home.kill_daemon();
    assert!(home.path().join("api.sock").exists(), "a SIGKILLed daemon leaves its socket behind");
    // Nobody listens: the CLI queues the run in the store, and the next daemon runs it.
    let id = home.submit(&["-w", "one"]);
    home.start_daemon();
    home.wait_state(id, RunState::Completed, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn stages_run_under_lachesis_shim_or_the_lone_binary() {
    for lone in [false, true] {
        let mut home = TestHome::new();
        home.workflow("sleeper", "name: sleeper\nstages:\n  - {name: main, argv: [sleep, \"30\"]}\n");
        // A lone copy of the binary, with no lachesis-shim beside it, uses `lachesis shim`.
        let bin_dir = tempfile::tempdir().unwrap();
        let mut lone_daemon = None;
        if lone {
            let copy = bin_dir.path().join("lachesis");
            std::fs::hard_link(BIN, &copy).or_else(|_| std::fs::copy(BIN, &copy).map(drop)).unwrap();
            let daemon = std::process::Command::new(&copy)
                .args(["daemon", "--scan-interval", "500ms"])
                .env("LACHESIS_HOME", home.path())
                .env_remove("LACHESIS_DATABASE_URL")
                .env_remove("LACHESIS_WORKFLOWS")
                .stdin(std::process::Stdio::null())
                .stderr(std::fs::File::create(home.path().join("daemon.log")).unwrap())
                .spawn()
                .unwrap();
            lone_daemon = Some(daemon);
        } else {
            home.start_daemon();
        }
        let id = home.submit(&["-w", "sleeper"]);
        home.wait_state(id, RunState::Running, Duration::from_secs(30)).await;
        let stages = home.stages(id).await;
        let shim = stages[0].record.shim.as_ref().expect("the shim is recorded").pid;
        let exe = std::fs::read_link(format!("/proc/{shim}/exe")).unwrap();
        let cmdline = std::fs::read(format!("/proc/{shim}/cmdline")).unwrap();
        let argv: Vec<String> =
            cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if lone {
            assert_eq!(exe.file_name().unwrap(), "lachesis", "{exe:?}");
            assert_eq!(argv[1], "shim", "{argv:?}");
        } else {
            assert_eq!(exe.file_name().unwrap(), "lachesis-shim", "{exe:?}");
        }
        home.service().await.stop_run(&id.to_string()).await.unwrap();
        home.wait_state(id, RunState::Stopped, Duration::from_secs(30)).await;
        if let Some(mut daemon) = lone_daemon {
            daemon.kill().unwrap();
            daemon.wait().unwrap();
        }
    }
}
