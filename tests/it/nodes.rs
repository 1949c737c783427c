//! Several daemons on one store: leases, fencing, claims, reaping lost nodes, retries. The
//! store-level suite runs on SQLite and on the real PostgreSQL; the daemon-level tests need
//! PostgreSQL (several daemons can't share the embedded store).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lachesis::model::RunEvent;
use lachesis::model::{ProcessState, Run, RunParams, RunState, now_millis};
use lachesis::store::{Lease, NodeRegistration, Pick, Reap, Store, StoreError, StoreLocation};
use lachesis::workflow::Workflow;
use uuid::Uuid;

use crate::store::fresh_postgres;
use crate::support::{TestHome, fork_server_of, processes_mentioning, wait_for};

const RETRY_ON_NODE_LOSS: &str = "retry: {max_attempts: 2, backoff: 100ms}\n";

fn workflow(extra: &str) -> Workflow {
    let text = format!(
        "name: t\nstages:\n  - {{name: api, argv: [run-api]}}\n  - {{name: env, argv: [env]}}\n{extra}"
    );
    Workflow::parse(Path::new("t.yaml"), &text).unwrap()
}

async fn insert(store: &dyn Store, extra: &str) -> Run {
    let id = Uuid::new_v4();
    let run_dir = PathBuf::from(format!("/submitter/runs/{id}"));
    let run = Run::queued(id, workflow(extra), run_dir, 0, RunParams::default());
    store.insert_run(&run, &run.pending_stages()).await.unwrap();
    run
}

async fn register(store: &dyn Store, node: &str, lease: Duration) -> Lease {
    let registration =
        NodeRegistration { id: node.into(), hostname: "test".into(), labels: BTreeMap::new(), lease };
    store.register_node(&registration).await.unwrap()
}

/// Claims up to `max` runs for `lease`, each into `/<node>/runs/<id>`.
async fn claim(store: &dyn Store, lease: &Lease, max: usize) -> Result<Vec<Run>, StoreError> {
    let mut taken = 0;
    let node = lease.node.clone();
    let mut pick = |run: &Run| {
        if taken == max {
            return Pick::Stop;
        }
        taken += 1;
        Pick::Take { params: run.params.clone(), run_dir: PathBuf::from(format!("/{node}/runs/{}", run.id)) }
    };
    store.claim_runs(lease, 8, 16, &mut pick).await
}

async fn node_suite(open: impl AsyncFn() -> Arc<dyn Store>) {
    a_lost_nodes_runs_are_settled_once_and_its_stale_writes_rejected(&*open().await).await;
    a_restart_within_the_lease_keeps_the_claims(&*open().await).await;
    concurrent_claimers_take_each_run_exactly_once(open().await).await;
    a_due_schedule_fires_once_however_many_daemons_tick(&*open().await).await;
    a_lost_nodes_inference_tests_fail_and_its_task_writes_are_rejected(&*open().await).await;
}

fn inference_spec() -> lachesis::inference::spec::InferenceSpec {
    lachesis::inference::spec::InferenceSpec {
        env_name: "arith".into(),
        env_file: PathBuf::from("/envs/arith.py"),
        python: "python3".into(),
        models: vec!["m1".into(), "m2".into()],
        steps: 1,
        group_size: 1,
        provider: lachesis::inference::spec::Provider::openrouter(),
        timeout: lachesis::workflow::Dur(Duration::from_secs(60)),
        concurrency: 1,
        locked_env: BTreeMap::new(),
    }
}

