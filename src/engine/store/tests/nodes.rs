//! Several nodes on one store, at the store's level: leases, fencing, claims, reaping lost
//! nodes. Runs on SQLite and on the real PostgreSQL (the daemon-level tests are in
//! tests/it/nodes.rs).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::engine::store::{ClaimStore, Lease, NodeRegistration, Pick, Reap, Store, StoreError};
use crate::model::RunTrigger;
use crate::model::{ProcessState, Run, RunParams, RunState, now_millis};
use crate::workflow::Workflow;
use uuid::Uuid;

use super::wait_for;

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

/// Node a's lease in the tests where it goes quiet: long enough for its claims and writes to land
/// on a loaded machine (200 ms expired mid-test under a parallel suite), short enough to wait out.
const A_LEASE: Duration = Duration::from_secs(2);

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
        Pick::Take {
            params: Box::new(run.params.clone()),
            run_dir: PathBuf::from(format!("/{node}/runs/{}", run.id)),
        }
    };
    Ok(store.claim_runs(lease, 8, 16, &mut pick).await?.runs)
}

on_both_backends!(
    a_lost_nodes_runs_are_settled_once_and_its_stale_writes_rejected,
    a_restart_within_the_lease_keeps_the_claims,
    concurrent_claimers_take_each_run_exactly_once,
    a_due_schedule_fires_once_however_many_daemons_tick,
    a_lost_nodes_inference_tests_fail_and_its_task_writes_are_rejected,
    a_held_run_is_never_claimed_until_released,
    the_next_backoff_end_is_that_of_a_run_a_claim_could_take,
    a_lost_nodes_preemption_victim_is_queued_again_as_preempted,
);

/// A victim its node was stopping when the node was lost is queued again as its preemption
/// promised: its next attempt, its preemption counted, not charged to its retry policy, once.
async fn a_lost_nodes_preemption_victim_is_queued_again_as_preempted(store: &dyn Store) {
    let a = register(store, "a", Duration::from_secs(60)).await;
    insert(store, RETRY_ON_NODE_LOSS).await;
    let claimed = claim(store, &a, 1).await.unwrap().remove(0);
    let urgent = Uuid::new_v4();
    let mut params = claimed.params.clone();
    (params.preempted_by, params.preempted_at) = (Some(urgent), Some(now_millis()));
    let stopping =
        store.fenced(a.token).preempt(&claimed, &params, "preempted", urgent, "told").await.unwrap();
    assert_eq!(stopping.state, RunState::Stopping);
    let how = Reap::Preempted {
        reason: "queued again after its preemption".into(),
        params: Box::new(RunParams { preempted_by: None, preempted_at: None, ..params }),
        note: "attempt 2 starts from step 0".into(),
        lost: 1_000,
    };
    assert!(store.reap_run(&stopping, a.token, &how).await.unwrap());
    assert!(!store.reap_run(&stopping, a.token, &how).await.unwrap(), "settled once");
    let queued = store.run(stopping.id).await.unwrap().unwrap();
    assert_eq!(
        (queued.state, queued.attempt, queued.preemptions, queued.charged_attempts(), queued.fence),
        (RunState::Pending, 2, 1, 1, None)
    );
    assert_eq!(queued.preempted_by(), None);
    assert_eq!(queued.reason.as_deref(), Some("queued again after its preemption"));
}

/// The earliest backoff end after a given time, of the pending runs a claim by this node takes
/// once it is over, whoever queued them again: a held run's is not one, nor one pinned to other
/// nodes' labels; an end at the time asked is over.
async fn the_next_backoff_end_is_that_of_a_run_a_claim_could_take(store: &dyn Store) {
    use crate::engine::store::PendingEdit;
    let now = now_millis();
    let lease = register(store, "plain", Duration::from_secs(30)).await;
    let registration = NodeRegistration {
        id: "h100".into(),
        hostname: "test".into(),
        labels: [("gpu".to_string(), "h100".to_string())].into(),
        lease: Duration::from_secs(30),
    };
    let h100 = store.register_node(&registration).await.unwrap();
    assert_eq!(store.next_backoff_end(now, &lease).await.unwrap(), None, "none backs off");
    let mut queued = Vec::new();
    // The last is pinned to the h100 nodes; its backoff ends first of the runs not held.
    for (wait, extra) in
        [(60_000, ""), (30_000, ""), (90_000, ""), (10_000, ""), (20_000, "node_labels: {gpu: h100}\n")]
    {
        let run = store.transition(&insert(store, extra).await, RunTrigger::Claim, None, None).await.unwrap();
        let run = store.transition(&run, RunTrigger::Retry, Some("transient"), None).await.unwrap();
        queued.push(store.requeue(&run, RunTrigger::AllStagesGone, "retry", now + wait).await.unwrap());
    }
    let held = &queued[3];
    let edit = PendingEdit { held_at: Some(now), priority: held.priority, params: held.params.clone() };
    store.edit_pending(held, &edit, "held").await.unwrap();
    // (after) -> the next backoff end
    let table = [
        (now, Some(now + 30_000)),
        (now + 30_000, Some(now + 60_000)),
        (now + 60_001, Some(now + 90_000)),
        (now + 90_000, None),
    ];
    for (after, want) in table {
        assert_eq!(store.next_backoff_end(after, &lease).await.unwrap(), want, "after now + {}", after - now);
    }
    assert_eq!(store.next_backoff_end(now, &h100).await.unwrap(), Some(now + 20_000), "the pinned run's");
    // Claimed once over, it is no longer one.
    store.transition(&queued[1], RunTrigger::Claim, None, None).await.unwrap();
    assert_eq!(store.next_backoff_end(now, &lease).await.unwrap(), Some(now + 60_000));
}

