//! A bayes sweep run by the daemon: its first `max_live` members queued at submission, each
//! later one suggested when a member ends, never more than `max_live` open nor more than
//! `run_cap` in all, every member's values shown; and a daemon killed between a suggestion and
//! its member (before the write, inside its transaction) loses neither and makes neither twice;
//! a stopped bayes sweep resumed re-runs what its stop ended and goes on up to its run_cap.

use std::collections::BTreeSet;
use std::time::Duration;

use lachesis::failpoint::Failpoint;
use lachesis::model::RunState;
use lachesis::model::sweep::SweepState;
use lachesis::service::Service;
use uuid::Uuid;

use crate::support::{TestHome, wait_for};

const T: Duration = Duration::from_secs(30);

/// A member runs until the test creates `go` in its run directory; its readings come from
/// the test (its metrics file is never written).
const QUAD: &str = r#"name: quad
vars: {x: "0.5", opt: "a"}
stages:
  - name: trainer
    argv: [sh, -c, 'while [ ! -e "{run_dir}/go" ]; do sleep 0.05; done; echo x={x} opt={opt}']
metrics:
  jsonl: {file: metrics.jsonl, step: /step}
stop_grace: 2s
"#;

const SWEEP: &str = "method: bayes\nworkflow: quad\nmetric: {name: loss}\nrun_cap: 6\nmax_live: 2\nseed: 3\n\
                     parameters:\n  x: {min: 0.0, max: 1.0}\n  opt: {values: [a, b]}\n";

fn start(home: &TestHome) -> (Uuid, Vec<Uuid>) {
    let path = home.path().join("bayes.yaml");
    std::fs::write(&path, SWEEP).unwrap();
    home.start_sweep(path.to_str().unwrap())
}

/// The sweep's members (k, run, state), in order of k.
async fn members(service: &Service, sweep: Uuid) -> Vec<(u64, Uuid, RunState)> {
    let board = service.sweep_status(&sweep.to_string()).await.unwrap();
    let mut members: Vec<(u64, Uuid, RunState)> =
        board.leaderboard.iter().map(|m| (m.k, m.run, m.state)).collect();
    members.sort();
    members
}

/// Feeds member `run` its reading (a function of its values) and lets it end.
async fn finish(home: &mut TestHome, service: &Service, run: Uuid) {
    let member = home.run(run).await;
    let x: f64 = member.params.vars["x"].parse().unwrap();
    let opt = &member.params.vars["opt"];
    let loss = (x - 0.3).powi(2) + if opt == "a" { 0.0 } else { 0.2 };
    let row = lachesis::model::MetricRow {
        step: 1,
        loss: Some(loss),
        recorded_at: lachesis::model::now_millis(),
        ..Default::default()
    };
    service.put_metric_rows_as_given(run, &[row]).await.unwrap();
    std::fs::write(member.run_dir.join("go"), "").unwrap();
    let (ended, _) = home.wait_settled(run, T).await;
    assert_eq!(ended.state, RunState::Completed, "{:?}", ended.reason);
}

async fn wait_members(service: &Service, sweep: Uuid, count: usize) -> Vec<(u64, Uuid, RunState)> {
    wait_for(&format!("the sweep to have {count} members"), T, || {
        let service = service.clone();
        async move {
            let members = members(&service, sweep).await;
            (members.len() == count).then_some(members)
        }
    })
    .await
}

#[tokio::test]
async fn a_bayes_sweep_suggests_each_member_as_a_slot_opens() {
    let mut home = TestHome::new();
    home.workflow("quad", QUAD);
    let (sweep, first) = start(&home);
    assert_eq!(first.len(), 2, "max_live members at once");
    home.start_daemon_with(&["--sweep-interval", "200ms"]);
    let service = home.service().await;
    let mut finished = BTreeSet::new();
    for count in 2..=6 {
        let members = wait_members(&service, sweep, count).await;
        let open: Vec<Uuid> = members.iter().filter(|m| !m.2.is_terminal()).map(|m| m.1).collect();
        assert!(open.len() <= 2, "at most max_live open: {members:?}");
        let next = open.into_iter().find(|id| !finished.contains(id)).unwrap();
        home.wait_state(next, RunState::Running, T).await;
        finish(&mut home, &service, next).await;
        finished.insert(next);
    }
    // The last members end; no seventh is made.
    for (_, id, _) in members(&service, sweep).await {
        if !finished.contains(&id) {
            home.wait_state(id, RunState::Running, T).await;
            finish(&mut home, &service, id).await;
        }
    }
    wait_for("the sweep to be done", T, || {
        let service = service.clone();
        async move {
            let sweep = service.resolve_sweep(&sweep.to_string()).await.unwrap();
            (sweep.state == SweepState::Done).then_some(())
        }
    })
    .await;
    let board = service.sweep_status(&sweep.to_string()).await.unwrap();
    assert_eq!(board.leaderboard.len(), 6);
    assert_eq!(board.sweep.method.as_deref(), Some("bayes"));
    let configs: BTreeSet<String> = board
        .leaderboard
        .iter()
        .map(|m| {
            assert!(m.parameters["x"].is_f64() && m.parameters["opt"].is_string(), "{:?}", m.parameters);
            serde_json::to_string(&m.parameters).unwrap()
        })
        .collect();
    assert_eq!(configs.len(), 6, "six different configurations");
    let status = home.cli_ok(&["sweep", "status", &sweep.to_string()[..8]]);
    assert!(status.contains("bayes"), "{status}");
}