async fn a_lost_nodes_inference_tests_fail_and_its_task_writes_are_rejected(store: &dyn Store) {
    let test = lachesis::model::InferenceTest::queued(
        Uuid::new_v4(),
        inference_spec(),
        None,
        Path::new("/submitter/tests"),
    );
    store.insert_test(&test, &test.pending_tasks()).await.unwrap();
    let a = register(store, "a", Duration::from_millis(200)).await;
    let b = register(store, "b", Duration::from_secs(60)).await;
    let claimed = store.claim_tests(&a, 10, Path::new("/a/tests")).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].test_dir, PathBuf::from(format!("/a/tests/{}", test.id)));
    assert!(store.claim_tests(&b, 10, Path::new("/b/tests")).await.unwrap().is_empty(), "claimed once");
    let mut task = store.test_tasks(test.id).await.unwrap().remove(0);
    task.record.state = ProcessState::Up;
    store.fenced(a.token).update_task(&task, None).await.unwrap();

    let lost = wait_for("node a's lease to expire", Duration::from_secs(10), || async {
        store.expired_nodes(now_millis()).await.unwrap().into_iter().find(|n| n.id == "a")
    })
    .await;
    assert!(store.mark_node_lost(&lost, now_millis()).await.unwrap());
    assert_eq!(store.reap_tests("a", a.token, "node lost: a").await.unwrap(), 1);
    let failed = store.test(test.id).await.unwrap().unwrap();
    assert_eq!(
        (failed.state, failed.reason.as_deref()),
        (lachesis::model::TestState::Failed, Some("node lost: a"))
    );
    assert_eq!(store.test_tasks(test.id).await.unwrap()[0].record.state, ProcessState::Lost);
    assert!(matches!(store.fenced(a.token).update_task(&task, None).await, Err(StoreError::Fenced { .. })));
    assert!(
        store
            .fenced(a.token)
            .transition_test(&claimed[0], lachesis::model::TestEvent::Succeed, None, None)
            .await
            .is_err()
    );
    assert_eq!(
        store.test(test.id).await.unwrap().unwrap().state,
        lachesis::model::TestState::Failed,
        "unchanged"
    );
}

async fn a_due_schedule_fires_once_however_many_daemons_tick(store: &dyn Store) {
    let spec = inference_spec();
    let schedule = lachesis::model::Schedule {
        id: Uuid::new_v4(),
        name: "nightly".into(),
        cron: "0 3 * * *".into(),
        tz: None,
        spec: spec.clone(),
        webhooks: Vec::new(),
        policy: lachesis::inference::regression::RegressionPolicy { max_drop: 0.1 },
        paused: false,
        last_fired: 0,
        created_at: 0,
    };
    store.insert_schedule(&schedule).await.unwrap();
    // Two daemons read the schedule at the same `last_fired` and both find it due.
    let mut fired = 0;
    for _ in 0..2 {
        let test = lachesis::model::InferenceTest::queued(
            Uuid::new_v4(),
            spec.clone(),
            Some(schedule.id),
            Path::new("/tests"),
        );
        let tasks = test.pending_tasks();
        if store.fire_schedule(&schedule, now_millis(), Some((&test, &tasks))).await.unwrap() {
            fired += 1;
        }
    }
    assert_eq!(fired, 1);
    assert_eq!(store.schedule_tests(schedule.id, 10).await.unwrap().len(), 1, "one test queued");
}

