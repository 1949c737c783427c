//! Sweeps in the store: a sweep and its members land together or not at all, members read back
//! in order with their runs, max_live's count is of the members in flight, and a sweep's moves
//! are compare-and-sets, and the leaderboard's summaries say what the members' series say; on
//! SQLite and PostgreSQL.

use std::path::PathBuf;

use uuid::Uuid;

use crate::engine::store::Store;
use crate::model::sweep::{MemberOf, SweepRecord, SweepState};
use crate::model::{Run, RunParams, RunTrigger, Stage, now_millis};
use crate::workflow::Workflow;

on_both_backends!(
    a_sweep_and_its_members_land_together_or_not_at_all,
    max_live_counts_the_members_in_flight,
    a_sweep_moves_by_compare_and_set,
    a_sweeps_series_are_each_members_in_one_read,
    a_sweeps_summaries_are_its_series_at_a_glance,
);

fn sweep(members: u64, max_live: Option<u32>) -> SweepRecord {
    let now = now_millis();
    SweepRecord {
        id: Uuid::new_v4(),
        file: "method: grid\nworkflow: t\nparameters: {lr: {values: [1, 2]}}\n".into(),
        config: serde_json::json!({"method": "grid"}),
        workflow: "t".into(),
        members,
        max_live,
        state: SweepState::Live,
        reason: None,
        created_at: now,
        updated_at: now,
    }
}

fn members(sweep: &SweepRecord) -> Vec<(Run, Vec<Stage>)> {
    let spec = Workflow::parse(
        std::path::Path::new("t.yaml"),
        "name: t\nvars: {lr: '1'}\nstages:\n  - {name: trainer, argv: ['true']}\n",
    )
    .unwrap();
    (0..sweep.members)
        .map(|k| {
            let id = Uuid::new_v4();
            let params = RunParams {
                vars: [("lr".to_string(), k.to_string())].into(),
                sweep: Some(MemberOf { sweep: sweep.id, k }),
                ..RunParams::default()
            };
            let run = Run {
                workflow: "t".into(),
                ..Run::queued(id, spec.clone(), PathBuf::from(format!("/runs/{id}")), 0, params)
            };
            let stages = run.pending_stages();
            (run, stages)
        })
        .collect()
}

async fn a_sweep_and_its_members_land_together_or_not_at_all(store: &dyn Store) {
    let first = sweep(3, Some(2));
    let runs = members(&first);
    store.insert_sweep(&first, &runs).await.unwrap();
    assert_eq!(store.sweep(first.id).await.unwrap().as_ref(), Some(&first));
    let read = store.sweep_members(first.id).await.unwrap();
    let ks: Vec<u64> = read.iter().map(|(k, _)| *k).collect();
    assert_eq!(ks, vec![0, 1, 2]);
    for ((k, run), (written, _)) in read.iter().zip(&runs) {
        assert_eq!(run.id, written.id);
        assert_eq!(run.params.sweep, Some(MemberOf { sweep: first.id, k: *k }), "a member knows its sweep");
        assert_eq!(run.params.vars["lr"], k.to_string());
    }
    let prefix = &first.id.to_string()[..8];
    assert_eq!(store.sweeps_by_prefix(prefix, 6).await.unwrap(), vec![first.clone()]);
    assert!(store.sweeps_by_prefix("%", 6).await.unwrap().is_empty(), "only hex reaches LIKE");

    // A member that cannot be written (its run id is taken) leaves neither the sweep nor any run.
    let second = sweep(2, None);
    let mut clash = members(&second);
    clash[1].0.id = runs[0].0.id;
    assert!(store.insert_sweep(&second, &clash).await.is_err());
    assert_eq!(store.sweep(second.id).await.unwrap(), None);
    assert!(store.run(clash[0].0.id).await.unwrap().is_none(), "its first member is gone with it");
    assert!(store.sweep_members(second.id).await.unwrap().is_empty());

    let third = sweep(1, None);
    store.insert_sweep(&third, &members(&third)).await.unwrap();
    let listed: Vec<Uuid> = store.list_sweeps(10).await.unwrap().iter().map(|s| s.id).collect();
    assert_eq!(listed, vec![third.id, first.id], "newest first");

    // A forgotten run leaves its sweep with it (retention, `lachesis gc`).
    store.forget_runs(&[runs[0].0.id]).await.unwrap();
    let left: Vec<u64> = store.sweep_members(first.id).await.unwrap().iter().map(|(k, _)| *k).collect();
    assert_eq!(left, vec![1, 2]);
    assert!(store.sweeps_of_runs(&[runs[0].0.id]).await.unwrap().is_empty());
}

