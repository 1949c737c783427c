//! Several daemons on one PostgreSQL store: claims, reaping lost nodes, retries, wake-ups
//! (several daemons can't share the embedded store). The store-level suite of the same rules is
//! a unit test of the store (src/engine/store/tests/nodes.rs).

use std::collections::HashMap;
use std::time::Duration;

use lachesis::model::{Exit, RunState};
use uuid::Uuid;

use crate::support::{TestHome, fork_server_of, fresh_postgres, processes_mentioning, wait_for};

const RETRY_ON_NODE_LOSS: &str = "retry: {max_attempts: 2, backoff: 100ms}\n";

#[tokio::test]
async fn postgres_backs_a_real_daemon() {
    let Some(url) = fresh_postgres().await else {
        return;
    };
    let mut home = TestHome::new();
    home.database_url = Some(url);
    home.start_daemon();
    let id = home.submit(&["--workflow", "demo", "--var", "steps=1"]);
    let (run, stages) = home.wait_settled(id, Duration::from_secs(30)).await;
    assert_eq!(run.state, RunState::Completed, "{:?}\n{}", run.reason, home.daemon_log());
    assert!(stages.iter().all(|s| s.record.exit == Some(Exit::Code(0))));
    let out = home.cli(&["daemon"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another lachesis daemon is already running as node")
    );
}

/// `n` homes, each for one daemon, sharing one fresh PostgreSQL database.
pub async fn cluster(n: usize) -> Option<Vec<TestHome>> {
    let url = fresh_postgres().await?;
    Some(
        (0..n)
            .map(|_| {
                let mut home = TestHome::new();
                home.database_url = Some(url.clone());
                home
            })
            .collect(),
    )
}

/// Nodes meant to die get a short lease (the tests wait it out); the others a long one, so a
/// busy test machine can't make them look lost.
pub const SHORT: &str = "2s";
pub const LONG: &str = "30s";

pub fn start_node(home: &mut TestHome, node: &str, lease: &str, extra: &[&str]) {
    let mut args = vec!["--node", node, "--lease", lease, "--max-parallel", "2"];
    args.extend_from_slice(extra);
    home.start_daemon_with(&args);
}

/// Who claimed `id`, from its events: one node per claim.
async fn claimers(home: &mut TestHome, id: Uuid) -> Vec<String> {
    home.messages(id)
        .await
        .into_iter()
        .filter_map(|m| Some(m.strip_prefix("claim by node ")?.split(' ').next()?.to_string()))
        .collect()
}

#[tokio::test]
async fn three_daemons_share_one_queue_and_run_each_run_once() {
    let Some(mut homes) = cluster(3).await else { return };
    let ran = homes[0].path().join("ran.txt");
    let stage = format!(
        "stages:\n  - name: work\n    argv: [sh, -c, 'echo \"$0\" >> {}; sleep 0.2', '{{run_id}}']\n",
        ran.display()
    );
    homes[0].workflow("short", &format!("name: short\n{stage}"));
    homes[0].workflow("pinned", &format!("name: pinned\nnode_labels: {{gpu: h100}}\n{stage}"));
    start_node(&mut homes[0], "n1", LONG, &[]);
    start_node(&mut homes[1], "n2", LONG, &[]);
    start_node(&mut homes[2], "n3", LONG, &["--label", "gpu=h100"]);
    let mut ids: Vec<Uuid> = (0..30).map(|_| homes[0].submit(&["--workflow", "short"])).collect();
    let pinned: Vec<Uuid> = (0..3).map(|_| homes[0].submit(&["--workflow", "pinned"])).collect();
    ids.extend(&pinned);
    for id in &ids {
        let (run, _) = homes[0].wait_settled(*id, Duration::from_secs(90)).await;
        assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    }
    // Exactly once: one claim each (from the events) and one execution each (from the stage).
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for id in &ids {
        let claims = claimers(&mut homes[0], *id).await;
        assert_eq!(claims.len(), 1, "run {id} claimed {claims:?}");
        *per_node.entry(claims[0].clone()).or_default() += 1;
    }
    let lines = std::fs::read_to_string(&ran).unwrap();
    for id in &ids {
        assert_eq!(lines.lines().filter(|l| *l == id.to_string()).count(), 1, "run {id} ran once");
    }
    assert_eq!(lines.lines().count(), ids.len());
    assert!(per_node.len() == 3 && per_node.values().all(|n| *n >= 2), "work spread: {per_node:?}");
    for id in &pinned {
        assert_eq!(claimers(&mut homes[0], *id).await, ["n3"], "pinned to gpu=h100");
    }
    // A run pinned to labels no node has says what it waits for.
    homes[0].workflow("nowhere", &format!("name: nowhere\nnode_labels: {{gpu: b200}}\n{stage}"));
    let stuck = homes[0].submit(&["--workflow", "nowhere"]);
    let status = homes[0].cli_ok(&["run", "status", &stuck.to_string()]);
    assert!(
        status.contains("waiting   for a node labelled gpu=b200: none that is up has these labels"),
        "{status}"
    );
    homes[0].cli_ok(&["run", "stop", &stuck.to_string()]);
    // The nodes as an operator sees them.
    let nodes: serde_json::Value =
        serde_json::from_str(&homes[1].cli_ok(&["node", "list", "--json"])).unwrap();
    let listed: Vec<(&str, &str)> = nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n["health"].as_str().unwrap()))
        .collect();
    assert_eq!(listed, [("n1", "up"), ("n2", "up"), ("n3", "up")]);
    assert_eq!(nodes[2]["labels"]["gpu"], "h100");
    let table = homes[1].cli_ok(&["node", "list"]);
    assert!(table.contains("gpu=h100") && table.contains("HEARTBEAT"), "{table}");
}

