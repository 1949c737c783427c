//! W&B identity: every stage gets a `WANDB_RUN_ID` stable for (run, stage) and
//! `WANDB_RESUME=allow`, so a retried run keeps logging into the same W&B runs. And the W&B
//! poller reads the metric a sweep names, whatever its key, against the fake W&B of
//! `tests/python/fake_wandb.py`.

use std::time::Duration;

use lachesis::model::RunState;
use uuid::Uuid;

use crate::support::{TestHome, wait_for};

const T: Duration = Duration::from_secs(30);

/// Two stages that print their W&B identity; the trainer exits 75, which the retry policy
/// calls transient, so the run gets a second attempt. `own` is the trainer's extra env.
fn printing(name: &str, own: &str) -> String {
    format!(
        r#"name: {name}
stages:
  - name: api
    argv: [sh, -c, 'echo "id=$WANDB_RUN_ID resume=$WANDB_RESUME"; sleep 600']
    start_delay: 100ms
  - name: trainer
    argv: [sh, -c, 'echo "id=$WANDB_RUN_ID resume=$WANDB_RESUME"; exit 75']
    env: {{{own}}}
completion: {{stages: [trainer]}}
retry: {{max_attempts: 2, backoff: 100ms, retry_on_exit_codes: [75]}}
stop_grace: 2s
"#
    )
}

/// The identity lines a stage printed, one per attempt.
fn printed(run_dir: &std::path::Path, stage: &str) -> Vec<String> {
    let log = std::fs::read_to_string(run_dir.join(format!("{stage}.log"))).unwrap_or_default();
    log.lines().filter(|l| l.starts_with("id=")).map(str::to_string).collect()
}

fn short(id: Uuid) -> String {
    id.simple().to_string()[..8].to_string()
}

#[tokio::test]
async fn every_attempt_of_a_stage_logs_into_one_wandb_run_and_the_status_links_it() {
    let mut home = TestHome::new();
    home.environ = vec![("WANDB_ENTITY".into(), "team".into()), ("WANDB_BASE_URL".into(), String::new())];
    home.workflow("wb", &printing("wb", ""));
    home.workflow("own", &printing("own", "WANDB_RUN_ID: 'mine-{run_id}'"));
    home.start_daemon();
    let id = home.submit(&["--workflow", "wb"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!((run.state, run.attempt), (RunState::Failed, 2), "{:?}", run.reason);
    let trainer = format!("id={}-trainer resume=allow", short(id));
    assert_eq!(printed(&run.run_dir, "trainer"), vec![trainer.clone(), trainer], "both attempts, one id");
    let api = printed(&run.run_dir, "api");
    assert_eq!(api.first().map(String::as_str), Some(format!("id={}-api resume=allow", short(id)).as_str()));

    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &id.to_string(), "--json"])).unwrap();
    let trainer_run = &status["wandb_runs"][1];
    assert_eq!(trainer_run["stage"], "trainer", "{status:#}");
    assert_eq!(trainer_run["id"], format!("{}-trainer", short(id)));
    assert_eq!(
        trainer_run["url"],
        format!("https://wandb.ai/team/atropos-tinker/runs/{}-trainer", short(id)),
        "{status:#}"
    );
    // The HTTP run resource carries the same list (served in-process here, where WANDB_ENTITY is
    // not set: ids, no page).
    let app = lachesis::api::app(home.service().await, Default::default(), None);
    let request = axum::http::Request::get(format!("/runs/{id}")).body(axum::body::Body::empty()).unwrap();
    let response = tower::ServiceExt::oneshot(app, request).await.unwrap();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let resource: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let ids = |v: &serde_json::Value| {
        v["wandb_runs"].as_array().map(|a| a.iter().map(|r| r["id"].clone()).collect::<Vec<_>>())
    };
    assert_eq!(ids(&resource), ids(&status), "{resource:#}");
    let text = home.cli_ok(&["run", "status", &id.to_string()]);
    assert!(text.contains(&format!("wandb     trainer {}-trainer  https://wandb.ai/", short(id))), "{text}");

    // Another run gets other ids; a workflow's own WANDB_RUN_ID wins.
    let other = home.submit(&["--workflow", "own"]);
    let (other_run, _) = home.wait_settled(other, T).await;
    let mine = format!("id=mine-{other} resume=allow");
    assert_eq!(printed(&other_run.run_dir, "trainer"), vec![mine.clone(), mine]);
    let other_api = printed(&other_run.run_dir, "api");
    assert_eq!(other_api.first().cloned(), Some(format!("id={}-api resume=allow", short(other))));
    assert_ne!(short(id), short(other));
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &other.to_string(), "--json"])).unwrap();
    assert_eq!(status["wandb_runs"][1]["id"], format!("mine-{other}"), "{status:#}");
    home.kill_daemon();
}

