//! Sweeps: a sweep file's members queued as ordinary runs with the right parameters, max_live
//! held at the claim, a seeded random sweep reproduced, bad files (an unused parameter, a grid
//! cut by run_cap without saying so, a metric the workflow never reports, …) refused in one
//! line with nothing queued, a sweep stopped, a metric written as text said, and the daemon's
//! decisions (hyperband's stop with its exact reason, the target's end of new members) made
//! once, as readings land from a stage's log or W&B.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use lachesis::model::MetricPoint;
use lachesis::model::sweep::SweepState;
use lachesis::model::{Millis, RunState};
use lachesis::service::{MetricSeries, Service, SweepDecider, SweepDecision};
use uuid::Uuid;

use crate::support::{TestHome, stderr, wait_for};

const T: Duration = Duration::from_secs(30);

/// A member that runs until the test creates its home's `gate` file, then prints its values.
/// Its metrics file is never written: readings come from the test.
fn gated(home: &TestHome) -> String {
    let gate = home.path().join("gate");
    format!(
        r#"name: gated
vars: {{lr: "0.1", size: "1", steps: "3"}}
stages:
  - name: trainer
    argv: [sh, -c, "while [ ! -e '{}' ]; do sleep 0.05; done; echo lr={{lr}} size={{size}}"]
metrics:
  jsonl: {{file: metrics.jsonl, step: /step}}
stop_grace: 2s
"#,
        gate.display()
    )
}

fn write(home: &TestHome, name: &str, text: &str) -> String {
    let path = home.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// Starts a sweep through the CLI: its id and members, in order of k.
fn start(home: &TestHome, file: &str) -> (Uuid, Vec<Uuid>) {
    let out: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "start", file, "--json"])).unwrap();
    let id = Uuid::parse_str(out["id"].as_str().unwrap()).unwrap();
    let members =
        out["members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().parse().unwrap()).collect();
    (id, members)
}

#[tokio::test]
async fn a_grid_sweep_queues_one_member_per_point_with_its_vars() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let file = write(
        &home,
        "grid.yaml",
        "method: grid\nworkflow: gated\nmetric: {name: loss}\nparameters:\n  size: {values: [1, 2]}\n  lr: {values: [0.00001, 0.1]}\n",
    );
    let (sweep, members) = start(&home, &file);
    assert_eq!(members.len(), 4);
    // W&B's order: parameters by name (lr, size), the last varying fastest; floats as Python
    // writes them.
    let expected = [("1e-05", "1"), ("1e-05", "2"), ("0.1", "1"), ("0.1", "2")];
    for (k, (id, (lr, size))) in members.iter().zip(expected).enumerate() {
        let run = home.run(*id).await;
        assert_eq!(run.state, RunState::Pending);
        assert_eq!(
            (run.params.vars["lr"].as_str(), run.params.vars["size"].as_str()),
            (lr, size),
            "member {k}"
        );
        assert_eq!(run.params.sweep.map(|m| (m.sweep, m.k)), Some((sweep, k as u64)));
    }
    let status = home.cli_ok(&["run", "status", &members[3].to_string()]);
    let short = &sweep.to_string()[..8];
    assert!(status.contains(&format!("sweep     member 3 of sweep {short}")), "{status}");
    let board: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "status", short, "--json"])).unwrap();
    assert_eq!(board["state"], "live");
    assert_eq!(board["counts"]["pending"], 4);
    assert_eq!(board["leaderboard"][2]["parameters"], serde_json::json!({"lr": 0.1, "size": 1}));
    let list = home.cli_ok(&["sweep", "list"]);
    assert!(list.contains(short) && list.contains("gated"), "{list}");
}

#[tokio::test]
async fn a_random_sweep_with_a_seed_is_reproducible() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let sweep = |seed: u64| {
        format!(
            "method: random\nworkflow: gated\nrun_cap: 5\nseed: {seed}\nparameters:\n  lr: {{distribution: log_uniform_values, min: 0.00001, max: 0.1}}\n  size: {{values: [8, 16, 32]}}\n"
        )
    };
    let mut drawn = Vec::new();
    for (name, seed) in [("a.yaml", 7), ("b.yaml", 7), ("c.yaml", 8)] {
        let (_, members) = start(&home, &write(&home, name, &sweep(seed)));
        let mut vars = Vec::new();
        for id in members {
            vars.push(home.run(id).await.params.vars);
        }
        drawn.push(vars);
    }
    assert_eq!(drawn[0], drawn[1], "the same seed draws the same members");
    assert_ne!(drawn[0], drawn[2], "another seed draws others");
    let distinct: std::collections::BTreeSet<&String> = drawn[0].iter().map(|v| &v["lr"]).collect();
    assert!(distinct.len() > 1, "members differ: {:?}", drawn[0]);
}

#[tokio::test]
async fn a_parameter_the_workflow_never_uses_is_refused_and_nothing_is_queued() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let file = write(
        &home,
        "bad.yaml",
        "method: grid\nworkflow: gated\nparameters:\n  lr: {values: [0.1]}\n  warmup: {values: [1, 2]}\n",
    );
    let out = home.cli(&["sweep", "start", &file]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("parameters.warmup") && err.contains("has no variable 'warmup'"), "{err}");
    // A `set:` parameter on a workflow that runs no environment is refused too.
    let set = write(
        &home,
        "set.yaml",
        "method: grid\nworkflow: gated\nparameters:\n  group: {values: [4, 8], set: group_size}\n",
    );
    let err = stderr(&home.cli(&["sweep", "start", &set]));
    assert!(err.contains("parameters.group") && err.contains("runs no environment"), "{err}");
    assert!(home.cli_ok(&["sweep", "list"]).contains("no sweeps"));
    assert!(home.cli_ok(&["run", "list"]).contains("no runs"));
    // A bad file is one line, too.
    let bayes = write(
        &home,
        "bayes.yaml",
        "method: bayes\nworkflow: gated\nmetric: {name: loss}\nrun_cap: 4\nparameters: {lr: {values: [{a: 1}]}}\n",
    );
    let err = stderr(&home.cli(&["sweep", "start", &bayes]));
    assert!(
        err.contains("is a mapping, which bayes cannot place") && err.trim().lines().count() == 1,
        "{err}"
    );
    let _ = home.service().await;
}