#[tokio::test]
async fn a_daemon_killed_between_a_suggestion_and_its_member_makes_it_once() {
    let mut home = TestHome::new();
    home.workflow("quad", QUAD);
    let (sweep, first) = start(&home);
    let service = home.service().await;
    // Armed for this daemon only: it dies once it has suggested member 2, before writing it.
    home.environ.push((lachesis::failpoint::VARIABLE.into(), Failpoint::SweepSuggested.as_str().into()));
    home.start_daemon_with(&["--sweep-interval", "200ms"]);
    home.environ.retain(|(k, _)| k != lachesis::failpoint::VARIABLE);
    home.wait_state(first[0], RunState::Running, T).await;
    let member = home.run(first[0]).await;
    let row = lachesis::model::MetricRow {
        step: 1,
        loss: Some(0.5),
        recorded_at: lachesis::model::now_millis(),
        ..Default::default()
    };
    service.put_metric_rows_as_given(first[0], &[row]).await.unwrap();
    std::fs::write(member.run_dir.join("go"), "").unwrap();
    home.wait_daemon_killed(T).await;
    assert_eq!(members(&service, sweep).await.len(), 2, "nothing of member 2 was written");
    // The next daemon dies inside member 2's transaction, before its commit.
    home.environ
        .push((lachesis::failpoint::VARIABLE.into(), Failpoint::SweepMemberUncommitted.as_str().into()));
    home.start_daemon_with(&["--sweep-interval", "200ms"]);
    home.environ.retain(|(k, _)| k != lachesis::failpoint::VARIABLE);
    home.wait_daemon_killed(T).await;
    assert_eq!(members(&service, sweep).await.len(), 2, "member 2's transaction left nothing");
    home.start_daemon_with(&["--sweep-interval", "200ms"]);
    let members = wait_members(&service, sweep, 3).await;
    assert_eq!(members.iter().map(|m| m.0).collect::<Vec<_>>(), vec![0, 1, 2]);
    // Member 2 runs: the one member 2, with members 1 and 2 filling max_live.
    home.wait_state(members[2].1, RunState::Running, T).await;
    assert_eq!(self::members(&service, sweep).await.len(), 3);
}

/// A bayes sweep stopped after its first member ended resumes: its member the stop ended runs
/// again, and new members are suggested as slots open up to its run_cap.
#[tokio::test]
async fn a_stopped_bayes_sweep_resumes_up_to_its_run_cap() {
    let mut home = TestHome::new();
    home.workflow("quad", QUAD);
    let (sweep, first) = start(&home);
    home.start_daemon_with(&["--sweep-interval", "200ms"]);
    let service = home.service().await;
    home.wait_state(first[0], RunState::Running, T).await;
    finish(&mut home, &service, first[0]).await;
    // Member 2 is suggested for the slot member 0 left; then the sweep is stopped.
    wait_members(&service, sweep, 3).await;
    home.cli_ok(&["sweep", "stop", &sweep.to_string()]);
    for (_, id, _) in members(&service, sweep).await {
        home.wait_settled(id, T).await;
    }
    home.cli_ok(&["sweep", "resume", &sweep.to_string()]);
    let resumed = members(&service, sweep).await;
    assert_eq!(resumed[0].2, RunState::Completed, "a completed member keeps its result");
    for (k, id, _) in &resumed[1..] {
        assert_eq!(home.run(*id).await.attempt, 2, "member {k}, which the stop ended, runs again");
    }
    // Every open member ends in turn; the sweep makes its six members, no more, and ends.
    let mut finished: BTreeSet<Uuid> = [first[0]].into();
    for count in 3..=6 {
        let members = wait_members(&service, sweep, count).await;
        let next = members.iter().find(|m| !m.2.is_terminal() && !finished.contains(&m.1)).unwrap().1;
        home.wait_state(next, RunState::Running, T).await;
        finish(&mut home, &service, next).await;
        finished.insert(next);
    }
    for (_, id, _) in members(&service, sweep).await {
        if !finished.contains(&id) {
            home.wait_state(id, RunState::Running, T).await;
            finish(&mut home, &service, id).await;
        }
    }
    wait_for("the sweep to be done", T, || {
        let service = service.clone();
        async move {
            (service.resolve_sweep(&sweep.to_string()).await.unwrap().state == SweepState::Done).then_some(())
        }
    })
    .await;
    assert_eq!(members(&service, sweep).await.len(), 6);
}
