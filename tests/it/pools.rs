//! Counted pools: a daemon's GPUs shared by runs that need some, each live run on units of its
//! own (across a SIGKILL of the daemon too), released when it ends; requests no pool could meet
//! refused at submission; `--pool gpu=auto` from `nvidia-smi -L`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lachesis::model::{RunQuery, RunState};
use uuid::Uuid;

use crate::support::{TestHome, stderr, wait_for};

const WAIT: Duration = Duration::from_secs(30);

/// A stage that writes the devices it sees (`units`) and what its templates and environment
/// say (`pool`), then waits for a `go` file in its run directory.
fn gpu_workflow(name: &str, stage_extra: &str) -> String {
    format!(
        r#"name: {name}
needs: {{gpu: 1}}
stages:
  - name: main
{stage_extra}    argv:
      - sh
      - -c
      - |
        printf '%s|%s' '{{pool.gpu}}' "$LACHESIS_POOL_GPU" > pool
        printf '%s' "$CUDA_VISIBLE_DEVICES" > units.tmp && mv units.tmp units
        while [ ! -e go ]; do sleep 0.05; done
"#
    )
}

fn pooled_home() -> TestHome {
    let home = TestHome::new();
    home.workflow("gpujob", &gpu_workflow("gpujob", ""));
    // Stays `starting` (its start delay is far off) while it holds its units.
    home.workflow("gpuslow", &gpu_workflow("gpuslow", "    start_delay: 10m\n"));
    home.workflow("quick", "name: quick\nstages:\n  - {name: main, argv: [\"true\"]}\n");
    home
}

/// Starts the daemon with `--pool POOL` and waits until it has published its pools (a
/// submission made before that finds none, and is refused).
async fn start_with_pool(home: &mut TestHome, pool: &str) {
    home.start_daemon_with(&["--pool", pool]);
    let dir = home.path().to_path_buf();
    wait_for("the daemon to publish its pools", WAIT, || {
        let dir = dir.clone();
        async move { lachesis::node_pools::published(&dir).ok().filter(|p| !p.is_empty()) }
    })
    .await;
}

async fn run_dir(home: &mut TestHome, id: Uuid) -> PathBuf {
    home.run(id).await.run_dir
}

/// The devices the run's stage saw, once it wrote them.
async fn units_seen(home: &mut TestHome, id: Uuid) -> String {
    let file = run_dir(home, id).await.join("units");
    wait_for(&format!("run {id} to see its units"), WAIT, || {
        let file = file.clone();
        async move { std::fs::read_to_string(&file).ok() }
    })
    .await
}

/// Lets the run's stage end (exit 0).
async fn release(home: &mut TestHome, id: Uuid) {
    std::fs::write(run_dir(home, id).await.join("go"), b"").unwrap();
}

/// Every claimed, unfinished run's units, from the store: no unit twice.
async fn assert_no_unit_shared(home: &mut TestHome) -> BTreeMap<String, Uuid> {
    let service = home.service().await;
    let runs = service.runs(&RunQuery { state: None, limit: Some(100) }).await.unwrap();
    let mut owners = BTreeMap::new();
    for run in runs.iter().filter(|r| r.state.is_in_flight()) {
        for unit in run.units.get("gpu").into_iter().flatten() {
            if let Some(other) = owners.insert(unit.clone(), run.id) {
                panic!("gpu {unit} is held by {other} and {} at once", run.id);
            }
        }
    }
    owners
}

fn units_of(owners: &BTreeMap<String, Uuid>, id: Uuid) -> Vec<&str> {
    owners.iter().filter(|(_, owner)| **owner == id).map(|(unit, _)| unit.as_str()).collect()
}