async fn a_lost_nodes_runs_are_settled_once_and_its_stale_writes_rejected(store: &dyn Store) {
    let a = register(store, "a", Duration::from_millis(200)).await;
    let b = register(store, "b", Duration::from_secs(60)).await;
    assert!(b.token > a.token, "tokens only grow");
    let failing = insert(store, "").await;
    let retried = insert(store, RETRY_ON_NODE_LOSS).await;
    let claimed = claim(store, &a, 10).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let mine = store.run(failing.id).await.unwrap().unwrap();
    assert_eq!(
        (mine.state, mine.node.as_deref(), mine.fence),
        (RunState::Starting, Some("a"), Some(a.token))
    );
    assert_eq!(mine.run_dir, PathBuf::from(format!("/a/runs/{}", mine.id)), "the claiming node's directory");
    let logs: Vec<PathBuf> = store.stages(mine.id).await.unwrap().into_iter().map(|s| s.log_path).collect();
    assert_eq!(logs[1], mine.run_dir.join("env.log"));

    // While its lease holds, node a writes under its token.
    let a_store = store.fenced(a.token);
    let mut stage = store.stages(failing.id).await.unwrap().remove(0);
    stage.record.state = ProcessState::Up;
    a_store.update_stage(&stage, None).await.unwrap();

    // a goes quiet; b reaps it exactly once.
    wait_for("node a's lease to expire", Duration::from_secs(10), || async {
        store.expired_nodes(now_millis()).await.unwrap().into_iter().find(|n| n.id == "a")
    })
    .await;
    let lost = store.expired_nodes(now_millis()).await.unwrap().into_iter().find(|n| n.id == "a").unwrap();
    assert!(store.mark_node_lost(&lost, now_millis()).await.unwrap());
    assert!(!store.mark_node_lost(&lost, now_millis()).await.unwrap(), "reaped once");
    let runs = store.node_runs("a", a.token).await.unwrap();
    assert_eq!(runs.len(), 2);
    let fail = Reap::Fail { reason: "node lost: a".into() };
    let run = runs.iter().find(|r| r.id == failing.id).unwrap();
    assert!(store.reap_run(run, a.token, &fail).await.unwrap());
    assert!(!store.reap_run(run, a.token, &fail).await.unwrap(), "settled once");
    let failed = store.run(failing.id).await.unwrap().unwrap();
    assert_eq!((failed.state, failed.fence), (RunState::Failed, None));
    assert_eq!(failed.reason.as_deref(), Some("node lost: a"));
    assert!(
        store.stages(failing.id).await.unwrap()[0].record.state == ProcessState::Lost,
        "its live stage is lost"
    );

    let run = runs.iter().find(|r| r.id == retried.id).unwrap();
    let requeue = Reap::Requeue { reason: "node lost: a; again".into(), not_before: now_millis() - 1 };
    assert!(store.reap_run(run, a.token, &requeue).await.unwrap());
    let queued = store.run(retried.id).await.unwrap().unwrap();
    assert_eq!((queued.state, queued.attempt, queued.node.as_deref()), (RunState::Pending, 2, None));

    // Everything node a still tries under its old token is refused.
    assert!(matches!(a_store.update_stage(&stage, None).await, Err(StoreError::Fenced { .. })));
    assert!(matches!(
        a_store.transition(&mine, RunEvent::AllStagesUp, None, None).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(store.heartbeat(&a).await, Err(StoreError::LeaseLost { .. })));
    assert!(matches!(claim(store, &a, 10).await, Err(StoreError::LeaseLost { .. })));
    assert_eq!(store.run(failing.id).await.unwrap().unwrap().state, RunState::Failed, "unchanged");

    // The next attempt goes to a live node, under its own token.
    let again = claim(store, &b, 10).await.unwrap();
    assert_eq!(again.iter().map(|r| (r.id, r.attempt)).collect::<Vec<_>>(), [(retried.id, 2)]);
    assert_eq!(store.run(retried.id).await.unwrap().unwrap().fence, Some(b.token));

    // A requeued run backing off is not claimed before its time.
    let later = insert(store, RETRY_ON_NODE_LOSS).await;
    let later = claim(store, &b, 10).await.unwrap().into_iter().find(|r| r.id == later.id).unwrap();
    let wait = now_millis() + 60_000;
    store.fenced(b.token).requeue(&later, RunEvent::Requeue, "backing off", wait).await.unwrap();
    assert!(claim(store, &b, 10).await.unwrap().is_empty(), "backing off");

    // a comes back as a new lease and is handed nothing it lost.
    let back = register(store, "a", Duration::from_secs(60)).await;
    assert_eq!(back.previous, None);
    assert!(store.fenced(back.token).supervised_runs().await.unwrap().is_empty());
}

async fn a_restart_within_the_lease_keeps_the_claims(store: &dyn Store) {
    // A run claimed by a lachesis from before nodes (no owner, no token) goes to the first
    // daemon that registers.
    let legacy = store.transition(&insert(store, "").await, RunEvent::Claim, None, None).await.unwrap();
    assert_eq!((legacy.node.as_deref(), legacy.fence), (None, None));
    let first = register(store, "c", Duration::from_secs(60)).await;
    let adopted = store.run(legacy.id).await.unwrap().unwrap();
    assert_eq!((adopted.node.as_deref(), adopted.fence), (Some("c"), Some(first.token)));
    let run = insert(store, "").await;
    claim(store, &first, 1).await.unwrap();
    let second = register(store, "c", Duration::from_secs(60)).await;
    assert_eq!(second.previous, Some(first.token));
    let adopted = store.run(run.id).await.unwrap().unwrap();
    assert_eq!(adopted.fence, Some(second.token));
    let held: Vec<Uuid> =
        store.fenced(second.token).supervised_runs().await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(held, [legacy.id, run.id], "both handed to the new lease");
    // The old token is stale even for its own node.
    let stage = store.stages(run.id).await.unwrap().remove(0);
    assert!(matches!(
        store.fenced(first.token).update_stage(&stage, None).await,
        Err(StoreError::Fenced { .. })
    ));
    store.fenced(second.token).update_stage(&stage, None).await.unwrap();
}

async fn concurrent_claimers_take_each_run_exactly_once(store: Arc<dyn Store>) {
    let mut ids = Vec::new();
    for _ in 0..40 {
        ids.push(insert(&*store, "").await.id);
    }
    let mut claimers = Vec::new();
    for n in 0..4 {
        let store = Arc::clone(&store);
        claimers.push(tokio::spawn(async move {
            let lease = register(&*store, &format!("claimer-{n}"), Duration::from_secs(60)).await;
            let mut mine = Vec::new();
            loop {
                let got = claim(&*store, &lease, 3).await.unwrap();
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got.into_iter().map(|r| r.id));
            }
        }));
    }
    let mut owners: HashMap<Uuid, usize> = HashMap::new();
    for claimer in claimers {
        for id in claimer.await.unwrap() {
            *owners.entry(id).or_default() += 1;
        }
    }
    assert_eq!(owners.len(), 40, "every run claimed");
    assert!(owners.values().all(|n| *n == 1), "no run claimed twice");
    for id in ids {
        let claims =
            store.events(id, 0).await.unwrap().iter().filter(|e| e.message.starts_with("claim")).count();
        assert_eq!(claims, 1, "one claim event for {id}");
    }
}

