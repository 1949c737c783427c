//! One conformance suite, run against SQLite and against the real PostgreSQL.

use std::path::PathBuf;
use std::sync::Arc;

use crate::engine::store::{RunMove, Store, StoreError};
use crate::model::RunQuery;
use crate::model::RunTrigger;
use crate::model::{
    EventKind, Exit, NewEvent, ProcessIdentity, ProcessState, Run, RunParams, RunState, Stage,
};
use crate::workflow::Workflow;
use uuid::Uuid;

fn workflow() -> Workflow {
    Workflow::parse(
        std::path::Path::new("t.yaml"),
        "name: t\nstages:\n  - {name: api, argv: [run-api]}\n  - {name: env, argv: [python, env.py]}\n",
    )
    .unwrap()
}

fn new_run(priority: i64) -> (Run, Vec<Stage>) {
    let id = Uuid::new_v4();
    let run = Run {
        env_name: Some("gsm8k".into()),
        ..Run::queued(id, workflow(), PathBuf::from(format!("/runs/{id}")), priority, RunParams::default())
    };
    let stages = run.pending_stages();
    (run, stages)
}

async fn insert(store: &dyn Store, priority: i64) -> Run {
    let (run, stages) = new_run(priority);
    store.insert_run(&run, &stages).await.unwrap();
    run
}

on_both_backends!(
    round_trips_runs_and_orders_the_queue,
    a_batch_is_written_in_order_or_not_at_all,
    transitions_are_conditional_and_recorded,
    stages_round_trip,
    a_stage_and_the_run_move_it_decides_land_together,
    supervised_runs_are_the_ones_in_flight,
    racing_writers_cannot_both_win,
    the_daemon_lock_is_exclusive,
    retention_forgets_only_what_has_ended,
    progress_ends_summarise_as_the_whole_attempt,
    metric_history_is_one_row_per_step,
    a_checkpoint_line_is_recorded_once,
    an_end_settles_the_runs_waiting_for_it,
    a_dependency_failure_writes_its_notification,
);

/// The runs a dependency failed get their notification in the commit that fails them, as a
/// run that fails on its own does: one each, fanned out once.
async fn a_dependency_failure_writes_its_notification(store: Arc<dyn Store>) {
    use crate::engine::store::NewDependency;
    use crate::model::When;
    let (x, x_stages) = new_run(0);
    let (y, y_stages) = new_run(0);
    let (z, z_stages) = new_run(0);
    let ok = |after: Uuid| vec![NewDependency::on_run(after, When::Ok, None)];
    store
        .insert_runs_after(&[
            (x.clone(), x_stages, vec![]),
            (y.clone(), y_stages, ok(x.id)),
            (z.clone(), z_stages, ok(y.id)),
        ])
        .await
        .unwrap();
    let x = store.transition(&x, RunTrigger::Claim, None, None).await.unwrap();
    store.transition(&x, RunTrigger::Fail, Some("boom"), None).await.unwrap();
    let hooks = ["http://127.0.0.1:9/h".to_string()];
    assert_eq!(store.fan_out_notifications(&hooks, 100).await.unwrap(), 3);
    assert_eq!(store.fan_out_notifications(&hooks, 100).await.unwrap(), 0);
    let due = store.due_deliveries(i64::MAX, 10).await.unwrap();
    let mut told: Vec<(String, String)> =
        due.iter().map(|(_, p)| (p.ids["run"].as_str().unwrap().to_string(), p.kind.clone())).collect();
    told.sort();
    let mut want: Vec<(String, String)> =
        [x.id, y.id, z.id].iter().map(|id| (id.to_string(), "run_failed".to_string())).collect();
    want.sort();
    assert_eq!(told, want);
    let (_, y_note) = due.iter().find(|(d, _)| d.subject == y.id.to_string()).unwrap();
    let reason = format!("dependency {} failed", crate::model::short_id(&x.id));
    assert_eq!(y_note.summary["reason"], reason.as_str());
}