/// The members in flight now.
async fn in_flight(service: &Service, members: &[Uuid]) -> Vec<Uuid> {
    let mut live = Vec::new();
    for id in members {
        if service.run(*id).await.unwrap().unwrap().state.is_in_flight() {
            live.push(*id);
        }
    }
    live
}

#[tokio::test]
async fn max_live_holds_and_a_stopped_sweep_starts_nothing_more() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    home.workflow("quick", "name: quick\nstages:\n  - {name: main, argv: ['true']}\n");
    let file = write(
        &home,
        "live.yaml",
        "method: grid\nworkflow: gated\nmax_live: 2\nparameters:\n  lr: {values: [0.1, 0.2, 0.3, 0.4, 0.5]}\n",
    );
    let (sweep, members) = start(&home, &file);
    home.start_daemon();
    let service = home.service().await;
    wait_for("two members running", T, || {
        let service = service.clone();
        let members = members.clone();
        async move {
            let mut running = 0;
            for id in &members {
                running += (service.run(*id).await.unwrap().unwrap().state == RunState::Running) as usize;
            }
            (running == 2).then_some(())
        }
    })
    .await;
    // A run queued after them is claimed: the claim that took it passed the sweep's other
    // members by, with 8 slots free.
    let other = home.submit(&["--workflow", "quick"]);
    let (run, _) = home.wait_settled(other, T).await;
    assert_eq!(run.state, RunState::Completed);
    assert_eq!(in_flight(&service, &members).await.len(), 2, "max_live 2 holds");

    home.cli_ok(&["sweep", "stop", &sweep.to_string()]);
    for id in &members {
        let (run, _) = home.wait_settled(*id, T).await;
        assert_eq!(run.state, RunState::Stopped, "member {id}: {:?}", run.reason);
    }
    let board = service.sweep_status(&sweep.to_string()).await.unwrap();
    assert_eq!(board.sweep.state, SweepState::Stopped);
    assert_eq!(board.counts.get(lachesis::model::RunState::Stopped), 5);
    let cancelled = members.iter().filter(|id| {
        board
            .leaderboard
            .iter()
            .any(|m| m.run == **id && m.reason.as_deref() == Some("cancelled before it started"))
    });
    assert_eq!(cancelled.count(), 3, "the three that never started were cancelled: {:?}", board.leaderboard);
    // Every member has ended: --watch shows the board once and returns.
    let watched = home.cli_ok(&["sweep", "status", &sweep.to_string(), "--watch", "--json"]);
    assert_eq!(watched.lines().count(), 1, "{watched}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&watched).unwrap()["state"], "stopped");
}

/// Series fed by the test, as the store's metrics by name would give them.
struct Fed(HashMap<Uuid, Vec<f64>>);

#[async_trait]
impl MetricSeries for Fed {
    async fn series(&self, run: Uuid, _name: &str) -> lachesis::service::Result<Vec<MetricPoint>> {
        let values = self.0.get(&run).cloned().unwrap_or_default();
        Ok(values
            .into_iter()
            .enumerate()
            .map(|(i, value)| MetricPoint { attempt: 1, step: i as i64 + 1, value })
            .collect())
    }

    async fn runs_with_readings_since(&self, _after: Millis) -> lachesis::service::Result<Option<Vec<Uuid>>> {
        Ok(None)
    }
}

#[tokio::test]
async fn hyperband_stops_the_loser_once_and_the_target_ends_new_members() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let file = write(
        &home,
        "hb.yaml",
        "method: grid\nworkflow: gated\nmax_live: 4\nmetric: {name: loss, target: 0.25}\n\
         early_terminate: {type: hyperband, min_iter: 2, eta: 2, strict: false}\n\
         parameters:\n  lr: {values: [0.1, 0.2, 0.3, 0.4, 0.5]}\n",
    );
    let (sweep, members) = start(&home, &file);
    home.start_daemon();
    let service = home.service().await;
    for id in &members[..4] {
        home.wait_state(*id, RunState::Running, T).await;
    }
    let fed = Fed(HashMap::from([
        (members[0], vec![1.0, 0.9, 0.8]),
        (members[1], vec![1.0, 0.5, 0.4]),
        (members[2], vec![1.0, 0.97, 0.95]),
        (members[3], vec![1.0, 0.3, 0.2]),
    ]));
    let mut decider = SweepDecider::default();
    let decisions = decider.pass(&service, &fed).await.unwrap();
    let short = &sweep.to_string()[..8];
    let reason = format!(
        "early-terminated by sweep {short}: best loss 0.95 by iteration 3 is worse than the band-2 threshold 0.9"
    );
    assert_eq!(
        decisions,
        vec![
            SweepDecision::Target { sweep, k: 3, cancelled: 1 },
            SweepDecision::Stopped { sweep, k: 2, run: members[2], reason: reason.clone() },
        ]
    );
    // Decided once: a second pass finds the member stopping or stopped.
    assert!(decider.pass(&service, &fed).await.unwrap().is_empty());
    let (stopped, _) = home.wait_settled(members[2], T).await;
    assert_eq!((stopped.state, stopped.reason.as_deref()), (RunState::Stopped, Some(reason.as_str())));
    assert!(home.messages(members[2]).await.iter().any(|m| m.contains(&reason)), "an event says why");
    let cancelled = home.run(members[4]).await;
    assert_eq!(cancelled.state, RunState::Stopped);
    assert_eq!(
        cancelled.reason.as_deref(),
        Some(
            format!("cancelled: sweep {short} member 3 reached the target: loss 0.2 (target 0.25)").as_str()
        )
    );
    // The others run on and finish.
    std::fs::write(home.path().join("gate"), "").unwrap();
    for id in [members[0], members[1], members[3]] {
        let (run, _) = home.wait_settled(id, T).await;
        assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    }
    // Done, by this decider or the daemon's own, whichever looks first.
    let deadline = std::time::Instant::now() + T;
    let record = loop {
        decider.pass(&service, &fed).await.unwrap();
        let record = service.resolve_sweep(short).await.unwrap();
        if record.state == SweepState::Done {
            break record;
        }
        assert!(std::time::Instant::now() < deadline, "the sweep is still {}", record.state);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let board = service.sweep_status_with(&record, &fed).await.unwrap();
    assert_eq!(board.sweep.state, SweepState::Done);
    assert_eq!(board.winner, Some(3));
    let order: Vec<u64> = board.leaderboard.iter().map(|m| m.k).collect();
    assert_eq!(order, vec![3, 1, 0, 2, 4], "best first by the goal, members without readings last");
    let loser = board.leaderboard.iter().find(|m| m.k == 2).unwrap();
    assert!(loser.early_terminated && loser.reason.as_deref() == Some(reason.as_str()));
    assert_eq!((loser.best, loser.best_step, loser.iterations), (Some(0.95), Some(3), 3));
}