/// `tests/python/fake_wandb.py` serving on a port of its own (stdlib only: the machine's
/// `python3`), killed when dropped.
struct FakeWandb {
    child: std::process::Child,
    base: String,
}

impl FakeWandb {
    fn start(args: &[&str]) -> FakeWandb {
        use std::io::BufRead;
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/fake_wandb.py");
        let mut child = std::process::Command::new("python3")
            .arg(script)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs the fake W&B");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert!(line.starts_with("http://"), "the fake W&B printed {line:?}");
        FakeWandb { child, base: line.trim().to_string() }
    }
}

impl Drop for FakeWandb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A sweep's metric is read from W&B whatever its key: here `zz/pass_rate`, none of the keys
/// results show, logged beside twenty others that sort before it (past the sixteen other keys
/// the poller reads of a run). The member's metrics and the sweep's leaderboard have it; the
/// other keys stay bounded.
#[tokio::test]
async fn the_wandb_poller_reads_the_metric_a_sweep_names_whatever_its_key() {
    let fake = FakeWandb::start(&["--extra-keys", "20", "--key", "zz/pass_rate"]);
    let mut home = TestHome::new();
    let gate = home.path().join("gate");
    home.workflow(
        "logged",
        &format!(
            "name: logged\ncredentials: [WANDB_API_KEY]\nvars: {{lr: \"0.1\"}}\nstages:\n  - name: trainer\n    \
             argv: [sh, -c, \"while [ ! -e '{}' ]; do sleep 0.05; done\"]\nstop_grace: 2s\n",
            gate.display()
        ),
    );
    home.environ.extend([
        ("WANDB_API_KEY".to_string(), "wandb-test-key-0123456789".to_string()),
        ("WANDB_ENTITY".to_string(), "lab".to_string()),
        ("WANDB_BASE_URL".to_string(), fake.base.clone()),
        ("LACHESIS_WANDB_INTERVAL".to_string(), "1s".to_string()),
    ]);
    let sweep_file = home.path().join("pass-rate.yaml");
    std::fs::write(
        &sweep_file,
        "method: grid\nworkflow: logged\nmetric: {name: zz/pass_rate, goal: maximize}\n\
         parameters:\n  lr: {values: [0.1]}\n",
    )
    .unwrap();
    let started: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "start", sweep_file.to_str().unwrap(), "--json"]))
            .unwrap();
    let sweep = started["id"].as_str().unwrap().to_string();
    let member = started["members"][0].as_str().unwrap().to_string();
    home.start_daemon();

    let metrics = |home: &TestHome| -> serde_json::Value {
        serde_json::from_str(&home.cli_ok(&["run", "metrics", &member, "--json"])).unwrap()
    };
    let names: Vec<String> = wait_for("the sweep's metric read from W&B", T, || {
        let found = metrics(&home);
        let names: Vec<String> = found["metrics"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["name"].as_str().map(String::from))
            .collect();
        std::future::ready(names.iter().any(|n| n == "zz/pass_rate").then_some(names))
    })
    .await;
    // The known keys the fake logs (train/reward_mean, train/loss), the sweep's metric, and
    // sixteen of the twenty others: no more.
    assert_eq!(names.len(), 2 + 1 + lachesis::wandb::MAX_OTHER_KEYS, "{names:?}");
    let series: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "metrics", &member, "--name", "zz/pass_rate", "--json"]))
            .unwrap();
    let points = series["points"].as_array().unwrap();
    assert_eq!(
        points.last().map(|p| (p["step"].clone(), p["value"].clone())),
        Some((19.into(), 0.39.into()))
    );

    // The leaderboard compares the member by it.
    let status = home.cli_ok(&["sweep", "status", &sweep]);
    assert!(status.contains("0.39"), "{status}");
    std::fs::write(&gate, "").unwrap();
    let (run, _) = home.wait_settled(member.parse().unwrap(), T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    home.kill_daemon();
}