/// An end settles its dependents in its own transaction: met edges count down, an unmet one
/// fails its run without starting it, and that cascades; a run that already ended settles an
/// edge as it is written, or refuses it.
async fn an_end_settles_the_runs_waiting_for_it(store: &dyn Store) {
    use crate::engine::store::NewDependency;
    use crate::model::{Settled, When};
    let dep = |after: Uuid, when: When, name: Option<&str>| {
        NewDependency::on_run(after, when, name.map(str::to_string))
    };
    let (x, x_stages) = new_run(0);
    let (y, y_stages) = new_run(0);
    let (z, z_stages) = new_run(0);
    let (cleanup, cleanup_stages) = new_run(0);
    let (alert, alert_stages) = new_run(0);
    let inserted = store
        .insert_runs_after(&[
            (x.clone(), x_stages, vec![]),
            (y.clone(), y_stages, vec![dep(x.id, When::Ok, Some("x"))]),
            (z.clone(), z_stages, vec![dep(y.id, When::Ok, None)]),
            (cleanup.clone(), cleanup_stages, vec![dep(y.id, When::Any, None), dep(x.id, When::Any, None)]),
            (alert.clone(), alert_stages, vec![dep(x.id, When::Failed, None)]),
        ])
        .await
        .unwrap();
    assert_eq!(inserted.iter().map(|r| r.deps_open).collect::<Vec<_>>(), [0, 1, 1, 2, 1]);
    let after = store.dependencies(y.id).await.unwrap();
    assert_eq!((after[0].awaited.id(), after[0].when, after[0].name.as_deref()), (x.id, When::Ok, Some("x")));
    assert_eq!(
        (after[0].awaited, after[0].settled),
        (crate::model::Awaited::Run { run: x.id, state: Some(RunState::Pending) }, Settled::Waiting)
    );

    let x = store.transition(&x, RunTrigger::Claim, None, None).await.unwrap();
    let x = store.transition(&x, RunTrigger::Fail, Some("boom"), None).await.unwrap();
    let read = |id| async move { store.run(id).await.unwrap().unwrap() };
    let y = read(y.id).await;
    assert_eq!(
        (y.state, y.reason.clone()),
        (RunState::Failed, Some(format!("dependency {} failed", x.short_id())))
    );
    let z = read(z.id).await;
    assert_eq!(
        (z.state, z.reason.clone()),
        (RunState::Failed, Some(format!("dependency {} failed", y.short_id())))
    );
    assert!(z.started_at.is_none() && z.ended_at.is_some(), "ended without starting");
    let cleanup = read(cleanup.id).await;
    assert_eq!((cleanup.state, cleanup.deps_open), (RunState::Pending, 0), "both of its `any` edges are met");
    let alert = read(alert.id).await;
    assert_eq!((alert.state, alert.deps_open), (RunState::Pending, 0));
    let events = store.events(z.id, 0).await.unwrap();
    assert!(
        events.iter().any(|e| e.message == format!("dependency unmet: dependency {} failed", y.short_id()))
    );
    assert_eq!(store.dependencies(z.id).await.unwrap()[0].settled, Settled::Unmet);

    // Already ended: `ok` on a failed run is refused, `any` is met at once.
    let (late, late_stages) = new_run(0);
    let refused = store
        .insert_runs_after(&[(late.clone(), late_stages.clone(), vec![dep(x.id, When::Ok, None)])])
        .await;
    assert!(
        matches!(refused, Err(StoreError::Unmet { ref reason }) if reason.contains("failed")),
        "{refused:?}"
    );
    assert!(store.run(late.id).await.unwrap().is_none(), "nothing was written");
    let met = store
        .insert_runs_after(&[(late.clone(), late_stages, vec![dep(x.id, When::Any, None)])])
        .await
        .unwrap();
    assert_eq!(met[0].deps_open, 0);
    // A cancelled (stopped) run fails what waits for it to complete, naming the stop.
    let (w, w_stages) = new_run(0);
    let (v, v_stages) = new_run(0);
    store
        .insert_runs_after(&[
            (w.clone(), w_stages, vec![]),
            (v.clone(), v_stages, vec![dep(w.id, When::Ok, None)]),
        ])
        .await
        .unwrap();
    store.transition(&w, RunTrigger::Cancel, Some("cancelled"), None).await.unwrap();
    let v = read(v.id).await;
    assert_eq!(v.reason, Some(format!("dependency {} was stopped", w.short_id())));
}