#[tokio::test]
async fn the_daemon_stops_the_loser_from_its_stored_readings() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let file = write(
        &home,
        "hb.yaml",
        "method: grid\nworkflow: gated\nmetric: {name: train/loss}\n\
         early_terminate: {type: hyperband, min_iter: 2, eta: 2, strict: false}\n\
         parameters:\n  lr: {values: [0.1, 0.2, 0.3, 0.4]}\n",
    );
    let (sweep, members) = start(&home, &file);
    home.start_daemon();
    let service = home.service().await;
    for id in &members {
        home.wait_state(*id, RunState::Running, T).await;
    }
    let waiting = home.cli_ok(&["sweep", "status", &sweep.to_string()]);
    assert!(
        waiting.contains("waiting   no member has reported train/loss yet (member 0 reports no metric yet)"),
        "{waiting}"
    );
    let losses = [[1.0, 0.9, 0.8], [1.0, 0.5, 0.4], [1.0, 0.97, 0.95], [1.0, 0.3, 0.2]];
    for (id, series) in members.iter().zip(losses) {
        let rows: Vec<lachesis::model::MetricRow> = series
            .iter()
            .enumerate()
            .map(|(i, loss)| lachesis::model::MetricRow {
                step: i as i64 + 1,
                loss: Some(*loss),
                recorded_at: lachesis::model::now_millis(),
                ..Default::default()
            })
            .collect();
        service.put_metric_rows_as_given(*id, &rows).await.unwrap();
    }
    let reason = format!(
        "early-terminated by sweep {}: best train/loss 0.95 by iteration 3 is worse than the band-2 threshold 0.9",
        &sweep.to_string()[..8]
    );
    let (stopped, _) = home.wait_settled(members[2], T).await;
    assert_eq!((stopped.state, stopped.reason.as_deref()), (RunState::Stopped, Some(reason.as_str())));
    let said: Vec<String> = home
        .messages(members[2])
        .await
        .into_iter()
        .filter(|m| m.starts_with("stop: early-terminated"))
        .collect();
    assert_eq!(said, vec![format!("stop: {reason}")], "stopped once, with an event saying why");
    for id in [members[0], members[1], members[3]] {
        assert_eq!(home.run(id).await.state, RunState::Running, "the others run on");
    }
    let board: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "status", &sweep.to_string(), "--json"])).unwrap();
    assert_eq!(board["leaderboard"][0]["k"], 3, "{board:#}");
    assert_eq!(board["leaderboard"][0]["best"], 0.2);
    let text = home.cli_ok(&["sweep", "status", &sweep.to_string()]);
    assert!(text.contains(&reason), "{text}");
}

#[tokio::test]
async fn sweeps_over_http_start_list_show_and_stop() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let api = crate::http::start_with(&mut home, "127.0.0.1", None, &[]).await;
    let object = serde_json::json!({
        "method": "grid", "workflow": "gated", "max_live": 1,
        "metric": {"name": "loss"}, "parameters": {"lr": {"values": [0.1, 0.2]}},
    });
    let (status, started) = api.post("/sweeps", object).await;
    assert_eq!(status.as_u16(), 201, "{started}");
    assert_eq!(started["members"].as_array().map(Vec::len), Some(2));
    let id = started["id"].as_str().unwrap().to_string();
    let yaml = "method: random\nworkflow: gated\nrun_cap: 3\nparameters:\n  lr: {min: 0.1, max: 0.2}\n";
    let (status, second) = api.post("/sweeps", serde_json::json!(yaml)).await;
    assert_eq!(status.as_u16(), 201, "{second}");
    let (status, listed) = api.get("/sweeps").await;
    assert_eq!(status.as_u16(), 200);
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
    let (status, board) = api.get(&format!("/sweeps/{}", &id[..8])).await;
    assert_eq!(status.as_u16(), 200);
    assert_eq!((board["metric"].as_str(), board["goal"].as_str()), (Some("loss"), Some("minimize")));
    assert_eq!(board["leaderboard"].as_array().map(Vec::len), Some(2), "{board}");
    let (status, refused) = api.post("/sweeps", serde_json::json!("method: bayes\nworkflow: gated\n")).await;
    assert_eq!(status.as_u16(), 400, "{refused}");
    assert!(refused.to_string().contains("parameters: missing"), "{refused}");
    let (status, _) = api.get("/sweeps/ffffffff").await;
    assert_eq!(status.as_u16(), 404);
    let (status, stopped) = api.post(&format!("/sweeps/{id}/stop"), serde_json::json!(null)).await;
    assert_eq!(status.as_u16(), 200, "{stopped}");
    assert_eq!(stopped["state"], "stopped");
}