/// A hold is the claim query's own condition: a held run ahead of others (first in the queue,
/// at a higher priority) is skipped by every node, and claimed once released.
async fn a_held_run_is_never_claimed_until_released(store: &dyn Store) {
    use crate::engine::store::PendingEdit;
    let first = insert(store, "").await;
    let edit = PendingEdit { held_at: Some(now_millis()), priority: 9, params: first.params.clone() };
    let held = store.edit_pending(&first, &edit, "held").await.unwrap();
    let behind = insert(store, "").await;
    let a = register(store, "a", Duration::from_secs(30)).await;
    let b = register(store, "b", Duration::from_secs(30)).await;
    let taken = claim(store, &a, 10).await.unwrap();
    assert_eq!(taken.iter().map(|r| r.id).collect::<Vec<_>>(), vec![behind.id]);
    assert!(claim(store, &b, 10).await.unwrap().is_empty());
    assert!(!store.runs_waiting().await.unwrap());
    // An edit of a run read before the hold (a stale version) is refused, not applied.
    let stale = PendingEdit { held_at: None, ..edit.clone() };
    assert!(matches!(store.edit_pending(&first, &stale, "x").await, Err(StoreError::Conflict { .. })));
    let released = store.edit_pending(&held, &stale, "released").await.unwrap();
    assert_eq!((released.held_at, released.priority), (None, 9));
    assert_eq!(claim(store, &b, 10).await.unwrap().iter().map(|r| r.id).collect::<Vec<_>>(), vec![held.id]);
    // Once claimed it is not pending: no edit lands.
    let claimed = store.run(held.id).await.unwrap().unwrap();
    assert!(matches!(store.edit_pending(&claimed, &edit, "x").await, Err(StoreError::Conflict { .. })));
}

fn inference_spec() -> crate::inference::spec::InferenceSpec {
    crate::inference::spec::InferenceSpec {
        env_name: "arith".into(),
        env_file: PathBuf::from("/envs/arith.py"),
        env_kind: Default::default(),
        import_dir: None,
        env_args: Default::default(),
        python: "python3".into(),
        models: vec!["m1".into(), "m2".into()],
        steps: 1,
        group_size: 1,
        provider: crate::inference::spec::Provider::openrouter(),
        timeout: crate::workflow::Dur(Duration::from_secs(60)),
        concurrency: 1,
        locked_env: BTreeMap::new(),
    }
}

async fn a_lost_nodes_inference_tests_fail_and_its_task_writes_are_rejected(store: &dyn Store) {
    let test = crate::model::InferenceTest::queued(
        Uuid::new_v4(),
        inference_spec(),
        None,
        Path::new("/submitter/tests"),
    );
    store.insert_test(&test, &test.pending_tasks()).await.unwrap();
    let a = register(store, "a", A_LEASE).await;
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
        (crate::model::TestState::Failed, Some("node lost: a"))
    );
    assert_eq!(store.test_tasks(test.id).await.unwrap()[0].record.state, ProcessState::Lost);
    assert!(matches!(store.fenced(a.token).update_task(&task, None).await, Err(StoreError::Fenced { .. })));
    assert!(
        store
            .fenced(a.token)
            .transition_test(&claimed[0], crate::model::TestTrigger::Succeed, None, None)
            .await
            .is_err()
    );
    assert_eq!(
        store.test(test.id).await.unwrap().unwrap().state,
        crate::model::TestState::Failed,
        "unchanged"
    );
}