async fn a_checkpoint_line_is_recorded_once(store: &dyn Store) {
    use crate::model::FoundCheckpoint;
    let run = insert(store, 0).await;
    let found = |step: i64, key: &str| FoundCheckpoint {
        step,
        path: Some(format!("tinker://a/weights/{step}")),
        weights: None,
        key: key.into(),
    };
    assert!(store.record_checkpoint(run.id, 1, &found(2, "k2"), 10).await.unwrap());
    assert!(store.record_checkpoint(run.id, 1, &found(4, "k4"), 20).await.unwrap());
    assert!(
        !store.record_checkpoint(run.id, 2, &found(4, "k4"), 30).await.unwrap(),
        "a line read again after a restart adds nothing"
    );
    let rows = store.checkpoints(run.id).await.unwrap();
    assert_eq!(rows.iter().map(|c| (c.attempt, c.step)).collect::<Vec<_>>(), [(1, 2), (1, 4)]);
    assert_eq!(store.last_checkpoint(run.id).await.unwrap().map(|c| c.step), Some(4));
    let other = insert(store, 0).await;
    assert!(store.checkpoints(other.id).await.unwrap().is_empty());
    assert_eq!(store.last_checkpoint(other.id).await.unwrap(), None);
}

async fn metric_history_is_one_row_per_step(store: &dyn Store) {
    use crate::model::MetricRow;
    let run = insert(store, 0).await;
    let other = insert(store, 0).await;
    assert!(store.metric_rows(run.id).await.unwrap().is_empty());
    let row = |step, reward: Option<f64>, at| MetricRow {
        step,
        reward_mean: reward,
        loss: Some(1.0 / (step as f64 + 1.0)),
        recorded_at: at,
        ..MetricRow::default()
    };
    store.put_metric_rows(run.id, &[row(2, Some(0.5), 10), row(0, None, 10)]).await.unwrap();
    store.put_metric_rows(other.id, &[row(0, Some(9.0), 10)]).await.unwrap();
    // A later reading: step 2 refreshed, step 4 new, step 0 kept.
    store.put_metric_rows(run.id, &[row(2, Some(0.75), 20), row(4, Some(1.0), 20)]).await.unwrap();
    store.put_metric_rows(run.id, &[]).await.unwrap();
    let rows = store.metric_rows(run.id).await.unwrap();
    assert_eq!(rows, vec![row(0, None, 10), row(2, Some(0.75), 20), row(4, Some(1.0), 20)]);
    assert_eq!(rows[0].percent_correct, None);
    assert_eq!(store.metric_rows(other.id).await.unwrap(), vec![row(0, Some(9.0), 10)]);
}

async fn round_trips_runs_and_orders_the_queue(store: &dyn Store) {
    let low = insert(store, 0).await;
    let high = insert(store, 9).await;
    let low2 = insert(store, 0).await;
    let got = store.run(low.id).await.unwrap().unwrap();
    assert_eq!(got.spec, low.spec);
    assert_eq!(got.env_name.as_deref(), Some("gsm8k"));
    assert_eq!(got.state, RunState::Pending);
    let pending: Vec<Uuid> = store.pending_runs(100, 0).await.unwrap().iter().map(|r| r.id).collect();
    let mine: Vec<Uuid> = pending.into_iter().filter(|id| [low.id, high.id, low2.id].contains(id)).collect();
    assert_eq!(mine, [high.id, low.id, low2.id], "priority first, then submission order");
    let newest = store.list_runs(&RunQuery { state: None, limit: Some(1) }).await.unwrap();
    assert_eq!(newest[0].id, low2.id);
    let by_prefix = store.runs_by_prefix(&high.id.to_string()[..30], 5).await.unwrap();
    assert_eq!(by_prefix.len(), 1);
    assert!(store.runs_by_prefix("%", 5).await.unwrap().is_empty());
    assert!(store.runs_by_prefix("", 5).await.unwrap().is_empty());
    let events = store.events(low.id, 0).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].message, "submitted (workflow t, priority 0)");
}

