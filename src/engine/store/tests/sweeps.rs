//! Sweeps in the store: a sweep and its members land together or not at all, members read back
//! in order with their runs, max_live's count is of the members in flight, and a sweep's moves
//! are compare-and-sets, and the leaderboard's summaries say what the members' series say; on
//! SQLite and PostgreSQL.

use std::path::PathBuf;

use uuid::Uuid;

use crate::engine::store::{NewDependency, Store, StoreError, SweepStore};
use crate::model::dependency::{Awaited, Settled, When};
use crate::model::sweep::{MemberOf, SweepRecord, SweepState, SweepWinner};
use crate::model::{Run, RunParams, RunState, RunTrigger, Stage, now_millis, short_id};
use crate::workflow::Workflow;

on_both_backends!(
    a_sweep_and_its_members_land_together_or_not_at_all,
    max_live_counts_the_members_in_flight,
    a_sweep_moves_by_compare_and_set,
    a_sweeps_series_are_each_members_in_one_read,
    a_sweeps_end_settles_the_runs_waiting_for_it,
    a_sweep_and_the_runs_waiting_for_it_land_together_or_not_at_all,
    a_report_tallies_every_member_of_its_sweeps_in_one_read,
    a_sweeps_summaries_are_its_series_at_a_glance,
    a_suggested_member_is_written_once_and_only_to_a_live_sweep,
);

pub(super) fn sweep(members: u64, max_live: Option<u32>) -> SweepRecord {
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
        winner: None,
        created_at: now,
        updated_at: now,
        member_setup: None,
    }
}

