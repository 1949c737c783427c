//! A listing's open dependencies: the edges not met yet of a page's waiting runs, read in one
//! set query per chunk of runs, grouped by waiting run in the order given; on SQLite (where the
//! read is checked to walk the edges' primary key) and PostgreSQL.

use std::path::PathBuf;

use uuid::Uuid;

use crate::engine::store::dependencies::{OPEN_CHUNK, open_dependencies_sql};
use crate::engine::store::{DependencyStore, NewDependency, Store};
use crate::model::{Awaited, Run, RunParams, RunState, RunTrigger, Settled, Stage, When};
use crate::settings::StoreLocation;
use crate::workflow::Workflow;

use super::fresh_postgres;

fn queued() -> (Run, Vec<Stage>) {
    let spec = Workflow::parse(
        std::path::Path::new("d.yaml"),
        "name: d\nstages:\n  - {name: main, argv: ['true']}\n",
    )
    .unwrap();
    let id = Uuid::new_v4();
    let run = Run::queued(id, spec, PathBuf::from(format!("/runs/{id}")), 0, RunParams::default());
    let stages = run.pending_stages();
    (run, stages)
}

fn dep(after: Uuid, when: When, name: Option<&str>) -> NewDependency {
    NewDependency::on_run(after, when, name.map(str::to_string))
}

async fn open_edges(store: &dyn Store) {
    let (a, a_stages) = queued();
    let (b, b_stages) = queued();
    let (x, x_stages) = queued();
    let (y, y_stages) = queued();
    let runs = store
        .insert_runs_after(&[
            (a.clone(), a_stages, vec![]),
            (b.clone(), b_stages, vec![]),
            (x.clone(), x_stages, vec![dep(a.id, When::Ok, Some("first")), dep(b.id, When::Any, None)]),
            (y.clone(), y_stages, vec![dep(b.id, When::Any, None)]),
        ])
        .await
        .unwrap();
    assert_eq!(runs[2].deps_open, 2);
    let open = store.open_dependencies(&[x.id, y.id, a.id]).await.unwrap();
    let seen: Vec<_> = open.iter().map(|(w, d)| (*w, d.awaited, d.when, d.name.as_deref())).collect();
    let pending = |run| Awaited::Run { run, state: Some(RunState::Pending) };
    let mut want = vec![
        (x.id, pending(a.id), When::Ok, Some("first")),
        (x.id, pending(b.id), When::Any, None),
        (y.id, pending(b.id), When::Any, None),
    ];
    // By waiting run (in id order), each run's edges in the order given.
    want.sort_by_key(|(w, ..)| w.to_string());
    assert_eq!(seen, want);
    assert!(open.iter().all(|(_, d)| d.settled == Settled::Waiting));

    // b is cancelled: an `any` edge is met by it and leaves the open ones.
    store.transition(&runs[1], RunTrigger::Cancel, Some("cancelled"), None).await.unwrap();
    let open = store.open_dependencies(&[x.id, y.id]).await.unwrap();
    let seen: Vec<(Uuid, Uuid)> = open.iter().map(|(w, d)| (*w, d.awaited.id())).collect();
    assert_eq!(seen, [(x.id, a.id)]);
    assert!(store.open_dependencies(&[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn sqlite_open_dependencies_are_a_pages_waiting_runs_on_the_primary_key() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        crate::engine::store::open(&StoreLocation::Sqlite(dir.path().join("lachesis.db"))).await.unwrap();
    open_edges(&store).await;
    let plan = super::sqlite_plan(&store, &open_dependencies_sql(3)).await;
    assert!(
        plan.iter().any(|step| step.contains("SEARCH d USING INDEX sqlite_autoindex_run_deps")),
        "{plan:?}"
    );
    assert!(!plan.iter().any(|step| step.starts_with("SCAN")), "{plan:?}");

    // More waiting runs than one query binds: every chunk is read.
    let (target, target_stages) = queued();
    let mut batch = vec![(target.clone(), target_stages, vec![])];
    batch.extend((0..=OPEN_CHUNK).map(|_| {
        let (run, stages) = queued();
        (run, stages, vec![dep(target.id, When::Ok, None)])
    }));
    store.insert_runs_after(&batch).await.unwrap();
    let waiting: Vec<Uuid> = batch[1..].iter().map(|(r, ..)| r.id).collect();
    assert_eq!(store.open_dependencies(&waiting).await.unwrap().len(), OPEN_CHUNK + 1);
}

#[tokio::test]
async fn postgres_open_dependencies_are_a_pages_waiting_runs() {
    let Some(url) = fresh_postgres().await else {
        return;
    };
    let store = crate::engine::store::open(&StoreLocation::Postgres(url)).await.unwrap();
    open_edges(&store).await;
}