async fn a_batch_is_written_in_order_or_not_at_all(store: &dyn Store) {
    let batch: Vec<(Run, Vec<Stage>)> = (0..50).map(|_| new_run(-5)).collect();
    store.insert_runs(&batch).await.unwrap();
    let pending: Vec<Uuid> = store.pending_runs(10_000, 0).await.unwrap().iter().map(|r| r.id).collect();
    let mine: Vec<Uuid> = pending.into_iter().filter(|id| batch.iter().any(|(r, _)| r.id == *id)).collect();
    assert_eq!(mine, batch.iter().map(|(r, _)| r.id).collect::<Vec<_>>(), "claimed in submission order");
    let last = &batch[49].0;
    assert_eq!(store.stages(last.id).await.unwrap().len(), 2);
    assert_eq!(store.events(last.id, 0).await.unwrap().len(), 1);
    // A duplicate id in the middle refuses the whole batch: none of the fresh runs lands.
    let fresh = new_run(-5);
    let refused = vec![fresh.clone(), batch[0].clone()];
    assert!(store.insert_runs(&refused).await.is_err());
    assert!(store.run(fresh.0.id).await.unwrap().is_none());
    for (run, _) in &batch {
        let cancelled = store.transition(run, RunTrigger::Cancel, None, None).await.unwrap();
        assert_eq!(cancelled.state, RunState::Stopped);
    }
}

