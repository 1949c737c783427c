//! A sweep's resume in the store: its stop marks the members it ends, a resume moves it back to
//! live once (from stopped, or from done by its stop) with its re-runs marked and an event, a
//! later stop drops marks not acted on; a claim counts `max_live` inside its transaction, so
//! two claimers at once never pass it; on SQLite and PostgreSQL.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::sweeps::{members, sweep};
use crate::engine::store::{NodeRegistration, Pick, Store};
use crate::model::sweep::{Rerun, RerunCause, SweepState, SweepWinner};
use crate::model::{Run, RunState, RunTrigger};

on_both_backends!(
    a_stop_marks_what_it_ends_and_a_resume_moves_back_once,
    only_a_sweep_its_stop_ended_resumes,
    a_rerun_lands_only_while_its_mark_stands,
    two_claimers_at_once_never_pass_max_live,
);

const STOP: &str = "stop requested";

fn rerun(k: u64, run: &Run) -> Rerun {
    Rerun { k, run: run.id, version: run.version, cause: RerunCause::SweepStop }
}

async fn a_stop_marks_what_it_ends_and_a_resume_moves_back_once(store: &dyn Store) {
    let grid = sweep(3, None);
    let runs = members(&grid);
    store.insert_sweep(&grid, &runs).await.unwrap();
    // Member 0 was cancelled on its own before the stop: the stop did not end it.
    store.transition(&runs[0].0, RunTrigger::Cancel, None, None).await.unwrap();
    assert!(store.move_sweep(grid.id, SweepState::Live, SweepState::Stopped, Some(STOP)).await.unwrap());
    assert_eq!(store.stopped_by_sweep(grid.id).await.unwrap(), vec![1, 2]);
    let one = store.transition(&runs[1].0, RunTrigger::Cancel, None, None).await.unwrap();
    let two = store.transition(&runs[2].0, RunTrigger::Cancel, None, None).await.unwrap();

    let reruns = [rerun(1, &one), rerun(2, &two)];
    assert!(store.resume_sweep(grid.id, SweepState::Stopped, STOP, &reruns, "resumed: 2").await.unwrap());
    assert!(
        !store.resume_sweep(grid.id, SweepState::Stopped, STOP, &reruns, "again").await.unwrap(),
        "a second resume of the same stop moves nothing"
    );
    let live = store.sweep(grid.id).await.unwrap().unwrap();
    assert_eq!((live.state, live.reason), (SweepState::Live, None));
    assert!(store.stopped_by_sweep(grid.id).await.unwrap().is_empty(), "the stop's marks are spent");
    let marked = store.marked_reruns(None).await.unwrap();
    assert_eq!(
        marked.iter().map(|m| (m.k, m.run, m.version)).collect::<Vec<_>>(),
        [(1, one.id, one.version), (2, two.id, two.version)]
    );
    // A mark is dropped only at the version it holds.
    store.clear_rerun(one.id, one.version + 1).await.unwrap();
    store.clear_rerun(one.id, one.version).await.unwrap();
    assert_eq!(
        store.marked_reruns(Some(grid.id)).await.unwrap().iter().map(|m| m.k).collect::<Vec<_>>(),
        [2]
    );
    // Stopped again before member 2 was re-run: a stopped sweep queues nothing.
    assert!(store.move_sweep(grid.id, SweepState::Live, SweepState::Stopped, Some(STOP)).await.unwrap());
    assert!(store.marked_reruns(Some(grid.id)).await.unwrap().is_empty());
    let moves: Vec<(SweepState, SweepState, String)> =
        store.sweep_events(grid.id).await.unwrap().into_iter().map(|e| (e.from, e.to, e.message)).collect();
    assert_eq!(
        moves,
        [
            (SweepState::Live, SweepState::Stopped, STOP.to_string()),
            (SweepState::Stopped, SweepState::Live, "resumed: 2".to_string()),
            (SweepState::Live, SweepState::Stopped, STOP.to_string()),
        ]
    );
}