#[tokio::test]
async fn a_killed_nodes_runs_are_reaped_and_its_stale_claims_rejected_when_it_returns() {
    let Some(mut homes) = cluster(3).await else { return };
    let stage = "stages:\n  - {name: work, argv: [sleep, '300']}\nstop_grace: 2s\n";
    homes[2].workflow("long", &format!("name: long\n{stage}"));
    homes[2].workflow("long-retry", &format!("name: long-retry\n{RETRY_ON_NODE_LOSS}{stage}"));
    // Node c alone first, so it owns both runs.
    start_node(&mut homes[2], "c", SHORT, &[]);
    let failing = homes[2].submit(&["--workflow", "long"]);
    let retried = homes[2].submit(&["--workflow", "long-retry"]);
    homes[2].wait_state(failing, RunState::Running, Duration::from_secs(20)).await;
    homes[2].wait_state(retried, RunState::Running, Duration::from_secs(20)).await;
    start_node(&mut homes[0], "a", LONG, &[]);
    start_node(&mut homes[1], "b", LONG, &[]);

    homes[2].kill_daemon();
    let c_home = homes[2].path().to_path_buf();
    assert_eq!(processes_mentioning(&c_home).len(), 4, "two shims and two stages outlive their daemon");

    // After c's lease (2s) a survivor settles its runs: one fails, one is queued again.
    let failed = homes[0].wait_state(failing, RunState::Failed, Duration::from_secs(30)).await;
    let reason = failed.reason.unwrap_or_default();
    assert!(reason.starts_with("node lost: node 'c' sent no heartbeat"), "{reason}");
    let service = homes[0].service().await;
    let again = wait_for("the retried run's second attempt to run", Duration::from_secs(30), || async {
        let run = service.run(retried).await.unwrap().unwrap();
        (run.attempt == 2 && run.state == RunState::Running).then_some(run)
    })
    .await;
    let new_owner = again.node.clone().unwrap();
    assert!(new_owner == "a" || new_owner == "b", "{new_owner}");
    assert_eq!(claimers(&mut homes[0], retried).await, ["c".to_string(), new_owner.clone()]);
    assert!(homes[0].messages(retried).await.iter().any(|m| m.starts_with("requeue: node lost")));

    // c comes back with its old claims: its write under the stale token is rejected and it
    // kills what it still ran for them, leaving the new owner's attempt alone.
    start_node(&mut homes[2], "c", SHORT, &[]);
    let daemon = homes[2].daemon_pid().unwrap();
    wait_for("c's leftover stage processes to be gone", Duration::from_secs(20), || async {
        processes_mentioning(&c_home)
            .into_iter()
            .all(|pid| pid == daemon || Some(pid) == fork_server_of(daemon))
            .then_some(())
    })
    .await;
    for id in [failing, retried] {
        let messages = homes[0].messages(id).await;
        assert!(
            messages
                .iter()
                .any(|m| m.contains("came back holding a stale claim") && m.contains("write was rejected")),
            "{messages:#?}\n{}",
            homes[2].daemon_log()
        );
    }
    assert_eq!(homes[0].run(failing).await.state, RunState::Failed);
    // c's first lease is gone for good; c itself is up again and can't be forgotten.
    let out = homes[0].cli(&["node", "forget", "c"]);
    assert!(crate::support::stderr(&out).contains("node 'c' is up"), "{}", crate::support::stderr(&out));
    let out = homes[0].cli(&["node", "forget", "nope"]);
    assert!(crate::support::stderr(&out).contains("no node is called 'nope' (nodes: a, b, c)"));
    let still = homes[0].run(retried).await;
    assert_eq!(
        (still.state, still.attempt, still.node.as_deref()),
        (RunState::Running, 2, Some(new_owner.as_str()))
    );

    homes[0].cli_ok(&["run", "stop", &retried.to_string()]);
    let (stopped, _) = homes[0].wait_settled(retried, Duration::from_secs(20)).await;
    assert_eq!(stopped.state, RunState::Stopped);
}