async fn transitions_are_conditional_and_recorded(store: &dyn Store) {
    let run = insert(store, 0).await;
    let claimed = store.transition(&run, RunTrigger::Claim, None, None).await.unwrap();
    assert_eq!((claimed.state, claimed.version), (RunState::Starting, 1));
    assert!(claimed.started_at.is_some());
    // The stale copy can no longer move the run.
    match store.transition(&run, RunTrigger::Cancel, None, None).await {
        Err(StoreError::Conflict { expected, version, .. }) => {
            assert_eq!((expected, version), (RunState::Pending, 0))
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // An illegal move is refused before touching the store.
    assert!(matches!(
        store.transition(&claimed, RunTrigger::AllStagesGone, None, None).await,
        Err(StoreError::Illegal(_))
    ));
    let params =
        RunParams { resolved: [("port.api".to_string(), "8123".to_string())].into(), ..Default::default() };
    let up = store.transition(&claimed, RunTrigger::AllStagesUp, None, Some(&params)).await.unwrap();
    let failed =
        store.transition(&up, RunTrigger::Fail, Some("stage 'env' exited with code 1"), None).await.unwrap();
    let stored = store.run(run.id).await.unwrap().unwrap();
    assert_eq!(stored.state, RunState::Failed);
    assert_eq!(stored.version, failed.version);
    assert_eq!(stored.reason.as_deref(), Some("stage 'env' exited with code 1"));
    assert_eq!(stored.params, params);
    assert!(stored.ended_at.is_some());
    let moves: Vec<(Option<RunState>, Option<RunState>)> = store
        .events(run.id, 0)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.kind == EventKind::State)
        .map(|e| (e.from_state, e.to_state))
        .collect();
    use RunState::*;
    assert_eq!(
        moves,
        [(Some(Pending), Some(Starting)), (Some(Starting), Some(Running)), (Some(Running), Some(Failed))]
    );
}

async fn stages_round_trip(store: &dyn Store) {
    let run = insert(store, 0).await;
    let mut stage = store.stages(run.id).await.unwrap().remove(1);
    assert_eq!((stage.name.as_str(), stage.record.state), ("env", ProcessState::Pending));
    let identity = ProcessIdentity { pid: 4242, start_time: 123_456_789_012, boot_id: "b00t".into() };
    stage.record.state = ProcessState::Exited;
    stage.record.shim = Some(identity.clone());
    stage.record.process = Some(ProcessIdentity { pid: 4243, ..identity });
    stage.record.started_at = Some(1);
    stage.ready_at = Some(2);
    stage.record.ended_at = Some(3);
    stage.record.exit = Some(Exit::Signal(9));
    store
        .update_stage(&stage, Some(&NewEvent::stage("env", "exited with signal 9 (SIGKILL)")))
        .await
        .unwrap();
    let got = store.stages(run.id).await.unwrap().remove(1);
    assert_eq!(got.record.shim, stage.record.shim);
    assert_eq!(got.record.process, stage.record.process);
    assert_eq!(got.record.exit, Some(Exit::Signal(9)));
    assert_eq!((got.record.started_at, got.ready_at, got.record.ended_at), (Some(1), Some(2), Some(3)));
    let last = store.events(run.id, 0).await.unwrap().pop().unwrap();
    assert_eq!((last.kind, last.stage.as_deref()), (EventKind::Stage, Some("env")));
    let after = store.events(run.id, last.id).await.unwrap();
    assert!(after.is_empty());
}

async fn a_stage_and_the_run_move_it_decides_land_together(store: &dyn Store) {
    let run = store.transition(&insert(store, 0).await, RunTrigger::Claim, None, None).await.unwrap();
    let run = store.transition(&run, RunTrigger::AllStagesUp, None, None).await.unwrap();
    let mut stage = store.stages(run.id).await.unwrap().remove(0);
    stage.record.state = ProcessState::Exited;
    stage.record.exit = Some(Exit::Code(0));
    stage.record.ended_at = Some(run.started_at.unwrap() + 5);
    let exited = [NewEvent::stage("api", "exited with code 0")];
    let then = RunMove {
        run: &run,
        trigger: RunTrigger::Complete,
        reason: Some("stage 'api' finished"),
        ended_at: stage.record.ended_at,
    };
    let moved = store.record_stage(&stage, &exited, Some(then)).await.unwrap().expect("the run moved");
    assert_eq!(
        (moved.state, moved.version, moved.ended_at),
        (RunState::Completed, run.version + 1, stage.record.ended_at)
    );
    let stored = store.run(run.id).await.unwrap().unwrap();
    assert_eq!((stored.state, stored.version, stored.ended_at), (moved.state, moved.version, moved.ended_at));
    assert_eq!(store.stages(run.id).await.unwrap()[0].record.exit, Some(Exit::Code(0)));
    let messages: Vec<String> =
        store.events(run.id, 0).await.unwrap().into_iter().map(|e| e.message).collect();
    assert_eq!(messages[messages.len() - 2..], ["exited with code 0", "complete: stage 'api' finished"]);

    // The run changed under the caller (a stop request): the stage still lands, the run is
    // left as the other writer put it, and the caller is told to look again.
    let run = store.transition(&insert(store, 0).await, RunTrigger::Claim, None, None).await.unwrap();
    let running = store.transition(&run, RunTrigger::AllStagesUp, None, None).await.unwrap();
    let stopping = store.transition(&running, RunTrigger::Stop, Some("stop requested"), None).await.unwrap();
    let mut stage = store.stages(run.id).await.unwrap().remove(1);
    stage.record.state = ProcessState::Exited;
    stage.record.exit = Some(Exit::Code(3));
    let then = RunMove {
        run: &running,
        trigger: RunTrigger::Fail,
        reason: Some("stage 'env' exited with code 3"),
        ended_at: None,
    };
    assert!(store.record_stage(&stage, &[], Some(then)).await.unwrap().is_none());
    assert_eq!(store.stages(run.id).await.unwrap()[1].record.exit, Some(Exit::Code(3)));
    let stored = store.run(run.id).await.unwrap().unwrap();
    assert_eq!((stored.state, stored.version), (RunState::Stopping, stopping.version));

    // A move the run's state forbids is not made; the stage lands all the same.
    let then = RunMove { run: &stopping, trigger: RunTrigger::Complete, reason: None, ended_at: None };
    stage.record.exit = Some(Exit::Code(4));
    assert!(store.record_stage(&stage, &[], Some(then)).await.unwrap().is_none());
    assert_eq!(store.stages(run.id).await.unwrap()[1].record.exit, Some(Exit::Code(4)));
    assert_eq!(store.run(run.id).await.unwrap().unwrap().state, RunState::Stopping);

    // Events are written several to a statement: more than one statement's worth all land, in
    // order, the run's state event last.
    let run = store.transition(&insert(store, 0).await, RunTrigger::Claim, None, None).await.unwrap();
    let mut stage = store.stages(run.id).await.unwrap().remove(0);
    stage.record.state = ProcessState::Up;
    let notes: Vec<NewEvent> = (1..=4).map(|n| NewEvent::stage("api", format!("note {n}"))).collect();
    let then = RunMove { run: &run, trigger: RunTrigger::AllStagesUp, reason: None, ended_at: None };
    let moved = store.record_stage(&stage, &notes, Some(then)).await.unwrap().expect("the run moved");
    assert_eq!(moved.state, RunState::Running);
    let events = store.events(run.id, 0).await.unwrap();
    let last: Vec<(&str, Option<RunState>)> =
        events[events.len() - 5..].iter().map(|e| (e.message.as_str(), e.to_state)).collect();
    assert_eq!(
        last,
        [
            ("note 1", None),
            ("note 2", None),
            ("note 3", None),
            ("note 4", None),
            ("all stages up", Some(RunState::Running))
        ]
    );
    assert!(events.windows(2).all(|w| w[0].id < w[1].id));
}

async fn supervised_runs_are_the_ones_in_flight(store: &dyn Store) {
    let pending = insert(store, 0).await;
    let started = store.transition(&insert(store, 0).await, RunTrigger::Claim, None, None).await.unwrap();
    // Terminal, but one of its stages may still be alive: still supervised.
    let ending = store.transition(&insert(store, 0).await, RunTrigger::Claim, None, None).await.unwrap();
    let ending = store.transition(&ending, RunTrigger::Fail, Some("x"), None).await.unwrap();
    let mut live = store.stages(ending.id).await.unwrap().remove(0);
    live.record.state = ProcessState::Up;
    store.update_stage(&live, None).await.unwrap();
    let done = store.transition(&insert(store, 0).await, RunTrigger::Cancel, None, None).await.unwrap();
    // A pending run is the queue's, whatever its stages say: the one rule every query shares.
    let mut stray = store.stages(pending.id).await.unwrap().remove(0);
    stray.record.state = ProcessState::Up;
    store.update_stage(&stray, None).await.unwrap();
    let ids: Vec<Uuid> = store.supervised_runs().await.unwrap().iter().map(|r| r.id).collect();
    assert!(ids.contains(&started.id) && ids.contains(&ending.id));
    assert!(!ids.contains(&pending.id) && !ids.contains(&done.id));
}

async fn progress_ends_summarise_as_the_whole_attempt(store: &dyn Store) {
    use crate::model::{Progress, ProgressPoint};
    let run = insert(store, 0).await;
    assert_eq!(store.progress_ends(run.id, 1).await.unwrap(), vec![]);
    // The total is reported early and then no more, as a trainer that prints it once does.
    let totals = [Some(50), None, Some(60), None, None];
    for (i, total) in totals.into_iter().enumerate() {
        let i = i as i64;
        let point = ProgressPoint { attempt: 1, step: 10 * (i + 1), total, at: 1_000 + 60_000 * i };
        store.record_progress(run.id, &point).await.unwrap();
    }
    store
        .record_progress(run.id, &ProgressPoint { attempt: 2, step: 1, total: None, at: 900_000 })
        .await
        .unwrap();
    let whole = store.progress(run.id, 1).await.unwrap();
    let ends = store.progress_ends(run.id, 1).await.unwrap();
    assert_eq!(ends.len(), 3);
    assert_eq!(Progress::of(&ends), Progress::of(&whole));
    assert_eq!(Progress::of(&ends).unwrap().total, Some(60));
    let second = store.progress_ends(run.id, 2).await.unwrap();
    assert_eq!(second.iter().map(|p| p.step).collect::<Vec<_>>(), vec![1, 1], "its first is its last");
}

async fn retention_forgets_only_what_has_ended(store: &dyn Store) {
    let pending = insert(store, 0).await;
    let started = store.transition(&insert(store, 0).await, RunTrigger::Claim, None, None).await.unwrap();
    let ending = store.transition(&insert(store, 0).await, RunTrigger::Claim, None, None).await.unwrap();
    let ending = store.transition(&ending, RunTrigger::Fail, Some("x"), None).await.unwrap();
    let mut live = store.stages(ending.id).await.unwrap().remove(0);
    live.record.state = ProcessState::Up;
    store.update_stage(&live, None).await.unwrap();
    let done = store.transition(&insert(store, 0).await, RunTrigger::Cancel, None, None).await.unwrap();
    store.put_snapshot(done.id, 1, &serde_json::json!({ "loss": 1 })).await.unwrap();
    let point = crate::model::ProgressPoint { attempt: 1, step: 3, total: Some(5), at: 1 };
    store.record_progress(done.id, &point).await.unwrap();
    let saved =
        crate::model::FoundCheckpoint { step: 3, path: None, weights: Some("w".into()), key: "k".into() };
    store.record_checkpoint(done.id, 1, &saved, 1).await.unwrap();
    let row = crate::model::MetricRow { step: 3, recorded_at: 1, ..Default::default() };
    store.put_metric_rows(done.id, &[row]).await.unwrap();
    let soon = crate::model::now_millis() + 1000;
    let expired: Vec<Uuid> =
        store.expired_runs(soon, None, 10_000).await.unwrap().iter().map(|e| e.id).collect();
    assert!(expired.contains(&done.id));
    for kept in [pending.id, started.id, ending.id] {
        assert!(!expired.contains(&kept), "a run not yet over is never expired");
    }
    assert!(
        store
            .expired_runs(done.ended_at.unwrap() - 1, None, 10)
            .await
            .unwrap()
            .iter()
            .all(|e| e.id != done.id)
    );
    store.forget_runs(&[done.id]).await.unwrap();
    assert!(store.run(done.id).await.unwrap().is_none());
    assert!(store.stages(done.id).await.unwrap().is_empty());
    assert!(store.events(done.id, 0).await.unwrap().is_empty());
    assert!(store.snapshot(done.id).await.unwrap().is_none());
    assert!(store.progress(done.id, 1).await.unwrap().is_empty(), "its progress series goes too");
    assert!(store.checkpoints(done.id).await.unwrap().is_empty(), "its checkpoints go too");
    assert!(store.metric_rows(done.id).await.unwrap().is_empty(), "its metric history goes too");
    assert!(store.run(ending.id).await.unwrap().is_some());
}

async fn racing_writers_cannot_both_win(store: Arc<dyn Store>) {
    let run = insert(&*store, 0).await;
    let mut tasks = Vec::new();
    for trigger in [RunTrigger::Claim, RunTrigger::Cancel, RunTrigger::Claim, RunTrigger::Cancel] {
        let (store, run) = (Arc::clone(&store), run.clone());
        tasks.push(tokio::spawn(async move { store.transition(&run, trigger, None, None).await }));
    }
    let mut wins = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => wins += 1,
            Err(StoreError::Conflict { .. }) => {}
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert_eq!(wins, 1, "exactly one writer moves a given version");
    let states = store.events(run.id, 0).await.unwrap().iter().filter(|e| e.kind == EventKind::State).count();
    assert_eq!(states, 1);
}

async fn the_daemon_lock_is_exclusive(store: &dyn Store) {
    let lock = store.lock_daemon("n1").await.unwrap();
    match store.lock_daemon("n1").await {
        Err(StoreError::Locked(message)) => {
            assert!(message.contains("another lachesis daemon is already running"), "{message}")
        }
        Err(other) => panic!("unexpected {other}"),
        Ok(_) => panic!("a second daemon lock was granted"),
    }
    drop(lock);
    let again = async {
        for _ in 0..50 {
            if let Ok(lock) = store.lock_daemon("n1").await {
                return Some(lock);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        None
    };
    assert!(again.await.is_some(), "the lock is free again once released");
}