async fn a_rerun_lands_only_while_its_mark_stands(store: &dyn Store) {
    let grid = sweep(2, None);
    let runs = members(&grid);
    store.insert_sweep(&grid, &runs).await.unwrap();
    assert!(store.move_sweep(grid.id, SweepState::Live, SweepState::Stopped, Some(STOP)).await.unwrap());
    let zero = store.transition(&runs[0].0, RunTrigger::Cancel, None, None).await.unwrap();
    let one = store.transition(&runs[1].0, RunTrigger::Cancel, None, None).await.unwrap();
    let reruns = [rerun(0, &zero), rerun(1, &one)];
    assert!(store.resume_sweep(grid.id, SweepState::Stopped, STOP, &reruns, "resumed: 2").await.unwrap());
    // Member 0's re-run lands and spends its mark.
    let queued =
        store.requeue_rerun(&zero, "re-run", &zero.params, "attempt 2 starts from step 0").await.unwrap();
    assert_eq!((queued.state, queued.attempt), (RunState::Pending, 2));
    assert_eq!(
        store.marked_reruns(Some(grid.id)).await.unwrap().iter().map(|m| m.k).collect::<Vec<_>>(),
        [1]
    );
    // Stopped again before member 1's re-run: the stop took its mark, and the re-run read before
    // it writes nothing.
    assert!(store.move_sweep(grid.id, SweepState::Live, SweepState::Stopped, Some(STOP)).await.unwrap());
    let late = store.requeue_rerun(&one, "re-run", &one.params, "attempt 2 starts from step 0").await;
    assert!(matches!(late, Err(crate::engine::store::StoreError::Conflict { .. })), "{late:?}");
    let still = store.run(one.id).await.unwrap().unwrap();
    assert_eq!((still.state, still.attempt), (RunState::Stopped, 1));
}

async fn only_a_sweep_its_stop_ended_resumes(store: &dyn Store) {
    // Stopped, then done once its members ended: it resumes from done.
    let stopped = sweep(1, None);
    store.insert_sweep(&stopped, &members(&stopped)).await.unwrap();
    assert!(store.move_sweep(stopped.id, SweepState::Live, SweepState::Stopped, Some(STOP)).await.unwrap());
    assert!(store.end_sweep(stopped.id, SweepState::Stopped, None, None).await.unwrap().is_some());
    assert!(!store.resume_sweep(stopped.id, SweepState::Stopped, STOP, &[], "no").await.unwrap());
    assert!(store.resume_sweep(stopped.id, SweepState::Done, STOP, &[], "yes").await.unwrap());
    assert_eq!(store.sweep(stopped.id).await.unwrap().unwrap().state, SweepState::Live);
    // Done by itself (with a winner, or another reason), or live: never.
    let won = sweep(1, None);
    let runs = members(&won);
    store.insert_sweep(&won, &runs).await.unwrap();
    let winner = SweepWinner { k: 0, run: runs[0].0.id, value: 0.5 };
    assert!(store.end_sweep(won.id, SweepState::Live, Some(&winner), None).await.unwrap().is_some());
    assert!(!store.resume_sweep(won.id, SweepState::Done, STOP, &[], "no").await.unwrap());
    let silent = sweep(1, None);
    store.insert_sweep(&silent, &members(&silent)).await.unwrap();
    assert!(!store.resume_sweep(silent.id, SweepState::Live, STOP, &[], "no").await.unwrap());
    assert!(
        store
            .end_sweep(silent.id, SweepState::Live, None, Some("no member reported loss"))
            .await
            .unwrap()
            .is_some()
    );
    assert!(!store.resume_sweep(silent.id, SweepState::Done, STOP, &[], "no").await.unwrap());
    assert_eq!(store.sweep(silent.id).await.unwrap().unwrap().state, SweepState::Done);
}

/// Two claimers at once, each taking every run it is offered: the members of a sweep with
/// `max_live: 2` they start are two in all, since each counts inside its transaction (on
/// PostgreSQL under the sweep row's lock). A claimer offered a member whose sweep another holds
/// counts it lost, to look again.
async fn two_claimers_at_once_never_pass_max_live(store: Arc<dyn Store>) {
    let limited = sweep(6, Some(2));
    store.insert_sweep(&limited, &members(&limited)).await.unwrap();
    let mut claimers = Vec::new();
    for node in ["a", "b"] {
        let registration = NodeRegistration {
            id: node.into(),
            hostname: "test".into(),
            labels: BTreeMap::new(),
            lease: Duration::from_secs(30),
        };
        let lease = store.register_node(&registration).await.unwrap();
        let store = Arc::clone(&store);
        claimers.push(tokio::spawn(async move {
            let mut claimed = 0;
            // A few rounds each, as a daemon's claims come again after a lost race.
            for _ in 0..4 {
                let mut take = |run: &Run| Pick::Take {
                    params: Box::new(run.params.clone()),
                    run_dir: PathBuf::from(format!("/{}/runs/{}", lease.node, run.id)),
                };
                claimed += store.claim_runs(&lease, 8, 2, &mut take).await.unwrap().runs.len();
            }
            claimed
        }));
    }
    let mut claimed = 0;
    for claimer in claimers {
        claimed += claimer.await.unwrap();
    }
    assert_eq!(claimed, 2, "max_live 2 across both claimers");
    let in_flight = store
        .sweep_member_runs(limited.id)
        .await
        .unwrap()
        .iter()
        .filter(|(_, run)| run.state == RunState::Starting)
        .count();
    assert_eq!(in_flight, 2);
}