async fn max_live_counts_the_members_in_flight(store: &dyn Store) {
    let limited = sweep(3, Some(2));
    let limited_runs = members(&limited);
    store.insert_sweep(&limited, &limited_runs).await.unwrap();
    let open = sweep(2, None);
    let open_runs = members(&open);
    store.insert_sweep(&open, &open_runs).await.unwrap();

    let slots = store.sweep_slots().await.unwrap();
    assert_eq!(slots.len(), 1, "only a live sweep with a max_live has slots: {slots:?}");
    assert_eq!((slots[&limited.id].max_live, slots[&limited.id].in_flight), (2, 0));
    assert!(store.sweeps_in_flight().await.unwrap().is_empty());

    let started = store.transition(&limited_runs[0].0, RunTrigger::Claim, None, None).await.unwrap();
    store.transition(&open_runs[1].0, RunTrigger::Claim, None, None).await.unwrap();
    store.transition(&limited_runs[2].0, RunTrigger::Cancel, None, None).await.unwrap();
    let slots = store.sweep_slots().await.unwrap();
    assert_eq!(slots[&limited.id].in_flight, 1, "a cancelled member is not in flight");
    assert!(slots[&limited.id].has_room());
    let in_flight = store.sweep_slots().await.unwrap();
    assert_eq!(in_flight.len(), 1);
    assert_eq!(
        store.sweeps_in_flight().await.unwrap(),
        [(limited.id, 1), (open.id, 1)].into_iter().collect(),
    );
    store.transition(&limited_runs[1].0, RunTrigger::Claim, None, None).await.unwrap();
    assert!(!store.sweep_slots().await.unwrap()[&limited.id].has_room(), "two of two in flight");

    // An ended member frees its slot.
    store.transition(&started, RunTrigger::Fail, Some("boom"), None).await.unwrap();
    assert_eq!(store.sweep_slots().await.unwrap()[&limited.id].in_flight, 1);

    // A stopped sweep starts no member: it has no room at all; a done one is not read.
    assert!(
        store
            .move_sweep(limited.id, SweepState::Live, SweepState::Stopped, Some("stop requested"))
            .await
            .unwrap()
    );
    let slots = store.sweep_slots().await.unwrap();
    assert_eq!((slots[&limited.id].max_live, slots[&limited.id].has_room()), (0, false));
    assert!(store.move_sweep(limited.id, SweepState::Stopped, SweepState::Done, None).await.unwrap());
    assert!(store.sweep_slots().await.unwrap().is_empty());
    let of: Vec<Uuid> = vec![open_runs[0].0.id, limited_runs[1].0.id, Uuid::new_v4()];
    assert_eq!(store.sweeps_of_runs(&of).await.unwrap(), [open.id, limited.id].into_iter().collect());
}

async fn a_sweep_moves_by_compare_and_set(store: &dyn Store) {
    let record = sweep(2, None);
    let runs = members(&record);
    store.insert_sweep(&record, &runs).await.unwrap();
    let why = "member 0 reached the target";
    assert!(store.move_sweep(record.id, SweepState::Live, SweepState::Target, Some(why)).await.unwrap());
    assert!(
        !store.move_sweep(record.id, SweepState::Live, SweepState::Target, Some(why)).await.unwrap(),
        "once"
    );
    assert!(
        !store.move_sweep(record.id, SweepState::Target, SweepState::Live, None).await.unwrap(),
        "never back"
    );
    let read = store.sweep(record.id).await.unwrap().unwrap();
    assert_eq!((read.state, read.reason.as_deref()), (SweepState::Target, Some(why)));

    assert!(store.sweep_has_open_member(record.id).await.unwrap());
    for (run, _) in &runs {
        store.transition(run, RunTrigger::Cancel, None, None).await.unwrap();
    }
    assert!(!store.sweep_has_open_member(record.id).await.unwrap());
    assert!(store.move_sweep(record.id, SweepState::Target, SweepState::Done, None).await.unwrap());
    let read = store.sweep(record.id).await.unwrap().unwrap();
    assert_eq!((read.state, read.reason.as_deref()), (SweepState::Done, Some(why)), "the reason stays");
    assert_eq!(store.sweeps_in_state(SweepState::Done).await.unwrap().len(), 1);
    assert!(store.sweeps_in_state(SweepState::Live).await.unwrap().is_empty());
}

