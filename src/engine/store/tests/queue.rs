//! The queue's reads: positions are ranks by (priority, submission), pages walk the queue in
//! claim order without gaps or repeats, a page of runs is that page, and a claim over many pages
//! takes runs in queue order; on SQLite and PostgreSQL.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use uuid::Uuid;

use crate::engine::store::{NodeRegistration, Pick, Store};
use crate::model::{Run, RunPage, RunParams, RunState, RunTrigger, Stage};
use crate::settings::StoreLocation;
use crate::workflow::Workflow;

use super::fresh_postgres;

fn queued(name: &str, priority: i64) -> (Run, Vec<Stage>) {
    let spec = Workflow::parse(
        std::path::Path::new("q.yaml"),
        &format!("name: {name}\nstages:\n  - {{name: trainer, argv: ['true']}}\n"),
    )
    .unwrap();
    let id = Uuid::new_v4();
    let run = Run {
        workflow: name.to_string(),
        ..Run::queued(id, spec, PathBuf::from(format!("/runs/{id}")), priority, RunParams::default())
    };
    let stages = run.pending_stages();
    (run, stages)
}

/// 250 runs over three priorities and two workflows, submitted in order.
async fn fill(store: &dyn Store) -> Vec<Run> {
    let batch: Vec<(Run, Vec<Stage>)> =
        (0..250).map(|i| queued(if i % 2 == 0 { "even" } else { "odd" }, (i * 7 % 3) as i64)).collect();
    store.insert_runs(&batch).await.unwrap();
    batch.into_iter().map(|(run, _)| run).collect()
}

/// The claim order: highest priority first, then submission.
fn claim_order(runs: &[Run]) -> Vec<Uuid> {
    let mut ranked: Vec<(usize, &Run)> = runs.iter().enumerate().collect();
    ranked.sort_by_key(|(i, r)| (-r.priority, *i));
    ranked.into_iter().map(|(_, r)| r.id).collect()
}

async fn queue_reads(store: &dyn Store) {
    let runs = fill(store).await;
    let mut order = claim_order(&runs);
    for (rank, id) in order.iter().enumerate() {
        assert_eq!(store.queue_position(*id).await.unwrap(), Some(rank as i64 + 1), "run {rank}");
    }
    assert_eq!(store.queue_position(Uuid::new_v4()).await.unwrap(), None, "an unknown run");

    // A run that leaves the queue has no place, and every run behind it moves up one.
    let head = runs.iter().find(|r| r.id == order[0]).unwrap();
    store.transition(head, RunTrigger::Cancel, None, None).await.unwrap();
    assert_eq!(store.queue_position(head.id).await.unwrap(), None);
    order.remove(0);
    assert_eq!(store.queue_position(order[0]).await.unwrap(), Some(1));
    assert_eq!(store.queue_position(order[100]).await.unwrap(), Some(101));

    // Pages keyed by their last run walk the whole queue in claim order.
    let mut walked = Vec::new();
    let mut after = None;
    loop {
        let page = store.queue_page(after, 40).await.unwrap();
        assert!(page.len() <= 40);
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        walked.extend(page.iter().map(|r| r.id));
    }
    assert_eq!(walked, order, "no run skipped or repeated");
    assert!(store.queue_page(Some(head.id), 40).await.unwrap().is_empty(), "a cursor off the queue");

    // A page of the runs table is that page, newest first, filtered in the query.
    let newest: Vec<Uuid> = runs.iter().rev().map(|r| r.id).collect();
    let page = |state, workflow, offset| RunPage { state, workflow, offset, limit: 10 };
    let ids = |runs: Vec<Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(ids(store.runs_page(&page(None, None, 20)).await.unwrap()), newest[20..30]);
    let stopped = store.runs_page(&page(Some(RunState::Stopped), None, 0)).await.unwrap();
    assert_eq!(ids(stopped), [head.id]);
    let odd: Vec<Uuid> = runs.iter().rev().filter(|r| r.workflow == "odd").map(|r| r.id).collect();
    assert_eq!(ids(store.runs_page(&page(None, Some("odd"), 10)).await.unwrap()), odd[10..20]);
    let pending_odd = store.runs_page(&page(Some(RunState::Pending), Some("odd"), 0)).await.unwrap();
    assert!(pending_odd.iter().all(|r| r.workflow == "odd" && r.state == RunState::Pending));
    assert_eq!(pending_odd.len(), 10);
    assert!(store.runs_page(&page(None, None, 10_000)).await.unwrap().is_empty(), "past the end");

    // A claim over many pages takes runs in queue order, past the ones its pick skips.
    let registration = NodeRegistration {
        id: "a".into(),
        hostname: "test".into(),
        labels: BTreeMap::new(),
        lease: Duration::from_secs(60),
    };
    let lease = store.register_node(&registration).await.unwrap();
    let odd: HashSet<Uuid> = runs.iter().filter(|r| r.workflow == "odd").map(|r| r.id).collect();
    let mut taken = 0;
    let mut pick = |run: &Run| match (odd.contains(&run.id), taken) {
        (_, 30) => Pick::Stop,
        (true, _) => Pick::Skip,
        (false, _) => {
            taken += 1;
            Pick::Take { params: Box::new(run.params.clone()), run_dir: run.run_dir.clone() }
        }
    };
    let claimed: Vec<Uuid> =
        store.claim_runs(&lease, 8, 16, &mut pick).await.unwrap().runs.iter().map(|r| r.id).collect();
    let evens: Vec<Uuid> = order.iter().filter(|id| !odd.contains(id)).copied().collect();
    assert_eq!(claimed, evens[..30], "the first 30 runs the pick takes, in queue order");
    let left: Vec<Uuid> = order.iter().filter(|id| !claimed.contains(id)).copied().collect();
    assert_eq!(store.queue_position(left[0]).await.unwrap(), Some(1), "the skipped head is still next");
    assert_eq!(store.queue_position(left[150]).await.unwrap(), Some(151));
}

#[tokio::test]
async fn sqlite_queue_reads_rank_and_page() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        crate::engine::store::open(&StoreLocation::Sqlite(dir.path().join("lachesis.db"))).await.unwrap();
    queue_reads(&store).await;
}

#[tokio::test]
async fn postgres_queue_reads_rank_and_page() {
    let Some(url) = fresh_postgres().await else {
        return;
    };
    let store = crate::engine::store::open(&StoreLocation::Postgres(url)).await.unwrap();
    queue_reads(&store).await;
}