#[tokio::test]
async fn a_transient_exit_is_retried_per_the_workflows_policy() {
    let mut home = TestHome::new();
    let policy = "retry: {max_attempts: 3, backoff: 100ms, retry_on_exit_codes: [75]}\n";
    // Exits 75 on its first attempt, 0 on the next: the count lives in the run directory.
    home.workflow(
        "flaky",
        &format!(
            "name: flaky\n{policy}stages:\n  - name: work\n    argv: [sh, -c, 'n=$(cat {{run_dir}}/n 2>/dev/null || echo 0); \
             echo $((n+1)) > {{run_dir}}/n; [ \"$n\" -ge 1 ] || exit 75']\n"
        ),
    );
    home.workflow(
        "always",
        &format!("name: always\n{policy}stages:\n  - {{name: work, argv: [sh, -c, 'exit 75']}}\n"),
    );
    home.workflow(
        "broken",
        &format!("name: broken\n{policy}stages:\n  - {{name: work, argv: [sh, -c, 'exit 1']}}\n"),
    );
    home.start_daemon();
    let flaky = home.submit(&["--workflow", "flaky"]);
    let always = home.submit(&["--workflow", "always"]);
    let broken = home.submit(&["--workflow", "broken"]);

    let (run, _) = home.wait_settled(flaky, Duration::from_secs(30)).await;
    assert_eq!((run.state, run.attempt), (RunState::Completed, 2), "{:?}", run.reason);
    let messages = home.messages(flaky).await;
    let retry = messages.iter().find(|m| m.starts_with("retry: ")).unwrap();
    assert!(retry.contains("exited with code 75") && retry.contains("attempt 2 of 3"), "{retry}");
    assert!(messages.iter().any(|m| m.starts_with("all stages gone")), "{messages:#?}");
    assert_eq!(claimers(&mut home, flaky).await.len(), 2);

    let (run, _) = home.wait_settled(always, Duration::from_secs(30)).await;
    assert_eq!((run.state, run.attempt), (RunState::Failed, 3), "every attempt used");
    assert!(run.reason.unwrap().contains("exited with code 75"));

    let (run, _) = home.wait_settled(broken, Duration::from_secs(30)).await;
    assert_eq!((run.state, run.attempt), (RunState::Failed, 1), "exit 1 is not transient");
}