/// A member whose trainer logs `step i loss=v` for each value of its `curve` var; at a `w` it
/// waits for the home's `go` file, and after its last value for the `gate` file.
fn logging(home: &TestHome) -> String {
    let (go, gate) = (home.path().join("go"), home.path().join("gate"));
    format!(
        r#"name: logging
vars: {{curve: "1.0"}}
stages:
  - name: trainer
    argv: [sh, -c, 'i=0; for v in {{curve}}; do if [ "$v" = w ]; then while [ ! -e "{go}" ]; do sleep 0.05; done; continue; fi; i=$((i+1)); echo "step $i loss=$v"; done; while [ ! -e "{gate}" ]; do sleep 0.05; done']
metrics:
  log: {{stage: trainer, pattern: 'step (?P<step>\d+) loss=(?P<loss>\S+)'}}
stop_grace: 2s
"#,
        go = go.display(),
        gate = gate.display()
    )
}

#[tokio::test]
async fn hyperband_stops_a_member_from_what_its_trainer_logs() {
    let mut home = TestHome::new();
    home.workflow("logging", &logging(&home));
    // Three members level at 0.4 by iteration 3 (none is worse than any threshold they make),
    // then the fourth reaches iteration 3 at 0.98 once the test says go.
    let file = write(
        &home,
        "log.yaml",
        "method: grid\nworkflow: logging\nmetric: {name: loss}\n\
         early_terminate: {type: hyperband, min_iter: 3, eta: 3, strict: false}\n\
         parameters:\n  curve: {values: ['1.0 0.5 0.4', '0.9 0.5 0.4', '1.0 0.99 w 0.98', '0.8 0.5 0.4']}\n",
    );
    let (sweep, members) = start(&home, &file);
    // The decider's tick is an hour away: the stop comes from the news of the readings.
    home.start_daemon_with(&["--sweep-interval", "1h"]);
    let service = home.service().await;
    let counts = [3, 3, 2, 3];
    wait_for("the first readings to be recorded", T, || {
        let (service, members) = (service.clone(), members.clone());
        async move {
            for (id, count) in members.iter().zip(counts) {
                if service.run_metric_series(*id, "loss").await.unwrap().len() != count {
                    return None;
                }
            }
            Some(())
        }
    })
    .await;
    std::fs::write(home.path().join("go"), "").unwrap();
    let (stopped, _) = home.wait_settled(members[2], T).await;
    let reason = format!(
        "early-terminated by sweep {}: best loss 0.98 by iteration 3 is worse than the band-3 threshold 0.4",
        &sweep.to_string()[..8]
    );
    assert_eq!((stopped.state, stopped.reason.as_deref()), (RunState::Stopped, Some(reason.as_str())));
    for id in [members[0], members[1], members[3]] {
        assert_eq!(home.run(id).await.state, RunState::Running, "the others run on");
    }
    std::fs::write(home.path().join("gate"), "").unwrap();
    for id in [members[0], members[1], members[3]] {
        let (run, _) = home.wait_settled(id, T).await;
        assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    }
    let board = service.sweep_status(&sweep.to_string()).await.unwrap();
    let loser = board.leaderboard.iter().find(|m| m.k == 2).unwrap();
    assert!(loser.early_terminated);
    assert_eq!((loser.best, loser.iterations), (Some(0.98), 3));
    assert_eq!(board.leaderboard.last().map(|m| m.k), Some(2), "the loser ranks last");
}

#[tokio::test]
async fn the_demo_sweep_stops_its_worst_learning_rate_early() {
    let mut home = TestHome::new();
    home.start_daemon();
    let out: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "start", "demo-sweep", "--json"])).unwrap();
    let members: Vec<Uuid> =
        out["members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().parse().unwrap()).collect();
    assert_eq!(members.len(), 6);
    // lr 1.0 (member 5) earns the least reward at every step; lr 0.001 (member 2) the most.
    let (worst, _) = home.wait_settled(members[5], Duration::from_secs(60)).await;
    assert_eq!(worst.state, RunState::Stopped, "{:?}", worst.reason);
    let reason = worst.reason.unwrap_or_default();
    assert!(reason.starts_with("early-terminated by sweep") && reason.contains("reward"), "{reason}");
    let (best, _) = home.wait_settled(members[2], Duration::from_secs(60)).await;
    assert_eq!(best.state, RunState::Completed, "{:?}", best.reason);
}

#[tokio::test]
async fn a_decision_outlives_a_daemon_killed_before_it_acted() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let file = write(
        &home,
        "hb.yaml",
        "method: grid\nworkflow: gated\nmetric: {name: loss}\n\
         early_terminate: {type: hyperband, min_iter: 2, eta: 2, strict: false}\n\
         parameters:\n  lr: {values: [0.1, 0.2, 0.3, 0.4]}\n",
    );
    let (_, members) = start(&home, &file);
    home.start_daemon();
    let service = home.service().await;
    for id in &members {
        home.wait_state(*id, RunState::Running, T).await;
    }
    home.kill_daemon();
    // Decided while no daemon runs: the stop request and its reason are in the store.
    let fed = Fed(HashMap::from([
        (members[0], vec![1.0, 0.9, 0.8]),
        (members[1], vec![1.0, 0.5, 0.4]),
        (members[2], vec![1.0, 0.97, 0.95]),
        (members[3], vec![1.0, 0.3, 0.2]),
    ]));
    let decisions = SweepDecider::default().pass(&service, &fed).await.unwrap();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(home.run(members[2]).await.state, RunState::Stopping);
    // A fresh decider (a restarted daemon's) finds it decided.
    assert!(SweepDecider::default().pass(&service, &fed).await.unwrap().is_empty());
    home.start_daemon();
    let (stopped, _) = home.wait_settled(members[2], T).await;
    assert_eq!(stopped.state, RunState::Stopped);
    assert!(stopped.reason.as_deref().is_some_and(|r| r.starts_with("early-terminated by sweep")));
    let stops = home.messages(members[2]).await.into_iter().filter(|m| m.starts_with("stop: ")).count();
    assert_eq!(stops, 1, "stopped once");
    for id in [members[0], members[1], members[3]] {
        assert_eq!(home.run(id).await.state, RunState::Running);
    }
}