#[tokio::test]
async fn four_gpus_are_shared_by_runs_needing_1_2_2_1_and_never_twice_across_a_daemon_kill() {
    let mut home = pooled_home();
    start_with_pool(&mut home, "gpu=0,1,2,3").await;
    let a = home.submit(&["-w", "gpujob"]);
    let b = home.submit(&["-w", "gpuslow", "--needs", "gpu=2"]);
    let c = home.submit(&["-w", "gpujob", "--needs", "gpu=2"]);
    let d = home.submit(&["-w", "gpujob"]);
    // The lowest free units, in queue order: c finds one unit free and waits; d behind it fits.
    assert_eq!(units_seen(&mut home, a).await, "0");
    assert_eq!(units_seen(&mut home, b).await, "1,2");
    assert_eq!(units_seen(&mut home, d).await, "3");
    let pool = std::fs::read_to_string(run_dir(&mut home, b).await.join("pool")).unwrap();
    assert_eq!(pool, "1,2|1,2", "{{pool.gpu}} and LACHESIS_POOL_GPU");
    assert_eq!(home.run(c).await.state, RunState::Pending);
    assert_eq!(home.run(b).await.state, RunState::Starting);
    let owners = assert_no_unit_shared(&mut home).await;
    assert_eq!(owners.len(), 4);
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &b.to_string(), "--json"])).unwrap();
    assert_eq!(status["units"], serde_json::json!({"gpu": ["1", "2"]}), "{status}");
    assert_eq!(status["needs"], serde_json::json!({"gpu": 2}), "{status}");
    let text = home.cli_ok(&["run", "status", &b.to_string()]);
    assert!(text.contains("units     gpu 1,2"), "{text}");
    let (code, answer) = http(home.path(), "GET", &format!("/runs/{b}"), "").await;
    assert_eq!(code, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["units"], serde_json::json!({"gpu": ["1", "2"]}), "{answer}");
    let (code, page) = http(home.path(), "GET", &format!("/ui/runs/{b}"), "").await;
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("needs <b>gpu=2</b> · units <b>gpu 1,2</b>"), "{page}");

    // A crash: the stages go on under their shims; a run queued meanwhile must not get their units.
    home.kill_daemon();
    let e = home.submit(&["-w", "gpujob"]);
    home.start_daemon_with(&["--pool", "gpu=0,1,2,3"]);
    // A run needing no unit, queued behind c and e: once it ran, the queue was looked at.
    let quick = home.submit(&["-w", "quick"]);
    home.wait_state(quick, RunState::Completed, WAIT).await;
    assert_eq!(home.run(c).await.state, RunState::Pending);
    assert_eq!(home.run(e).await.state, RunState::Pending, "every unit is still held");
    assert_eq!(home.run(b).await.state, RunState::Starting, "re-attached, still starting");
    let after_restart = assert_no_unit_shared(&mut home).await;
    assert_eq!(after_restart, owners, "re-attached runs keep their units");
    for id in [a, b, d] {
        assert!(
            home.messages(id).await.iter().any(|m| m.contains("re-attached after a daemon restart")),
            "run {id} was re-attached"
        );
    }

    // An end releases its units: e (one) takes a's; c (two) still waits.
    release(&mut home, a).await;
    home.wait_state(a, RunState::Completed, WAIT).await;
    assert_eq!(units_seen(&mut home, e).await, "0");
    assert_eq!(home.run(c).await.state, RunState::Pending);
    let owners = assert_no_unit_shared(&mut home).await;
    assert_eq!(units_of(&owners, e), ["0"]);

    // b ends (from `starting`): c gets its two units.
    release(&mut home, b).await;
    home.wait_state(b, RunState::Completed, WAIT).await;
    assert_eq!(units_seen(&mut home, c).await, "1,2");
    let owners = assert_no_unit_shared(&mut home).await;
    assert_eq!(units_of(&owners, c), ["1", "2"]);
    assert_eq!(units_of(&owners, d), ["3"]);

    for id in [c, d, e] {
        release(&mut home, id).await;
        home.wait_state(id, RunState::Completed, WAIT).await;
    }
    assert!(assert_no_unit_shared(&mut home).await.is_empty(), "every unit is released");
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &c.to_string(), "--json"])).unwrap();
    assert!(status.get("units").is_none(), "an ended run holds nothing: {status}");
}

