//! Preemption's writes, on SQLite and PostgreSQL: the decision moves the victim to `stopping`
//! naming the urgent run, with an event on each run, in one commit; the requeue counts the
//! preemption and its lost work, charges no attempt of the retry policy, and lands once.

use std::path::PathBuf;

use uuid::Uuid;

use crate::engine::store::{Store, StoreError};
use crate::model::{Run, RunParams, RunState, RunTrigger};
use crate::workflow::Workflow;

/// A queued run of a preemptible one-stage workflow `name`.
pub(super) fn queued(name: &str, priority: i64) -> Run {
    let spec = Workflow::parse(
        std::path::Path::new("r.yaml"),
        &format!("name: {name}\npreemptible: true\nstages:\n  - {{name: trainer, argv: ['true']}}\n"),
    )
    .unwrap();
    let id = Uuid::new_v4();
    Run::queued(id, spec, PathBuf::from(format!("/runs/{id}")), priority, RunParams::default())
}

async fn a_preemption_stops_then_requeues_once(store: &dyn Store) {
    let (victim, urgent) = (queued("low", 0), queued("urgent", 10));
    store.insert_run(&victim, &victim.pending_stages()).await.unwrap();
    store.insert_run(&urgent, &urgent.pending_stages()).await.unwrap();
    let victim = store.transition(&victim, RunTrigger::Claim, None, None).await.unwrap();
    let victim = store.transition(&victim, RunTrigger::AllStagesUp, None, None).await.unwrap();

    let mut params = victim.params.clone();
    params.preempted_by = Some(urgent.id);
    let reason = "preempted by run x for 1 gpu unit";
    let stopping =
        store.preempt(&victim, &params, reason, urgent.id, "took gpu unit 0 from run y").await.unwrap();
    assert_eq!(stopping.state, RunState::Stopping);
    let read = store.run(victim.id).await.unwrap().unwrap();
    assert_eq!((read.state, read.preempted_by()), (RunState::Stopping, Some(urgent.id)));
    let told: Vec<String> =
        store.events(urgent.id, 0).await.unwrap().into_iter().map(|e| e.message).collect();
    assert!(told.iter().any(|m| m == "took gpu unit 0 from run y"), "{told:?}");
    // A decision read before it landed cannot land twice.
    let again = store.preempt(&victim, &params, reason, urgent.id, "twice").await;
    assert!(matches!(again, Err(StoreError::Conflict { .. })), "{again:?}");

    let mut next = stopping.params.clone();
    next.preempted_by = None;
    let queued =
        store.requeue_preempted(&stopping, "queued again", &next, "attempt 2 starts", 90_000).await.unwrap();
    let read = store.run(victim.id).await.unwrap().unwrap();
    for run in [&queued, &read] {
        assert_eq!(
            (run.state, run.attempt, run.preemptions, run.preempted_work),
            (RunState::Pending, 2, 1, 90_000)
        );
        assert_eq!(run.charged_attempts(), 1, "a preemption charges no attempt");
        assert_eq!(run.params.preempted_by, None);
    }
    let twice = store.requeue_preempted(&stopping, "queued again", &next, "attempt 2 starts", 90_000).await;
    assert!(matches!(twice, Err(StoreError::Conflict { .. })), "{twice:?}");
    assert_eq!(store.run(victim.id).await.unwrap().unwrap().preemptions, 1, "requeued exactly once");
    let messages: Vec<String> =
        store.events(victim.id, 0).await.unwrap().into_iter().map(|e| e.message).collect();
    assert!(messages.iter().any(|m| m == "preempted: queued again"), "{messages:?}");
}

on_both_backends!(a_preemption_stops_then_requeues_once);