/// A sweep run to its end by the daemon (which the caller started): four members of `gated`
/// compared by `train/loss`; member 2 stopped by hyperband after its third reading, the others
/// completed with six readings each, member 3 the best (0.05).
pub(crate) struct FinishedSweep {
    pub sweep: Uuid,
    pub members: Vec<Uuid>,
    /// Member 2's reason.
    pub reason: String,
}

pub(crate) async fn finished_sweep(home: &mut TestHome) -> FinishedSweep {
    home.workflow("gated", &gated(home));
    let file = write(
        home,
        "hb.yaml",
        "method: grid\nworkflow: gated\nmetric: {name: train/loss}\n\
         early_terminate: {type: hyperband, min_iter: 2, eta: 2, strict: false}\n\
         parameters:\n  lr: {values: [0.1, 0.2, 0.3, 0.4]}\n",
    );
    let (sweep, members) = start(home, &file);
    let service = home.service().await;
    for id in &members {
        home.wait_state(*id, RunState::Running, T).await;
    }
    let rows = |values: &[f64], from: i64| -> Vec<lachesis::model::MetricRow> {
        values
            .iter()
            .enumerate()
            .map(|(i, loss)| lachesis::model::MetricRow {
                step: from + i as i64,
                loss: Some(*loss),
                recorded_at: lachesis::model::now_millis(),
                ..Default::default()
            })
            .collect()
    };
    let losses = [[1.0, 0.9, 0.8], [1.0, 0.5, 0.4], [1.0, 0.97, 0.95], [1.0, 0.3, 0.2]];
    for (id, series) in members.iter().zip(losses) {
        service.put_metric_rows_as_given(*id, &rows(&series, 1)).await.unwrap();
    }
    let (stopped, _) = home.wait_settled(members[2], T).await;
    assert_eq!(stopped.state, RunState::Stopped, "{:?}", stopped.reason);
    std::fs::write(home.path().join("gate"), "").unwrap();
    let later = [[0.7, 0.6, 0.5], [0.35, 0.3, 0.25], [0.15, 0.1, 0.05]];
    for (id, series) in [members[0], members[1], members[3]].into_iter().zip(later) {
        let (run, _) = home.wait_settled(id, T).await;
        assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
        // Readings the trainer logged last, read after it ended.
        service.put_metric_rows_as_given(id, &rows(&series, 4)).await.unwrap();
    }
    wait_for("the sweep to be done", T, || {
        let service = service.clone();
        async move {
            let sweep = service.resolve_sweep(&sweep.to_string()).await.unwrap();
            (sweep.state == SweepState::Done).then_some(())
        }
    })
    .await;
    FinishedSweep { sweep, members, reason: stopped.reason.unwrap_or_default() }
}