async fn a_due_schedule_fires_once_however_many_daemons_tick(store: &dyn Store) {
    let spec = inference_spec();
    let schedule = crate::model::Schedule {
        id: Uuid::new_v4(),
        name: "nightly".into(),
        cron: "0 3 * * *".into(),
        tz: None,
        spec: spec.clone(),
        webhooks: Vec::new(),
        policy: crate::inference::regression::RegressionPolicy { max_drop: 0.1 },
        paused: false,
        last_fired: 0,
        created_at: 0,
    };
    store.insert_schedule(&schedule).await.unwrap();
    // Two daemons read the schedule at the same `last_fired` and both find it due.
    let mut fired = 0;
    for _ in 0..2 {
        let test = crate::model::InferenceTest::queued(
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
    let a = register(store, "a", A_LEASE).await;
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
    let requeue =
        Reap::Requeue { reason: "node lost: a; again".into(), not_before: now_millis() - 1, resume: None };
    assert!(store.reap_run(run, a.token, &requeue).await.unwrap());
    let queued = store.run(retried.id).await.unwrap().unwrap();
    assert_eq!((queued.state, queued.attempt, queued.node.as_deref()), (RunState::Pending, 2, None));

    // Everything node a still tries under its old token is refused.
    assert!(matches!(a_store.update_stage(&stage, None).await, Err(StoreError::Fenced { .. })));
    assert!(matches!(
        a_store.transition(&mine, RunTrigger::AllStagesUp, None, None).await,
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
    store.fenced(b.token).requeue(&later, RunTrigger::Requeue, "backing off", wait).await.unwrap();
    assert!(claim(store, &b, 10).await.unwrap().is_empty(), "backing off");

    // a comes back as a new lease and is handed nothing it lost.
    let back = register(store, "a", Duration::from_secs(60)).await;
    assert_eq!(back.previous, None);
    assert!(store.fenced(back.token).supervised_runs().await.unwrap().is_empty());
}

async fn a_restart_within_the_lease_keeps_the_claims(store: &dyn Store) {
    // A run claimed by a lachesis from before nodes (no owner, no token) goes to the first
    // daemon that registers.
    let legacy = store.transition(&insert(store, "").await, RunTrigger::Claim, None, None).await.unwrap();
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

/// Node a's claim, on a thread and a runtime of its own: once it has read the queue, its `pick`
/// tells the test (`read`) and answers only when the test says (`go`): taking the run, or passing
/// over it. Its transaction stays open meanwhile, as another node's would.
fn claim_paused_at_pick(
    location: crate::settings::StoreLocation,
    lease: Lease,
    take: bool,
) -> (
    std::sync::mpsc::Receiver<()>,
    std::sync::mpsc::Sender<()>,
    std::thread::JoinHandle<crate::engine::store::claims::Claimed>,
) {
    let (read_tx, read) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let claim = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let store = crate::engine::store::open(&location).await.unwrap();
            let mut pick = move |run: &Run| {
                read_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                match take {
                    true => Pick::Take { params: Box::new(run.params.clone()), run_dir: run.run_dir.clone() },
                    false => Pick::Skip,
                }
            };
            store.claim_runs(&lease, 8, 1, &mut pick).await.unwrap()
        })
    });
    (read, go, claim)
}

/// A fresh PostgreSQL store (and node b's handle on it) with one pending run, and nodes a and b.
async fn one_run_two_nodes()
-> Option<(crate::settings::StoreLocation, crate::engine::store::SqlStore, Run, Lease, Lease)> {
    let location = crate::settings::StoreLocation::Postgres(super::fresh_postgres().await?);
    let b = crate::engine::store::open(&location).await.unwrap();
    let run = insert(&b, "").await;
    let lease_a = register(&b, "a", Duration::from_secs(30)).await;
    let lease_b = register(&b, "b", Duration::from_secs(30)).await;
    Some((location, b, run, lease_a, lease_b))
}

fn take(run: &Run) -> Pick {
    Pick::Take { params: Box::new(run.params.clone()), run_dir: run.run_dir.clone() }
}

/// A claim locks only the runs it takes: while node a's claim is under way and passing over a
/// run (pinned to node b's labels, say), node b's claim takes that run. Locking a's whole page
/// made b skip it as locked, and the run then waited for b's next scan: a lost wake-up.
#[tokio::test]
async fn a_claim_locks_only_the_runs_it_takes() {
    let Some((location, b, run, lease_a, lease_b)) = one_run_two_nodes().await else { return };
    let (read, go, claim_a) = claim_paused_at_pick(location, lease_a, false);
    tokio::task::spawn_blocking(move || read.recv()).await.unwrap().unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(10), b.claim_runs(&lease_b, 8, 1, &mut take)).await;
    go.send(()).unwrap();
    let taken = taken.expect("node b's claim waits for nothing").unwrap();
    assert_eq!(
        taken.runs.iter().map(|r| r.id).collect::<Vec<_>>(),
        [run.id],
        "node b takes the run a passes over"
    );
    assert_eq!(taken.lost, 0);
    assert_eq!(claim_a.join().unwrap().runs.len(), 0);
}

/// A run another node claimed between this claim's read and its lock is counted lost, never
/// claimed twice.
#[tokio::test]
async fn a_run_taken_by_another_node_after_the_read_is_lost_not_claimed_twice() {
    let Some((location, b, run, lease_a, lease_b)) = one_run_two_nodes().await else { return };
    let (read, go, claim_a) = claim_paused_at_pick(location, lease_a, true);
    tokio::task::spawn_blocking(move || read.recv()).await.unwrap().unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(10), b.claim_runs(&lease_b, 8, 1, &mut take)).await;
    go.send(()).unwrap();
    assert_eq!(taken.expect("node b's claim waits for nothing").unwrap().runs.len(), 1);
    let late = tokio::task::spawn_blocking(move || claim_a.join().unwrap()).await.unwrap();
    assert_eq!((late.runs.len(), late.lost), (0, 1), "node a counts the run lost");
    assert_eq!(b.run(run.id).await.unwrap().unwrap().node.as_deref(), Some("b"));
}