#[tokio::test]
async fn sqlite_nodes_conform() {
    let dir = tempfile::tempdir().unwrap();
    let counter = std::sync::atomic::AtomicUsize::new(0);
    node_suite(async || {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = dir.path().join(format!("{n}.db"));
        Arc::new(lachesis::store::open(&StoreLocation::Sqlite(path)).await.unwrap()) as Arc<dyn Store>
    })
    .await;
}

#[tokio::test]
async fn postgres_nodes_conform() {
    if fresh_postgres().await.is_none() {
        return;
    }
    node_suite(async || {
        let url = fresh_postgres().await.unwrap();
        Arc::new(lachesis::store::open(&StoreLocation::Postgres(url)).await.unwrap()) as Arc<dyn Store>
    })
    .await;
}

/// `n` homes, each for one daemon, sharing one fresh PostgreSQL database.
async fn cluster(n: usize) -> Option<Vec<TestHome>> {
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
const SHORT: &str = "2s";
const LONG: &str = "30s";

fn start_node(home: &mut TestHome, node: &str, lease: &str, extra: &[&str]) {
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
    let store = homes[0].store().await;
    let again = wait_for("the retried run's second attempt to run", Duration::from_secs(30), || async {
        let run = store.run(retried).await.unwrap().unwrap();
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
    let store = homes[1].store().await;
    let back = wait_for("the woken node to take a new lease", Duration::from_secs(20), || async {
        let nodes = store.nodes().await.unwrap();
        nodes.into_iter().find(|n| n.id == "frozen" && n.state == "up" && n.token > first_token)
    })
    .await;
    assert_eq!(back.runs, 0, "it holds nothing it lost");
    // Once lost for good, an operator can drop it from the list.
    homes[0].kill_daemon();
    wait_for("the frozen node to be reaped again", Duration::from_secs(30), || async {
        store.nodes().await.unwrap().into_iter().find(|n| n.id == "frozen" && n.state == "lost")
    })
    .await;
    assert_eq!(homes[1].cli_ok(&["node", "forget", "frozen"]).trim(), "forgot node frozen");
    assert!(store.nodes().await.unwrap().iter().all(|n| n.id != "frozen"));
}

#[tokio::test]
async fn work_and_stop_requests_reach_daemons_on_other_machines_at_once() {
    let Some(mut homes) = cluster(2).await else { return };
    // The daemon's periodic scan is an hour away: only a wake-up through PostgreSQL can move it.
    start_node(&mut homes[0], "far", LONG, &["--scan-interval", "1h"]);
    let store = homes[0].store().await;
    wait_for("the far node to register", Duration::from_secs(10), || async {
        store.nodes().await.unwrap().into_iter().find(|n| n.id == "far")
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