#[tokio::test]
async fn a_run_waiting_for_busy_units_says_how_many_are_free_and_who_holds_them() {
    let mut home = pooled_home();
    start_with_pool(&mut home, "gpu=0,1,2,3").await;
    let a = home.submit(&["-w", "gpujob", "--needs", "gpu=2"]);
    let b = home.submit(&["-w", "gpujob"]);
    assert_eq!(units_seen(&mut home, a).await, "0,1");
    assert_eq!(units_seen(&mut home, b).await, "2");
    let c = home.submit(&["-w", "gpujob", "--needs", "gpu=2"]);
    // A run needing no unit, queued behind c: once it ran, the queue was looked at.
    let quick = home.submit(&["-w", "quick"]);
    home.wait_state(quick, RunState::Completed, WAIT).await;
    assert_eq!(home.run(c).await.state, RunState::Pending);
    let expected = format!(
        "2 gpu units: 1 of 4 free (held by runs {}, {})",
        lachesis::model::short_id(&a),
        lachesis::model::short_id(&b)
    );
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &c.to_string(), "--json"])).unwrap();
    assert_eq!(status["waiting_for"], serde_json::json!(expected), "{status}");
    let text = home.cli_ok(&["run", "status", &c.to_string()]);
    assert!(text.contains(&expected), "{text}");

    // b's end frees a second unit: c takes the two free ones.
    release(&mut home, b).await;
    home.wait_state(b, RunState::Completed, WAIT).await;
    assert_eq!(units_seen(&mut home, c).await, "2,3");
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &c.to_string(), "--json"])).unwrap();
    assert!(
        status.get("waiting_for").is_none_or(|w| w.is_null()),
        "a claimed run waits for nothing: {status}"
    );
    for id in [a, c] {
        release(&mut home, id).await;
        home.wait_state(id, RunState::Completed, WAIT).await;
    }
}