pub(super) fn members(sweep: &SweepRecord) -> Vec<(Run, Vec<Stage>)> {
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
    let read = store.sweep_member_runs(first.id).await.unwrap();
    let ks: Vec<u64> = read.iter().map(|(k, _)| *k).collect();
    assert_eq!(ks, vec![0, 1, 2]);
    for ((k, run), (written, _)) in read.iter().zip(&runs) {
        assert_eq!(run.id, written.id);
        assert_eq!(run.params.sweep, Some(MemberOf { sweep: first.id, k: *k }), "a member knows its sweep");
        assert_eq!(run.params.vars["lr"], k.to_string());
    }
    let prefix = &first.id.to_string()[..8];
    assert_eq!(store.sweeps_by_prefix(prefix, 6).await.unwrap(), vec![first.clone()]);
    assert!(store.sweeps_by_prefix("%", 6).await.unwrap().is_empty(), "only hex and dashes are a prefix");

    // A member that cannot be written (its run id is taken) leaves neither the sweep nor any run.
    let second = sweep(2, None);
    let mut clash = members(&second);
    clash[1].0.id = runs[0].0.id;
    assert!(store.insert_sweep(&second, &clash).await.is_err());
    assert_eq!(store.sweep(second.id).await.unwrap(), None);
    assert!(store.run(clash[0].0.id).await.unwrap().is_none(), "its first member is gone with it");
    assert!(store.sweep_member_runs(second.id).await.unwrap().is_empty());

    let third = sweep(1, None);
    store.insert_sweep(&third, &members(&third)).await.unwrap();
    let listed: Vec<Uuid> = store.list_sweeps(10).await.unwrap().iter().map(|s| s.id).collect();
    assert_eq!(listed, vec![third.id, first.id], "newest first");

    // A forgotten run leaves its sweep with it (retention, `lachesis gc`).
    store.forget_runs(&[runs[0].0.id]).await.unwrap();
    let left: Vec<u64> = store.sweep_member_runs(first.id).await.unwrap().iter().map(|(k, _)| *k).collect();
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

/// A run that is no sweep's member, waiting for what `deps` name.
fn waiting(deps: Vec<NewDependency>) -> (Run, Vec<Stage>, Vec<NewDependency>) {
    let spec = Workflow::parse(
        std::path::Path::new("w.yaml"),
        "name: w\nstages:\n  - {name: main, argv: ['true']}\n",
    )
    .unwrap();
    let id = Uuid::new_v4();
    let run = Run::queued(id, spec, PathBuf::from(format!("/runs/{id}")), 0, RunParams::default());
    let stages = run.pending_stages();
    (run, stages, deps)
}

/// A sweep's end settles the runs waiting for it in its own transaction: its winner meets them
/// (and is recorded); a stop, or an end without a winner, fails them with a reason naming the
/// sweep, and the runs waiting for those fail in turn. A sweep that has ended is settled at
/// submission: met as written, or refused with nothing written.
async fn a_sweeps_end_settles_the_runs_waiting_for_it(store: &dyn Store) {
    let on =
        |sweep: &SweepRecord, name: Option<&str>| NewDependency::on_sweep(sweep.id, name.map(str::to_string));
    let won = sweep(2, None);
    let stopped = sweep(1, None);
    let empty = sweep(1, None);
    for record in [&won, &stopped, &empty] {
        store.insert_sweep(record, &members(record)).await.unwrap();
    }
    let eval = waiting(vec![on(&won, Some("tune"))]);
    let after_eval = waiting(vec![NewDependency::on_run(eval.0.id, When::Ok, None)]);
    let x = waiting(vec![on(&stopped, None)]);
    let after_x = waiting(vec![NewDependency::on_run(x.0.id, When::Ok, None)]);
    let cleanup = waiting(vec![NewDependency::on_run(x.0.id, When::Any, None)]);
    let z = waiting(vec![on(&empty, None)]);
    let written = store
        .insert_runs_after(&[
            eval.clone(),
            after_eval.clone(),
            x.clone(),
            after_x.clone(),
            cleanup.clone(),
            z.clone(),
        ])
        .await
        .unwrap();
    assert!(written.iter().all(|run| run.deps_open == 1));
    let deps = store.dependencies(eval.0.id).await.unwrap();
    assert_eq!(
        (deps[0].awaited, deps[0].when, deps[0].name.as_deref(), deps[0].settled),
        (
            Awaited::Sweep { sweep: won.id, state: Some(SweepState::Live) },
            When::Ok,
            Some("tune"),
            Settled::Waiting
        )
    );
    let open = store.open_dependencies(&[eval.0.id, z.0.id]).await.unwrap();
    assert_eq!(open.len(), 2, "{open:?}");
    assert!(open.iter().all(|(_, d)| matches!(d.awaited, Awaited::Sweep { .. })));

    // A target is not an end: its running members may still win.
    assert!(
        store
            .move_sweep(won.id, SweepState::Live, SweepState::Target, Some("member 1 reached it"))
            .await
            .unwrap()
    );
    assert_eq!(store.run(eval.0.id).await.unwrap().unwrap().deps_open, 1);
    let winner = SweepWinner { k: 1, run: Uuid::new_v4(), value: 0.25 };
    assert_eq!(store.end_sweep(won.id, SweepState::Target, Some(&winner), None).await.unwrap(), Some(1));
    assert_eq!(store.end_sweep(won.id, SweepState::Target, Some(&winner), None).await.unwrap(), None, "once");
    let read = store.sweep(won.id).await.unwrap().unwrap();
    assert_eq!((read.state, read.winner), (SweepState::Done, Some(winner)));
    let met = store.run(eval.0.id).await.unwrap().unwrap();
    assert_eq!((met.state, met.deps_open), (RunState::Pending, 0));
    let notes: Vec<String> =
        store.events(eval.0.id, 0).await.unwrap().into_iter().map(|e| e.message).collect();
    let met_note = format!("dependency sweep {} done: met (0 left)", short_id(&won.id));
    assert!(notes.contains(&met_note), "{notes:?}");
    assert_eq!(store.dependencies(eval.0.id).await.unwrap()[0].settled, Settled::Met);
    assert_eq!(store.run(after_eval.0.id).await.unwrap().unwrap().deps_open, 1, "its own wait is on eval");

    // A stop fails what waits for the sweep, and what waits for that, in the stop's commit.
    assert!(
        store
            .move_sweep(stopped.id, SweepState::Live, SweepState::Stopped, Some("stop requested"))
            .await
            .unwrap()
    );
    let failed = store.run(x.0.id).await.unwrap().unwrap();
    let reason = format!("sweep {} was stopped", short_id(&stopped.id));
    assert_eq!((failed.state, failed.reason.as_deref()), (RunState::Failed, Some(reason.as_str())));
    let cascaded = store.run(after_x.0.id).await.unwrap().unwrap();
    let reason = format!("dependency {} failed", short_id(&x.0.id));
    assert_eq!((cascaded.state, cascaded.reason.as_deref()), (RunState::Failed, Some(reason.as_str())));
    let freed = store.run(cleanup.0.id).await.unwrap().unwrap();
    assert_eq!((freed.state, freed.deps_open), (RunState::Pending, 0), "a cleanup `any` still starts");
    // Its end later records no winner and settles nothing more.
    assert_eq!(store.end_sweep(stopped.id, SweepState::Stopped, None, None).await.unwrap(), Some(0));
    let read = store.sweep(stopped.id).await.unwrap().unwrap();
    assert_eq!(
        (read.state, read.reason.as_deref(), read.winner),
        (SweepState::Done, Some("stop requested"), None)
    );

    // An end with no member that reported the metric fails its waiting run, saying why.
    let why = "no member reported loss";
    assert_eq!(store.end_sweep(empty.id, SweepState::Live, None, Some(why)).await.unwrap(), Some(1));
    let failed = store.run(z.0.id).await.unwrap().unwrap();
    let reason = format!("sweep {} ended without a winner ({why})", short_id(&empty.id));
    assert_eq!((failed.state, failed.reason.as_deref()), (RunState::Failed, Some(reason.as_str())));
    store.fan_out_notifications(&["http://127.0.0.1:9/h".to_string()], 100).await.unwrap();
    let told = store.webhook_deliveries(100, None).await.unwrap();
    for run in [x.0.id, after_x.0.id, z.0.id] {
        let subject = run.to_string();
        assert!(told.iter().any(|d| d.subject == subject && d.event == "run_failed"), "no notice of {run}");
    }
    assert!(told.iter().any(|d| d.event == "sweep_ended"), "the sweeps' ends are notified");

    // Submitted after the end: met as written by a winner; refused, writing nothing, otherwise.
    let late = waiting(vec![on(&won, Some("tune"))]);
    let written = store.insert_runs_after(std::slice::from_ref(&late)).await.unwrap();
    assert_eq!(written[0].deps_open, 0);
    assert_eq!(store.dependencies(late.0.id).await.unwrap()[0].settled, Settled::Met);
    for (ended, reason) in [
        (&stopped, format!("sweep {} ended without a winner (stop requested)", short_id(&stopped.id))),
        (&empty, format!("sweep {} ended without a winner ({why})", short_id(&empty.id))),
    ] {
        let refused = waiting(vec![on(ended, None)]);
        match store.insert_runs_after(std::slice::from_ref(&refused)).await {
            Err(StoreError::Unmet { reason: got }) => assert_eq!(got, reason),
            other => panic!("not refused: {other:?}"),
        }
        assert!(store.run(refused.0.id).await.unwrap().is_none(), "nothing written");
    }
    let unknown = waiting(vec![NewDependency::on_sweep(Uuid::new_v4(), None)]);
    assert!(matches!(store.insert_runs_after(&[unknown]).await, Err(StoreError::Unmet { .. })));
}

/// A pipeline's sweep and the runs waiting for it are written in one transaction, or not at all.
async fn a_sweep_and_the_runs_waiting_for_it_land_together_or_not_at_all(store: &dyn Store) {
    let tune = sweep(2, None);
    let tune_members = members(&tune);
    let eval = waiting(vec![NewDependency::on_sweep(tune.id, Some("tune".into()))]);
    let written = store
        .insert_sweeps_and_runs(&[(tune.clone(), tune_members.clone())], std::slice::from_ref(&eval))
        .await
        .unwrap();
    assert_eq!(written[0].deps_open, 1);
    assert_eq!(store.sweep_member_runs(tune.id).await.unwrap().len(), 2);

    // A run that cannot be written (its id is taken) takes the sweep and its members with it.
    let other = sweep(1, None);
    let other_members = members(&other);
    let mut clash = waiting(vec![NewDependency::on_sweep(other.id, None)]);
    clash.0.id = eval.0.id;
    assert!(store.insert_sweeps_and_runs(&[(other.clone(), other_members.clone())], &[clash]).await.is_err());
    assert_eq!(store.sweep(other.id).await.unwrap(), None);
    assert!(store.run(other_members[0].0.id).await.unwrap().is_none());
}

/// On PostgreSQL, a sweep's end that frees a waiting run wakes every daemon listening, from its
/// own commit (as a run's end does).
#[tokio::test]
async fn postgres_a_sweeps_end_that_frees_a_run_wakes_every_daemon() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let Some(url) = super::fresh_postgres().await else { return };
    let store =
        crate::engine::store::open(&crate::settings::StoreLocation::Postgres(url.clone())).await.unwrap();
    let woken = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&woken);
    let listener = tokio::spawn(async move {
        crate::engine::store::postgres::listen_for_wakes(&url, move || {
            counter.fetch_add(1, Ordering::SeqCst);
            true
        })
        .await
    });
    let tune = sweep(1, None);
    store.insert_sweep(&tune, &members(&tune)).await.unwrap();
    let eval = waiting(vec![NewDependency::on_sweep(tune.id, None)]);
    store.insert_runs_after(&[eval]).await.unwrap();
    // The listener is up once a wake of our own reaches it.
    super::wait_for("the listener to hear a wake", std::time::Duration::from_secs(20), async || {
        store.announce().await.unwrap();
        (woken.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    let before = woken.load(Ordering::SeqCst);
    let winner = SweepWinner { k: 0, run: Uuid::new_v4(), value: 1.0 };
    store.end_sweep(tune.id, SweepState::Live, Some(&winner), None).await.unwrap();
    super::wait_for("the end's wake", std::time::Duration::from_secs(20), async || {
        (woken.load(Ordering::SeqCst) > before).then_some(())
    })
    .await;
    listener.abort();
}

/// A report's tallies: every member of its sweeps, in one read.
async fn a_report_tallies_every_member_of_its_sweeps_in_one_read(store: &dyn Store) {
    use crate::model::{MetricReading, RunState};
    let now = now_millis();
    let hour = 3_600_000;
    let live = sweep(3, None);
    let plain = sweep(2, None);
    // Done before the window: not in the report; done in it: in.
    let old = SweepRecord { state: SweepState::Done, updated_at: now - 20 * hour, ..sweep(1, None) };
    let recent = SweepRecord { state: SweepState::Done, updated_at: now - hour, ..sweep(1, None) };
    let mut written = Vec::new();
    for record in [&old, &live, &plain, &recent] {
        let runs = members(record);
        store.insert_sweep(record, &runs).await.unwrap();
        written.push(runs);
    }
    let (reported, total) = store.sweeps_for_report(now - 12 * hour, 10).await.unwrap();
    let ids: Vec<Uuid> = reported.iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![recent.id, plain.id, live.id], "newest first, the old done one left out");
    assert_eq!(total, 3);
    let (first, total) = store.sweeps_for_report(now - 12 * hour, 1).await.unwrap();
    assert_eq!((first.len(), total), (1, 3), "bounded, and all counted");

    let runs = &written[1];
    let r = |name: &str, step, value| MetricReading::new(name, step, value).unwrap();
    let (a, b) = (runs[0].0.id, runs[1].0.id);
    store
        .put_metric_values(
            a,
            1,
            &[r("loss", 1, 3.0), r("loss", 2, 2.0), r("loss", 3, 1.5), r("lr", 1, 0.01)],
            10,
        )
        .await
        .unwrap();
    // Resumed from step 2: the first attempt's 2.0 and 1.5 are not the series' any more.
    store.put_metric_values(a, 2, &[r("loss", 2, 2.5)], 20).await.unwrap();
    store.put_metric_values(b, 1, &[r("loss", 1, 9.0), r("loss", 4, 0.5)], 10).await.unwrap();
    let claimed = store.transition(&runs[1].0, RunTrigger::Claim, None, None).await.unwrap();
    store.transition(&claimed, RunTrigger::Fail, Some("boom"), None).await.unwrap();
    // Another sweep's member with the same metric is not this sweep's.
    store.put_metric_values(written[2][0].0.id, 1, &[r("loss", 1, 0.1)], 10).await.unwrap();

    let tallies = store.member_tallies(&[(live.id, Some("loss".into())), (plain.id, None)]).await.unwrap();
    let of = |sweep: Uuid| tallies.iter().filter(move |t| t.sweep == sweep).collect::<Vec<_>>();
    let live_tallies = of(live.id);
    assert_eq!(live_tallies.iter().map(|t| t.k).collect::<Vec<_>>(), vec![0, 1, 2], "every member, by k");
    let series = store.member_series(live.id, "loss").await.unwrap();
    for member in &live_tallies {
        let values: Vec<f64> =
            series.get(&member.run).map(|s| s.iter().map(|p| p.value).collect()).unwrap_or_default();
        let tally = member.tally.expect("a tally read has its readings");
        assert_eq!(tally.readings, values.len() as u64, "member {}: as its series", member.k);
        assert_eq!(tally.low, values.iter().copied().reduce(f64::min), "member {}", member.k);
        assert_eq!(tally.high, values.iter().copied().reduce(f64::max), "member {}", member.k);
    }
    assert_eq!(
        live_tallies[0].tally,
        Some(crate::model::sweep::Tally { readings: 2, low: Some(2.5), high: Some(3.0) })
    );
    assert_eq!((live_tallies[1].state, live_tallies[1].reason.as_deref()), (RunState::Failed, Some("boom")));
    assert!(live_tallies[1].started_at.is_some() && live_tallies[1].ended_at.is_some());
    assert_eq!(live_tallies[2].state, RunState::Pending);
    let plain_tallies = of(plain.id);
    assert_eq!(plain_tallies.len(), 2);
    assert!(
        plain_tallies.iter().all(|t| t.tally == Some(crate::model::sweep::Tally::default())),
        "no metric, no readings"
    );
    assert!(store.member_tallies(&[]).await.unwrap().is_empty());

    let states = store.member_states_of(&[live.id, plain.id, Uuid::new_v4()]).await.unwrap();
    assert_eq!(
        states[&live.id],
        [("failed".to_string(), 1), ("pending".to_string(), 2)].into_iter().collect()
    );
    assert_eq!(states[&plain.id], [("pending".to_string(), 2)].into_iter().collect());
    assert_eq!(states.len(), 2);
}

/// The tally walks the sweep's members by its key and each member's readings by theirs: no
/// scan of the runs or of the readings, however many the store keeps.
#[tokio::test]
async fn sqlite_tallies_seek_each_members_readings() {
    let dir = tempfile::tempdir().unwrap();
    let location = crate::settings::StoreLocation::Sqlite(dir.path().join("lachesis.db"));
    let store = crate::engine::store::open(&location).await.unwrap();
    let plan = super::sqlite_plan(&store, &crate::engine::store::sweeps::tallies_sql(2)).await;
    assert!(!plan.iter().any(|step| step.starts_with("SCAN")), "{plan:?}");
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
    let listed = store.sweep_members(record.id).await.unwrap();
    assert_eq!(
        listed.iter().map(|m| (m.k, m.run)).collect::<Vec<_>>(),
        ids.iter().copied().enumerate().map(|(k, id)| (k as u64, id)).collect::<Vec<_>>()
    );
    assert!(listed.iter().all(|m| m.state == crate::model::RunState::Pending && m.started_at.is_none()));
    assert!(
        listed.iter().all(|m| m.sweep == record.id && m.tally.is_none()),
        "a leaderboard read reads no tally"
    );
}

/// A bayes sweep's member k: written with its suggestion, its run and its stages together;
/// written again (a retried pass, another node) nothing; and never to a sweep no longer live.
async fn a_suggested_member_is_written_once_and_only_to_a_live_sweep(store: &dyn Store) {
    let bayes = sweep(3, Some(2));
    store.insert_sweep(&bayes, &[]).await.unwrap();
    let runs = members(&bayes);
    let suggestion = serde_json::json!({"lr": 0.001, "opt": "adam"});
    let (run, stages) = &runs[0];
    assert!(store.add_member(bayes.id, 0, &suggestion, run, stages).await.unwrap());
    // Member 0 again, as another run: the key holds it once, and the other run is not written.
    let (other, other_stages) = &runs[1];
    assert!(!store.add_member(bayes.id, 0, &suggestion, other, other_stages).await.unwrap());
    assert!(store.run(other.id).await.unwrap().is_none());
    let read = store.sweep_members(bayes.id).await.unwrap();
    assert_eq!(read.iter().map(|m| (m.k, m.run)).collect::<Vec<_>>(), vec![(0, run.id)]);
    assert_eq!(read[0].suggestion.as_ref(), Some(&suggestion));
    assert_eq!(store.run(run.id).await.unwrap().map(|r| r.state), Some(RunState::Pending));
    assert_eq!(store.stages(run.id).await.unwrap().len(), stages.len());
    // Stopped: no member is added any more.
    assert!(
        store.move_sweep(bayes.id, SweepState::Live, SweepState::Stopped, Some("by hand")).await.unwrap()
    );
    assert!(!store.add_member(bayes.id, 1, &suggestion, other, other_stages).await.unwrap());
    assert!(store.run(other.id).await.unwrap().is_none());
    // A grid's members have no suggestion.
    let grid = sweep(1, None);
    store.insert_sweep(&grid, &members(&grid)).await.unwrap();
    assert_eq!(store.sweep_members(grid.id).await.unwrap()[0].suggestion, None);
}