/// The dashboard's sweep pages over HTTP, behind the token: the list, the leaderboard with the
/// winner and the early-terminated member's band, the chart with every member's curve and a
/// cross where the stopped one was stopped; linked from the navigation and a member's page.
#[tokio::test]
async fn the_dashboard_shows_a_sweeps_leaderboard_and_every_members_curve() {
    let mut home = TestHome::new();
    let api = crate::http::start_with(&mut home, "127.0.0.1", None, &[]).await;
    let FinishedSweep { sweep, members, reason } = finished_sweep(&mut home).await;
    let short = &sweep.to_string()[..8];
    let html = |answer: (reqwest::StatusCode, serde_json::Value)| -> (u16, String) {
        (answer.0.as_u16(), answer.1.as_str().map(str::to_string).unwrap_or_else(|| answer.1.to_string()))
    };

    let (status, list) = html(api.get("/ui/sweeps").await);
    assert_eq!(status, 200, "{list}");
    assert!(list.contains("href=\"/ui/sweeps\" class=\"active\""), "the navigation links it: {list}");
    assert!(
        list.contains(&format!("<tr data-sweep=\"{sweep}\"><td><a href=\"/ui/sweeps/{sweep}\">{short}</a>")),
        "{list}"
    );
    assert!(list.contains("badge ok\">done") && list.contains("4 (3 completed, 1 stopped)"), "{list}");

    let (status, page) = html(api.get(&format!("/ui/sweeps/{short}")).await);
    assert_eq!(status, 200, "{page}");
    // The leaderboard: best first, the winner marked, every member linked to its run.
    let rows: Vec<&str> = page.split("<tr data-k=\"").skip(1).collect();
    let order: Vec<&str> = rows.iter().map(|r| &r[..1]).collect();
    assert_eq!(order, vec!["3", "1", "0", "2"], "{page}");
    assert!(rows[0].contains("class=\"winner\"") && rows[0].contains("★ winner"), "{}", rows[0]);
    assert!(rows[0].contains("<td class=\"best\">0.05</td>"), "{}", rows[0]);
    assert!(rows[3].contains("class=\"early-terminated\"") && rows[3].contains(&reason), "{}", rows[3]);
    assert!(reason.contains("band-2 threshold"), "the band it was stopped at: {reason}");
    for (k, id) in members.iter().enumerate() {
        let row = rows.iter().find(|r| r.starts_with(&k.to_string())).unwrap();
        assert!(row.contains(&format!("href=\"/ui/runs/{id}\"")), "member {k}: {row}");
        assert!(row.contains(&format!("<td class=\"parameter\">0.{}</td>", k + 1)), "member {k}: {row}");
    }
    // The chart: a curve per member, the stopped one dashed and crossed at its last reading,
    // the winner's best point marked, a legend entry per member.
    let chart = &page[page.find("<svg class=\"chart members\"").expect("a chart")..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    assert_eq!(chart.matches("<path class=\"member").count(), 4, "{chart}");
    assert!(chart.contains("class=\"member stopped\" data-k=\"2\""), "{chart}");
    assert!(chart.contains("class=\"member winner\" data-k=\"3\""), "{chart}");
    assert!(chart.contains("class=\"stop-marker\" data-k=\"2\" data-step=\"3\""), "{chart}");
    assert!(chart.contains("class=\"winner-marker\" data-k=\"3\""), "{chart}");
    for k in 0..4 {
        assert!(chart.contains(&format!("<g class=\"key\" data-k=\"{k}\">")), "member {k}: {chart}");
    }

    // A member's run page links its sweep.
    let (_, run_page) = html(api.get(&format!("/ui/runs/{}", members[2])).await);
    assert!(
        run_page.contains(&format!("member 2 of <a href=\"/ui/sweeps/{sweep}\">sweep {short}</a>")),
        "{run_page}"
    );
    // No sweep, no page; no token, no data.
    let (status, missing) = html(api.get("/ui/sweeps/ffffffff").await);
    assert_eq!(status, 404);
    assert!(missing.starts_with("<!doctype html>"), "a page, in the page frame: {missing}");
    assert!(missing.contains("<p class=\"error\">no sweep matches &#39;ffffffff&#39;</p>"), "{missing}");
    let anonymous = lachesis::http_client::builder().build().unwrap();
    let answer = anonymous.get(format!("{}/ui/sweeps/{sweep}", api.base())).send().await.unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::UNAUTHORIZED);
    let text = answer.text().await.unwrap();
    assert!(text.contains("Sign in") && !text.contains(short), "{text}");
}

/// Each file a user could get wrong is refused in one line through the CLI, and nothing of it
/// is queued: W&B's format broken, a grid cut by `run_cap` without saying so, a metric the
/// workflow can never report.
#[tokio::test]
async fn bad_sweeps_get_one_line_and_queue_nothing() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    home.workflow("quiet", "name: quiet\nvars: {lr: '0.1'}\nstages:\n  - {name: main, argv: ['true']}\n");
    home.workflow(
        "patterned",
        "name: patterned\nvars: {lr: '0.1'}\nstages:\n  - {name: main, argv: ['true']}\n\
         metrics:\n  log: {stage: main, pattern: 'step (?P<step>\\d+) reward=(?P<reward>\\S+)'}\n",
    );
    let grid = "parameters:\n  lr: {values: [0.1, 0.2, 0.3]}\n";
    let table = [
        (
            format!("method: hill\nworkflow: gated\n{grid}"),
            "method: unknown method 'hill' (expected grid, random or bayes)",
        ),
        (
            "method: random\nworkflow: gated\nrun_cap: 2\nparameters:\n  lr: {distribution: lognormal}\n"
                .into(),
            "parameters.lr: unknown distribution 'lognormal'",
        ),
        (
            "method: random\nworkflow: gated\nrun_cap: 2\nparameters:\n  lr: {min: 0.2, max: 0.1}\n".into(),
            "parameters.lr: min 0.2 is not below max 0.1",
        ),
        (
            format!(
                "method: grid\nworkflow: gated\nmetric: {{name: loss}}\n\
                 early_terminate: {{type: hyperband, min_iter: 3, eta: 1}}\n{grid}"
            ),
            "early_terminate.eta: 1.0 must be above 1",
        ),
        (
            format!("method: grid\nworkflow: gated\nrun_cap: 0\n{grid}"),
            "run_cap: 0 is not between 1 and 10000",
        ),
        (
            format!("method: grid\nworkflow: gated\nrun_cap: 10001\n{grid}"),
            "run_cap: 10001 is not between 1 and 10000",
        ),
        (
            format!("method: grid\nworkflow: gated\nrun_cap: 2\n{grid}"),
            "run_cap: the grid has 3 points and run_cap is 2; add `grid: first` to run its first 2",
        ),
        (
            format!("method: grid\nworkflow: quiet\nmetric: {{name: loss}}\n{grid}"),
            "metric.name: workflow 'quiet' reports no metrics, so no member could report 'loss'",
        ),
        (
            format!("method: grid\nworkflow: patterned\nmetric: {{name: loss}}\n{grid}"),
            "metric.name: workflow 'patterned' never reports 'loss': its metrics are its log pattern's groups (reward)",
        ),
    ];
    for (i, (text, want)) in table.iter().enumerate() {
        let file = write(&home, &format!("bad{i}.yaml"), text);
        let out = home.cli(&["sweep", "start", &file]);
        let err = stderr(&out);
        assert!(!out.status.success(), "{text}");
        assert!(err.contains(want) && err.trim().lines().count() == 1 && !err.contains("panicked"), "{err}");
    }
    assert!(home.cli_ok(&["sweep", "list"]).contains("no sweeps"));
    assert!(home.cli_ok(&["run", "list"]).contains("no runs"));
    // Said so, the grid's first points run; a metric a log pattern names, or one a JSONL file
    // may hold, is taken.
    let first = write(
        &home,
        "first.yaml",
        &format!("method: grid\nworkflow: gated\nrun_cap: 2\ngrid: first\n{grid}"),
    );
    let (_, members) = start(&home, &first);
    let lrs: Vec<String> = {
        let mut lrs = Vec::new();
        for id in members {
            lrs.push(home.run(id).await.params.vars["lr"].clone());
        }
        lrs
    };
    assert_eq!(lrs, ["0.1", "0.2"]);
    for workflow in ["patterned", "gated"] {
        let metric = if workflow == "patterned" { "reward" } else { "loss" };
        let file = write(
            &home,
            &format!("{workflow}.yaml"),
            &format!("method: grid\nworkflow: {workflow}\nmetric: {{name: {metric}}}\n{grid}"),
        );
        assert_eq!(start(&home, &file).1.len(), 3, "{workflow}");
    }
}

