//! A run's earlier attempts keep their stages: a requeue copies the ending attempt's stages as
//! they ended before it resets them, on SQLite and PostgreSQL; retention forgets them with the
//! run.

use std::path::PathBuf;

use uuid::Uuid;

use crate::engine::store::Store;
use crate::model::{Exit, ProcessState, Run, RunParams, RunState, RunTrigger};
use crate::settings::StoreLocation;
use crate::workflow::Workflow;

use super::fresh_postgres;

async fn earlier_attempts_keep_their_stages(store: &dyn Store) {
    let spec = Workflow::parse(
        std::path::Path::new("r.yaml"),
        "name: r\nstages:\n  - {name: api, argv: ['true']}\n  - {name: trainer, argv: ['true']}\n",
    )
    .unwrap();
    let id = Uuid::new_v4();
    let run = Run::queued(id, spec, PathBuf::from(format!("/runs/{id}")), 0, RunParams::default());
    store.insert_run(&run, &run.pending_stages()).await.unwrap();
    assert!(store.earlier_stages(id).await.unwrap().is_empty(), "a first attempt has none");

    // Two attempts end: the first by the trainer's exit 1, the second by a signal.
    let mut run = run;
    for (attempt, exit) in [(1, Exit::Code(1)), (2, Exit::Signal(9))] {
        run = store.transition(&run, RunTrigger::Claim, None, None).await.unwrap();
        for mut stage in store.stages(id).await.unwrap() {
            stage.record.state = ProcessState::Exited;
            stage.record.started_at = Some(attempt * 100 + stage.idx);
            stage.record.ended_at = Some(attempt * 100 + 50);
            stage.record.exit = Some(if stage.name == "trainer" { exit } else { Exit::Signal(15) });
            store.update_stage(&stage, None).await.unwrap();
        }
        run = store.transition(&run, RunTrigger::Retry, Some("transient"), None).await.unwrap();
        run = store.requeue(&run, RunTrigger::AllStagesGone, "retry", 0).await.unwrap();
    }
    assert_eq!(run.attempt, 3);
    let earlier = store.earlier_stages(id).await.unwrap();
    let seen: Vec<(i64, String, Option<i64>, Option<Exit>)> = earlier
        .iter()
        .map(|(attempt, s)| (*attempt, s.name.clone(), s.record.started_at, s.record.exit))
        .collect();
    assert_eq!(
        seen,
        [
            (1, "api".into(), Some(100), Some(Exit::Signal(15))),
            (1, "trainer".into(), Some(101), Some(Exit::Code(1))),
            (2, "api".into(), Some(200), Some(Exit::Signal(15))),
            (2, "trainer".into(), Some(201), Some(Exit::Signal(9))),
        ]
    );
    assert!(earlier.iter().all(|(_, s)| s.record.state == ProcessState::Exited && s.run_id == id));
    // The current attempt's stages were reset for it.
    assert!(store.stages(id).await.unwrap().iter().all(|s| s.record.state == ProcessState::Pending));

    // Retention forgets them with the run.
    let run = store.transition(&run, RunTrigger::Claim, None, None).await.unwrap();
    store.transition(&run, RunTrigger::Fail, Some("done"), None).await.unwrap();
    assert_eq!(store.run(id).await.unwrap().unwrap().state, RunState::Failed);
    store.forget_runs(&[id]).await.unwrap();
    assert!(store.earlier_stages(id).await.unwrap().is_empty());
}

#[tokio::test]
async fn sqlite_earlier_attempts_keep_their_stages() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        crate::engine::store::open(&StoreLocation::Sqlite(dir.path().join("lachesis.db"))).await.unwrap();
    earlier_attempts_keep_their_stages(&store).await;
}

#[tokio::test]
async fn postgres_earlier_attempts_keep_their_stages() {
    let Some(url) = fresh_postgres().await else {
        return;
    };
    let store = crate::engine::store::open(&StoreLocation::Postgres(url)).await.unwrap();
    earlier_attempts_keep_their_stages(&store).await;
}