#[tokio::test]
async fn requests_no_pool_can_meet_are_refused_and_needs_are_edited_while_pending() {
    let mut home = pooled_home();
    // No daemon has published pools yet: the home has none.
    let err = stderr(&home.cli(&["run", "start", "-w", "gpujob"]));
    assert!(err.contains("needs gpu=1: the daemon has no pool 'gpu' (its pools: none"), "{err}");
    start_with_pool(&mut home, "gpu=0,1,2,3").await;
    // Through the daemon (one run) and straight to the store (--count): the same refusals.
    for extra in [&[][..], &["--count", "2"][..]] {
        let mut args = vec!["run", "start", "-w", "gpujob", "--needs", "gpu=5"];
        args.extend_from_slice(extra);
        let err = stderr(&home.cli(&args));
        assert!(err.contains("needs gpu=5: pool 'gpu' has 4 units"), "{extra:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        let mut args = vec!["run", "start", "-w", "quick", "--needs", "tpu=1"];
        args.extend_from_slice(extra);
        let err = stderr(&home.cli(&args));
        assert!(err.contains("no pool 'tpu' (its pools: gpu"), "{extra:?}: {err}");
    }
    for bad in ["gpu", "gpu=-1", "GPU=1", "gpu=1025"] {
        let err = stderr(&home.cli(&["run", "start", "-w", "gpujob", "--needs", bad]));
        assert!(err.starts_with("lachesis: needs: ") && err.trim().lines().count() == 1, "{bad}: {err}");
    }
    let lines = home.path().join("sweep.jsonl");
    std::fs::write(&lines, "{\"needs\": {\"gpu\": 1}}\n{\"needs\": {\"gpu\": 9}}\n").unwrap();
    let err = stderr(&home.cli(&["run", "start", "-w", "gpujob", "--from", lines.to_str().unwrap()]));
    assert!(err.contains("run 2 of the batch: needs gpu=9: pool 'gpu' has 4 units"), "{err}");
    let service = home.service().await;
    assert!(service.runs(&RunQuery::default()).await.unwrap().is_empty(), "nothing was queued");

    // `run edit --needs` on a held run: checked as at submission, then claimed with the new count.
    let id = home.submit(&["-w", "gpujob", "--hold"]);
    let err = stderr(&home.cli(&["run", "edit", &id.to_string(), "--needs", "gpu=5"]));
    assert!(err.contains("needs gpu=5: pool 'gpu' has 4 units"), "{err}");
    home.cli_ok(&["run", "edit", &id.to_string(), "--needs", "gpu=3"]);
    let run = home.run(id).await;
    assert_eq!(run.params.needs.to_string(), "gpu=3");
    assert!(home.messages(id).await.iter().any(|m| m == "edited: needs gpu=1 -> gpu=3"));
    home.cli_ok(&["run", "release", &id.to_string()]);
    assert_eq!(units_seen(&mut home, id).await, "0,1,2");
    release(&mut home, id).await;
    home.wait_state(id, RunState::Completed, WAIT).await;

    // Over HTTP (the daemon's socket): a body's `needs`, checked the same way.
    let body = serde_json::json!({"workflow": "gpujob", "needs": {"gpu": 7}});
    let (status, answer) = post_runs(home.path(), &body).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("needs gpu=7: pool 'gpu' has 4 units"), "{answer}");
    let body = serde_json::json!({"workflow": "gpujob", "needs": {"gpu": 4}});
    let (status, answer) = post_runs(home.path(), &body).await;
    assert_eq!(status, 201, "{answer}");
    let id: Uuid =
        serde_json::from_str::<serde_json::Value>(&answer).unwrap()["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(units_seen(&mut home, id).await, "0,1,2,3");
    release(&mut home, id).await;
    home.wait_state(id, RunState::Completed, WAIT).await;

    // A queued run whose needs a restarted daemon no longer has says so, and waits.
    let waiting = home.submit(&["-w", "gpujob", "--needs", "gpu=3", "--hold"]);
    home.kill_daemon();
    std::fs::remove_file(lachesis::node_pools::file(home.path())).unwrap();
    start_with_pool(&mut home, "gpu=0,1").await;
    home.cli_ok(&["run", "release", &waiting.to_string()]);
    let quick = home.submit(&["-w", "quick"]);
    home.wait_state(quick, RunState::Completed, WAIT).await;
    let doctor: serde_json::Value = serde_json::from_slice(&home.cli(&["doctor", "--json"]).stdout).unwrap();
    let pools = doctor["checks"].as_array().unwrap().iter().find(|c| c["name"] == "pools").cloned();
    assert_eq!(pools.unwrap()["detail"], "gpu=0,1 (as the daemon last started)");
    let text = home.cli_ok(&["run", "status", &waiting.to_string()]);
    assert!(
        text.contains("waiting   for pool units the daemon lacks: needs gpu=3: pool 'gpu' has 2 units"),
        "{text}"
    );
    assert_eq!(home.run(waiting).await.state, RunState::Pending);
}

/// `POST /runs` on the home's API socket: (status, body).
async fn post_runs(home: &Path, body: &serde_json::Value) -> (u16, String) {
    http(home, "POST", "/runs", &body.to_string()).await
}

/// One request on the home's API socket (no token there): (status, body).
async fn http(home: &Path, method: &str, path: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::UnixStream::connect(home.join("api.sock")).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: lachesis\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn gpu_auto_takes_the_gpus_nvidia_smi_lists() {
    let mut home = pooled_home();
    let standin = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gpus");
    let path = format!("{}:{}", standin.display(), std::env::var("PATH").unwrap_or_default());
    home.environ.push(("PATH".into(), path));
    home.environ.push(("STANDIN_GPUS".into(), "2".into()));
    start_with_pool(&mut home, "gpu=auto").await;
    let id = home.submit(&["-w", "gpujob", "--needs", "gpu=2"]);
    assert_eq!(units_seen(&mut home, id).await, "0,1");
    let err = stderr(&home.cli(&["run", "start", "-w", "gpujob", "--needs", "gpu=3"]));
    assert!(err.contains("needs gpu=3: pool 'gpu' has 2 units"), "{err}");
    release(&mut home, id).await;
    home.wait_state(id, RunState::Completed, WAIT).await;
}

#[tokio::test]
async fn a_daemon_with_pools_it_cannot_have_does_not_start() {
    let home = TestHome::new();
    let empty = tempfile::tempdir().unwrap();
    let cases = [
        (vec!["--pool", "gpu=0,0"], "lists unit '0' twice"),
        (vec!["--pool", "gpu"], "is not NAME=UNITS"),
        (vec!["--pool", "nvme=auto"], "only the gpu pool"),
        (vec!["--pool", "gpu=0", "--pool", "gpu=1"], "pool 'gpu' is given twice"),
        (vec!["--pool", "gpu=auto"], "cannot run `nvidia-smi -L`"),
    ];
    for (flags, want) in cases {
        let mut args = vec!["daemon"];
        args.extend(flags.iter().copied());
        // No nvidia-smi on this PATH.
        let out = home.command(&args).env("PATH", empty.path()).output().unwrap();
        let err = stderr(&out);
        // The reason is on the first line (clap adds a hint for a flag it refused).
        let first = err.lines().next().unwrap_or_default();
        assert!(!out.status.success() && first.contains(want), "{flags:?}: {err}");
    }
}

#[tokio::test]
async fn an_exclusive_label_and_a_pooled_run_never_share_a_device() {
    let mut home = pooled_home();
    // An older workflow that holds gpu 0 as an exclusive label, and says so to its stage.
    let labelled = gpu_workflow("label0", "    env: {CUDA_VISIBLE_DEVICES: \"0\"}\n")
        .replace("needs: {gpu: 1}\n", "resources: [\"gpu:0\"]\n")
        .replace("'{pool.gpu}'", "label");
    home.workflow("label0", &labelled);
    start_with_pool(&mut home, "gpu=0,1").await;
    let old = home.submit(&["-w", "label0"]);
    assert_eq!(units_seen(&mut home, old).await, "0");
    let pooled = home.submit(&["-w", "gpujob"]);
    assert_eq!(units_seen(&mut home, pooled).await, "1", "unit 0 is the label's");
    // And the other way: while the pool holds gpu 0, the label waits.
    release(&mut home, old).await;
    home.wait_state(old, RunState::Completed, WAIT).await;
    let first = home.submit(&["-w", "gpujob"]);
    assert_eq!(units_seen(&mut home, first).await, "0");
    let again = home.submit(&["-w", "label0"]);
    let quick = home.submit(&["-w", "quick"]);
    home.wait_state(quick, RunState::Completed, WAIT).await;
    assert_eq!(home.run(again).await.state, RunState::Pending, "gpu 0 is the pooled run's");
    release(&mut home, first).await;
    assert_eq!(units_seen(&mut home, again).await, "0");
    for id in [pooled, again] {
        release(&mut home, id).await;
        home.wait_state(id, RunState::Completed, WAIT).await;
    }
}

#[tokio::test]
async fn on_postgres_the_units_survive_a_daemon_kill_too() {
    let Some(url) = crate::support::fresh_postgres().await else { return };
    let mut home = pooled_home();
    home.database_url = Some(url);
    start_with_pool(&mut home, "gpu=0,1").await;
    let first = home.submit(&["-w", "gpujob"]);
    let second = home.submit(&["-w", "gpuslow"]);
    assert_eq!(units_seen(&mut home, first).await, "0");
    assert_eq!(units_seen(&mut home, second).await, "1");
    home.kill_daemon();
    let third = home.submit(&["-w", "gpujob"]);
    start_with_pool(&mut home, "gpu=0,1").await;
    let quick = home.submit(&["-w", "quick"]);
    home.wait_state(quick, RunState::Completed, WAIT).await;
    assert_eq!(home.run(third).await.state, RunState::Pending, "both units are still held");
    assert_eq!(assert_no_unit_shared(&mut home).await.len(), 2);
    release(&mut home, second).await;
    assert_eq!(units_seen(&mut home, third).await, "1");
    assert_no_unit_shared(&mut home).await;
    for id in [first, third] {
        release(&mut home, id).await;
        home.wait_state(id, RunState::Completed, WAIT).await;
    }
}