/// A member whose trainer writes the sweep's metric as text: said once per attempt, as an
/// event on the member, and by `sweep status` while the sweep waits for a number.
#[tokio::test]
async fn a_metric_written_as_text_is_said_once_and_shown_while_the_sweep_waits() {
    let mut home = TestHome::new();
    let gate = home.path().join("gate");
    let script = write(
        &home,
        "texty.sh",
        &format!(
            "for s in 1 2 3; do printf '{{\"step\": %d, \"loss\": \"0.%d\", \"kl\": 1}}\\n' $s $s >> \"$1/metrics.jsonl\"; done\n\
             while [ ! -e '{}' ]; do sleep 0.05; done\n",
            gate.display()
        ),
    );
    home.workflow(
        "texty",
        &format!(
            "name: texty\nvars: {{lr: '0.1'}}\nstages:\n  - {{name: trainer, argv: [sh, '{script}', '{{run_dir}}']}}\n\
             metrics:\n  jsonl: {{file: metrics.jsonl, step: /step}}\nstop_grace: 2s\n"
        ),
    );
    let file = write(
        &home,
        "text.yaml",
        "method: grid\nworkflow: texty\nmetric: {name: loss}\nparameters:\n  lr: {values: [0.1]}\n",
    );
    let (sweep, members) = start(&home, &file);
    home.start_daemon();
    let service = home.service().await;
    let member = members[0];
    wait_for("the three rows to be read", T, || {
        let service = service.clone();
        async move { (service.run_metric_series(member, "kl").await.unwrap().len() == 3).then_some(()) }
    })
    .await;
    let said = "metrics: loss at step 1 is not a number (\"0.1\"): sweep";
    let notes = wait_for("the note", T, || {
        let mut home_messages = Vec::new();
        let service = service.clone();
        async move {
            let (_, events) = service.run_events(&member.to_string()).await.unwrap();
            home_messages
                .extend(events.into_iter().map(|e| e.message).filter(|m| m.starts_with("metrics: loss")));
            (!home_messages.is_empty()).then_some(home_messages)
        }
    })
    .await;
    assert_eq!(notes.len(), 1, "said once: {notes:?}");
    assert!(notes[0].starts_with(said), "{notes:?}");
    assert!(
        service.run_metric_series(member, "loss").await.unwrap().is_empty(),
        "no reading is made of text"
    );
    let board = home.cli_ok(&["sweep", "status", &sweep.to_string()]);
    assert!(
        board.contains(
            "waiting   no member has reported loss as a number yet (member 0: loss at step 1 is not a number (\"0.1\"))"
        ),
        "{board}"
    );
    std::fs::write(&gate, "").unwrap();
    let (run, _) = home.wait_settled(member, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
}

/// Readings the W&B poller records are news to the decider too: with its tick an hour away,
/// the member whose W&B history reaches the target ends the sweep's new members at once.
#[tokio::test]
async fn a_wandb_reading_that_reaches_the_target_is_decided_on_at_once() {
    use serde_json::json;
    let mut home = TestHome::new();
    let logged = gated(&home).replacen("name: gated", "name: logged\ncredentials: [WANDB_API_KEY]", 1);
    home.workflow("logged", &logged);
    home.environ.extend([
        ("WANDB_API_KEY".to_string(), "wandb-test-key-0123456789".to_string()),
        ("WANDB_ENTITY".to_string(), "lab".to_string()),
        ("LACHESIS_WANDB_INTERVAL".to_string(), "1s".to_string()),
    ]);
    let file = write(
        &home,
        "wandb.yaml",
        "method: grid\nworkflow: logged\nmax_live: 1\nmetric: {name: train/loss, target: 0.5}\n\
         parameters:\n  lr: {values: [0.1, 0.2]}\n",
    );
    let (sweep, members) = start(&home, &file);
    let short = &members[0].simple().to_string()[..8];
    // One answer serves both queries: the run lookup reads project.runs, the history project.run.
    let rows: Vec<serde_json::Value> = [1.0, 0.8, 0.4]
        .iter()
        .enumerate()
        .map(|(step, loss)| json!({"_step": step, "train/loss": loss}))
        .collect();
    let reply = json!({ "data": { "project": {
        "runs": { "edges": [{ "node": {
            "name": "abc123", "displayName": format!("run-{short}"), "state": "running",
            "summaryMetrics": r#"{"_step": 2}"#, "historyKeys": "{}" } }] },
        "run": { "sampledHistory": [rows] },
    } } });
    let wandb = crate::support::Receiver::start_with(vec![], reply.to_string()).await;
    home.environ.push(("WANDB_BASE_URL".to_string(), wandb.url.trim_end_matches("/hook").to_string()));
    home.start_daemon_with(&["--sweep-interval", "1h"]);
    let (cancelled, _) = home.wait_settled(members[1], T).await;
    let why = format!(
        "cancelled: sweep {} member 0 reached the target: train/loss 0.4 (target 0.5)",
        &sweep.to_string()[..8]
    );
    assert_eq!((cancelled.state, cancelled.reason.as_deref()), (RunState::Stopped, Some(why.as_str())));
    assert_eq!(home.run(members[0]).await.state, RunState::Running, "the member at the target runs on");
    std::fs::write(home.path().join("gate"), "").unwrap();
    let (run, _) = home.wait_settled(members[0], T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    drop(wandb);
}

/// A W&B sweep program: records its argv, its W&B environment and its config file, then logs
/// a reward that grows with its learning rate.
const PROGRAM: &str = r#"import json, os, sys
args = sys.argv[1:]
lr = float([a for a in args if a.startswith("--lr=")][0].split("=", 1)[1])
with open(os.environ["WANDB_SWEEP_PARAM_PATH"]) as f:
    config = f.read()
print("seen " + json.dumps({"argv": args, "cwd": os.getcwd(), "sweep": os.environ["WANDB_SWEEP_ID"],
      "run": os.environ["WANDB_RUN_ID"], "name": os.environ["WANDB_NAME"], "project": os.environ.get("WANDB_PROJECT"), "config": config}))
for step in range(3):
    print(f"step {step} reward={lr * (step + 1)}", flush=True)
"#;

#[tokio::test]
async fn a_w_and_b_program_sweep_runs_each_member_as_the_agent_would() {
    let mut home = TestHome::new();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("train.py"), PROGRAM).unwrap();
    let file = project.join("sweep.yaml");
    std::fs::write(
        &file,
        "program: train.py\nmethod: grid\nproject: rl\nmetric: {name: reward, goal: maximize}\n\
         metrics: {log: {stage: program, pattern: 'step (?P<step>\\d+) reward=(?P<reward>\\S+)'}}\n\
         parameters:\n  lr: {values: [0.1, 0.00001]}\n  tag: {value: 'a b'}\n",
    )
    .unwrap();
    home.start_daemon();
    let (sweep, members) = start(&home, &file.to_string_lossy());
    assert_eq!(members.len(), 2);
    let mut seen = Vec::new();
    for id in &members {
        let (run, _) = home.wait_settled(*id, T).await;
        assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
        assert_eq!(run.workflow, "wandb-program");
        let log = std::fs::read_to_string(run.run_dir.join("program.log")).unwrap();
        let line = log.lines().find_map(|l| l.strip_prefix("seen ")).unwrap_or_else(|| panic!("{log}"));
        seen.push(serde_json::from_str::<serde_json::Value>(line).unwrap());
    }
    // `--name=value` as Python's str writes it, in the program's own directory, with W&B's ids.
    assert_eq!(seen[0]["argv"], serde_json::json!(["--lr=0.1", "--tag=a b"]));
    assert_eq!(seen[1]["argv"], serde_json::json!(["--lr=1e-05", "--tag=a b"]));
    assert_eq!(seen[0]["cwd"], std::fs::canonicalize(&project).unwrap().to_string_lossy().as_ref());
    assert_eq!(seen[0]["sweep"], &sweep.to_string()[..8]);
    assert_eq!(seen[0]["project"], "rl");
    assert_eq!(seen[0]["run"], format!("{}-program", &members[0].to_string()[..8]));
    // The display name the daemon finds the member's W&B run by.
    assert_eq!(seen[0]["name"], format!("run-{}", &members[0].to_string()[..8]));
    assert_eq!(
        seen[1]["config"],
        "wandb_version: 1\n\"lr\":\n  value: 1.0e-05\n\"tag\":\n  value: \"a b\"\n"
    );
    // Its metric, read from the program's log, ranks the members.
    let board: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "status", &sweep.to_string()[..8], "--json"])).unwrap();
    assert_eq!(board["counts"]["completed"], 2, "{board:#}");
    let report = home.cli_ok(&["run", "status", &members[0].to_string()]);
    assert!(report.contains("reward 0.300 (step 2)"), "{report}");
    home.kill_daemon();
}

#[tokio::test]
async fn a_program_sweep_that_cannot_run_as_written_is_refused_with_nothing_queued() {
    let mut home = TestHome::new();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(home.path().join("outside.py"), "print(1)\n").unwrap();
    std::os::unix::fs::symlink(home.path().join("outside.py"), project.join("link.py")).unwrap();
    let grid = "method: grid\nmetrics: {log: {stage: program, pattern: 'r=(?P<r>\\S+)'}}\nparameters: {lr: {values: [1]}}\n";
    for (program, says) in [
        ("program: missing.py\n", "program: "),
        ("program: link.py\n", "leads out of"),
        ("program: ../outside.py\n", "leaves the sweep's directory"),
        ("program: x.py\ncommand: ['${interpreter}', '${nope}']\n", "unknown macro '${nope}'"),
    ] {
        let file = project.join("sweep.yaml");
        std::fs::write(&file, format!("{program}{grid}")).unwrap();
        let out = home.cli(&["sweep", "start", &file.to_string_lossy()]);
        let err = stderr(&out);
        assert!(!out.status.success() && err.contains(says), "{program}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    // Its metric from W&B: read in the sweep's project, which it must name.
    std::fs::write(project.join("t.py"), "print(1)\n").unwrap();
    let file = project.join("wandb.yaml");
    std::fs::write(&file, "program: t.py\nmethod: grid\nparameters: {lr: {values: [1]}}\n").unwrap();
    let err = stderr(&home.cli(&["sweep", "start", &file.to_string_lossy()]));
    assert!(err.contains("project: missing"), "{err}");
    assert!(home.cli_ok(&["sweep", "list", "--json"]).contains("[]"));
    // Without a file, the program's directory is said in the file.
    let service = home.service().await;
    let text = format!("program: x.py\n{grid}");
    let err = service.submit_sweep(&text, None, Default::default()).await.unwrap_err().to_string();
    assert!(err.contains("directory: missing"), "{err}");
}