#[tokio::test]
async fn multi_node_features_on_sqlite_say_they_need_postgres() {
    let home = TestHome::new();
    home.workflow("pinned", "name: pinned\nnode_labels: {gpu: h100}\nstages:\n  - {name: w, argv: [true]}\n");
    for args in [
        vec!["node", "list"],
        vec!["daemon", "--label", "gpu=h100"],
        vec!["run", "start", "--workflow", "pinned"],
    ] {
        let out = home.cli(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = crate::support::stderr(&out);
        assert!(err.contains("needs several daemons on one PostgreSQL store"), "{args:?}: {err}");
    }
    let out = home.cli(&["daemon", "--label", "gpu"]);
    assert!(crate::support::stderr(&out).contains("'gpu' is not KEY=VALUE"));
    let out = home.cli(&["daemon", "--lease", "0s"]);
    assert!(
        crate::support::stderr(&out).contains("--lease 0s is too short"),
        "{}",
        crate::support::stderr(&out)
    );
    let out = home.cli(&["daemon", "--node", "a b"]);
    assert!(crate::support::stderr(&out).contains("--node 'a b' is not a node id"));
}

#[tokio::test]
async fn a_frozen_node_finds_its_lease_lost_on_waking_and_stands_down() {
    let Some(mut homes) = cluster(2).await else { return };
    homes[0]
        .workflow("long", "name: long\nstages:\n  - {name: work, argv: [sleep, '300']}\nstop_grace: 2s\n");
    start_node(&mut homes[0], "frozen", SHORT, &[]);
    let id = homes[0].submit(&["--workflow", "long"]);
    homes[0].wait_state(id, RunState::Running, Duration::from_secs(20)).await;
    start_node(&mut homes[1], "awake", LONG, &[]);

    // A stalled process (a VM pause, a long GC): alive, but silent past its lease.
    let first_token = homes[1].run(id).await.fence.unwrap();
    let daemon = homes[0].daemon_pid().unwrap();
    let pid = rustix::process::Pid::from_raw(daemon).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    let failed = homes[1].wait_state(id, RunState::Failed, Duration::from_secs(30)).await;
    assert!(failed.reason.unwrap().starts_with("node lost: node 'frozen'"));
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();

    // On waking, its heartbeat or its next write is refused: it kills the stage it no
    // longer owns and takes a new lease, writing nothing over the survivor's decision.
    let home = homes[0].path().to_path_buf();
    wait_for("the woken node to kill the stage it lost", Duration::from_secs(20), || async {
        processes_mentioning(&home)
            .into_iter()
            .all(|p| p == daemon || Some(p) == fork_server_of(daemon))
            .then_some(())
    })
    .await;
    // Whichever it noticed first (a rejected write or a refused heartbeat), it stood down.
    let log = homes[0].daemon_log();
    assert!(log.contains("fenced: "), "{log}");
    let run = homes[1].run(id).await;
    assert_eq!((run.state, run.fence), (RunState::Failed, None));
    let service = homes[1].service().await;
    let back = wait_for("the woken node to take a new lease", Duration::from_secs(20), || async {
        let nodes = service.nodes().await.unwrap();
        nodes
            .into_iter()
            .find(|n| n.node.id == "frozen" && n.node.state == "up" && n.node.token > first_token)
    })
    .await;
    assert_eq!(back.node.runs, 0, "it holds nothing it lost");
    // Once lost for good, an operator can drop it from the list.
    homes[0].kill_daemon();
    wait_for("the frozen node to be reaped again", Duration::from_secs(30), || async {
        service.nodes().await.unwrap().into_iter().find(|n| n.node.id == "frozen" && n.node.state == "lost")
    })
    .await;
    assert_eq!(homes[1].cli_ok(&["node", "forget", "frozen"]).trim(), "forgot node frozen");
    assert!(service.nodes().await.unwrap().iter().all(|n| n.node.id != "frozen"));
}

#[tokio::test]
async fn work_and_stop_requests_reach_daemons_on_other_machines_at_once() {
    let Some(mut homes) = cluster(2).await else { return };
    // The daemon's periodic scan is an hour away: only a wake-up through PostgreSQL can move it.
    start_node(&mut homes[0], "far", LONG, &["--scan-interval", "1h"]);
    let service = homes[0].service().await;
    wait_for("the far node to register", Duration::from_secs(10), || async {
        service.nodes().await.unwrap().into_iter().find(|n| n.node.id == "far")
    })
    .await;
    // Submitted and stopped from another machine's home, where no daemon listens.
    homes[1]
        .workflow("long", "name: long\nstages:\n  - {name: work, argv: [sleep, '300']}\nstop_grace: 2s\n");
    let id = homes[1].submit(&["--workflow", "long"]);
    let run = homes[1].wait_state(id, RunState::Running, Duration::from_secs(20)).await;
    assert_eq!(run.node.as_deref(), Some("far"));
    homes[1].cli_ok(&["run", "stop", &id.to_string()]);
    let (stopped, _) = homes[1].wait_settled(id, Duration::from_secs(20)).await;
    assert_eq!(stopped.state, RunState::Stopped, "{}", homes[0].daemon_log());
}