async fn a_sweeps_series_are_each_members_in_one_read(store: &dyn Store) {
    use crate::model::MetricReading;
    let record = sweep(3, None);
    let runs = members(&record);
    store.insert_sweep(&record, &runs).await.unwrap();
    let r = |name: &str, step, value| MetricReading::new(name, step, value).unwrap();
    let (a, b) = (runs[0].0.id, runs[2].0.id);
    store
        .put_metric_values(
            a,
            1,
            &[r("loss", 1, 3.0), r("loss", 2, 2.0), r("loss", 3, 1.5), r("lr", 1, 0.1)],
            10,
        )
        .await
        .unwrap();
    // A resumed attempt from step 2: its readings replace the first attempt's from there on.
    store.put_metric_values(a, 2, &[r("loss", 2, 2.5)], 20).await.unwrap();
    store.put_metric_values(b, 1, &[r("loss", 1, 9.0)], 10).await.unwrap();
    let all = store.member_series(record.id, "loss").await.unwrap();
    assert_eq!(all.len(), 2, "a member without readings is absent: {all:?}");
    for id in [a, b] {
        assert_eq!(all[&id], store.metric_series(id, "loss").await.unwrap(), "as metric_series reads it");
    }
    let steps: Vec<(u32, i64, f64)> = all[&a].iter().map(|p| (p.attempt, p.step, p.value)).collect();
    assert_eq!(steps, vec![(1, 1, 3.0), (2, 2, 2.5)]);
    assert!(store.member_series(Uuid::new_v4(), "loss").await.unwrap().is_empty());
}

async fn a_sweeps_summaries_are_its_series_at_a_glance(store: &dyn Store) {
    use crate::model::MetricReading;
    use crate::model::sweep::{Goal, SeriesSummary};
    let record = sweep(4, None);
    let runs = members(&record);
    store.insert_sweep(&record, &runs).await.unwrap();
    let r = |name: &str, step, value| MetricReading::new(name, step, value).unwrap();
    let ids: Vec<Uuid> = runs.iter().map(|(run, _)| run.id).collect();
    // One attempt, the best reached twice (the first counts); another metric beside it.
    let one = [r("loss", 1, 3.0), r("loss", 2, 1.0), r("loss", 3, 2.0), r("loss", 4, 1.0), r("lr", 9, -5.0)];
    store.put_metric_values(ids[0], 1, &one, 10).await.unwrap();
    // Resumed from step 2: the first attempt's steps 2 and 3 (its best, 0.5) are no more.
    store
        .put_metric_values(ids[1], 1, &[r("loss", 1, 4.0), r("loss", 2, 0.5), r("loss", 3, 0.7)], 10)
        .await
        .unwrap();
    store.put_metric_values(ids[1], 2, &[r("loss", 2, 2.5), r("loss", 3, 2.0)], 20).await.unwrap();
    store.put_metric_values(ids[2], 1, &[r("loss", 7, 9.0)], 10).await.unwrap();
    for goal in [Goal::Minimize, Goal::Maximize] {
        let summaries = store.member_summaries(record.id, "loss", goal).await.unwrap();
        assert_eq!(summaries.len(), 3, "a member without readings is absent: {summaries:?}");
        for id in &ids[..3] {
            let series = store.metric_series(*id, "loss").await.unwrap();
            assert_eq!(summaries.get(id), SeriesSummary::of(&series, goal).as_ref(), "{goal:?}: {series:?}");
        }
    }
    let low = store.member_summaries(record.id, "loss", Goal::Minimize).await.unwrap();
    let glance = |id: &Uuid| {
        let s = low[id];
        (s.count, s.best.attempt, s.best.step, s.best.value, s.last.step, s.last.value)
    };
    assert_eq!(glance(&ids[0]), (4, 1, 2, 1.0, 4, 1.0));
    assert_eq!(glance(&ids[1]), (3, 2, 3, 2.0, 3, 2.0));
    assert!(store.member_summaries(record.id, "kl", Goal::Minimize).await.unwrap().is_empty());
    // The members as the leaderboard shows them: in order of k, with their state.
    let listed = store.sweep_member_runs(record.id).await.unwrap();
    assert_eq!(
        listed.iter().map(|m| (m.k, m.id)).collect::<Vec<_>>(),
        ids.iter().copied().enumerate().map(|(k, id)| (k as u64, id)).collect::<Vec<_>>()
    );
    assert!(listed.iter().all(|m| m.state == crate::model::RunState::Pending && m.started_at.is_none()));
}
