//! The morning report's reads: runs and tests by end time within a window, the ones still
//! going, the counts, a run's last checkpoint, weights and metric row, and the cron post's
//! compare-and-set; on SQLite and PostgreSQL. On SQLite the window's read is checked to walk
//! the end-time index rather than the table, and each listed run's extras to be index seeks.

use std::path::PathBuf;

use uuid::Uuid;

use crate::engine::store::{ListedRun, Store};
use crate::model::{FoundCheckpoint, InferenceTest, MetricRow, Run, RunParams, RunState, Stage, TestState};
use crate::settings::StoreLocation;
use crate::workflow::Workflow;

use super::fresh_postgres;

const HOUR: i64 = 3_600_000;

fn run_as(state: RunState, ended_at: Option<i64>) -> (Run, Vec<Stage>) {
    run_of("name: r\nstages:\n  - {name: trainer, argv: ['true']}\n", state, ended_at)
}

/// A run of a workflow that reports its step in its log.
fn run_with_progress(state: RunState, ended_at: Option<i64>) -> (Run, Vec<Stage>) {
    let yaml = "name: p\nstages:\n  - {name: trainer, argv: ['true']}\n\
                progress:\n  log: {stage: trainer, pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}\n";
    run_of(yaml, state, ended_at)
}

fn run_of(yaml: &str, state: RunState, ended_at: Option<i64>) -> (Run, Vec<Stage>) {
    let spec = Workflow::parse(std::path::Path::new("r.yaml"), yaml).unwrap();
    let id = Uuid::new_v4();
    let mut run = Run::queued(id, spec, PathBuf::from(format!("/runs/{id}")), 0, RunParams::default());
    run.state = state;
    run.started_at =
        ended_at.map(|end| end - HOUR).or((state != RunState::Pending).then_some(run.created_at));
    run.ended_at = ended_at;
    let stages = run.pending_stages();
    (run, stages)
}

fn test_as(state: TestState, ended_at: Option<i64>) -> InferenceTest {
    let spec = crate::inference::spec::InferenceSpec {
        env_name: "arith".into(),
        env_file: PathBuf::from("/envs/arith.py"),
        env_kind: Default::default(),
        import_dir: None,
        env_args: Default::default(),
        python: "python3".into(),
        models: vec!["m1".into()],
        steps: 1,
        group_size: 1,
        provider: crate::inference::spec::Provider::openrouter(),
        timeout: crate::workflow::Dur(std::time::Duration::from_secs(60)),
        concurrency: 1,
        locked_env: Default::default(),
    };
    InferenceTest {
        state,
        ended_at,
        ..InferenceTest::queued(Uuid::new_v4(), spec, None, std::path::Path::new("/tests"))
    }
}

async fn report_reads(store: &dyn Store) {
    let now = crate::model::now_millis();
    let since = now - 12 * HOUR;
    let old = run_as(RunState::Completed, Some(now - 20 * HOUR));
    let completed = run_as(RunState::Completed, Some(now - 3 * HOUR));
    let failed = run_as(RunState::Failed, Some(now - 2 * HOUR));
    let stopped = run_as(RunState::Stopped, Some(now - HOUR));
    let running = run_as(RunState::Running, None);
    let pending = run_as(RunState::Pending, None);
    let mut held = run_as(RunState::Pending, None);
    held.0.held_at = Some(now);
    let all = [&old, &completed, &failed, &stopped, &running, &pending, &held].map(|r| r.clone());
    store.insert_runs(&all).await.unwrap();

    let ids = |runs: Vec<ListedRun>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    // The latest end first; the run that ended before the window is not read.
    let ended = ids(store.runs_ended_since(since, 100).await.unwrap());
    assert_eq!(ended, [stopped.0.id, failed.0.id, completed.0.id]);
    assert_eq!(ids(store.runs_ended_since(since, 2).await.unwrap()), [stopped.0.id, failed.0.id]);
    assert_eq!(ids(store.runs_in_flight(100).await.unwrap()), [running.0.id]);
    let counts = store.ended_run_counts(since).await.unwrap();
    let expected = [(RunState::Completed, 1), (RunState::Failed, 1), (RunState::Stopped, 1)];
    assert_eq!(counts.iter().collect::<Vec<_>>(), expected);
    assert_eq!(store.held_count().await.unwrap(), 1);

    // Tests, the same way.
    let tests = [
        test_as(TestState::Succeeded, Some(now - 20 * HOUR)),
        test_as(TestState::Succeeded, Some(now - 4 * HOUR)),
        test_as(TestState::Regressed, Some(now - HOUR)),
        test_as(TestState::Running, None),
        test_as(TestState::Queued, None),
        test_as(TestState::Queued, None),
    ];
    for test in &tests {
        store.insert_test(test, &test.pending_tasks()).await.unwrap();
    }
    let ended: Vec<Uuid> = store.tests_ended_since(since, 100).await.unwrap().iter().map(|t| t.id).collect();
    assert_eq!(ended, [tests[2].id, tests[1].id]);
    let counts = store.ended_test_counts(since).await.unwrap();
    assert_eq!(counts.iter().collect::<Vec<_>>(), [(TestState::Regressed, 1), (TestState::Succeeded, 1)]);
    let live = store.live_test_counts().await.unwrap();
    assert_eq!(live.iter().collect::<Vec<_>>(), [(TestState::Queued, 2), (TestState::Running, 1)]);

    // A run's last checkpoint, its last weights (an earlier checkpoint's when the last has
    // none) and its last metric row that holds a metric.
    let id = completed.0.id;
    assert_eq!(store.last_checkpoint(id).await.unwrap(), None);
    assert_eq!(store.last_weights(id).await.unwrap(), None);
    let found = |step: i64, weights: Option<&str>| FoundCheckpoint {
        step,
        path: Some(format!("tinker://run/weights/{step}")),
        weights: weights.map(str::to_string),
        key: format!("line {step}"),
    };
    store
        .record_checkpoint(id, 1, &found(50, Some("tinker://run/sampler_weights/50")), now - 5 * HOUR)
        .await
        .unwrap();
    store.record_checkpoint(id, 1, &found(100, None), now - 4 * HOUR).await.unwrap();
    assert_eq!(store.last_checkpoint(id).await.unwrap().map(|c| c.step), Some(100));
    assert_eq!(store.last_weights(id).await.unwrap().as_deref(), Some("tinker://run/sampler_weights/50"));
    let row = |step: i64, reward: Option<f64>| MetricRow {
        step,
        reward_mean: reward,
        recorded_at: now,
        ..MetricRow::default()
    };
    store.put_metric_rows(id, &[row(10, Some(0.2)), row(20, Some(0.6)), row(30, None)]).await.unwrap();
    let last = store.last_values(&[id, failed.0.id], "train/reward_mean").await.unwrap();
    assert_eq!(last.len(), 1, "{last:?}");
    assert_eq!((last[&id].step, last[&id].value), (20, 0.6));

    // The cron post: the first read records now; a move lands once.
    let first = store.report_post_since("0 7 * * * UTC", now).await.unwrap();
    assert_eq!(first, now);
    assert_eq!(store.report_post_since("0 7 * * * UTC", now + 5).await.unwrap(), now, "kept, not reset");
    assert!(store.claim_report_post("0 7 * * * UTC", now, now + HOUR).await.unwrap());
    assert!(!store.claim_report_post("0 7 * * * UTC", now, now + 2 * HOUR).await.unwrap(), "moved already");
    assert_eq!(store.report_post_since("0 7 * * * UTC", now).await.unwrap(), now + HOUR);
    assert_eq!(store.report_post_since("0 8 * * * UTC", now + 9).await.unwrap(), now + 9, "its own row");
}

/// The listed runs come with what the single-row reads give for each: runs in flight (one on
/// its second attempt, one whose records hold no total, no weights and no metric, one with
/// nothing recorded) with their attempt's ends, ended runs with their last step; metric values
/// to their last bit; two changes of step or two checkpoints in the same millisecond give
/// either. The set reads over listed ids (weights, stages, first starts) give the same across a
/// chunk's edge.
async fn set_reads_answer_as_the_single_rows(store: &dyn Store) {
    use crate::model::{Exit, MetricReading, ProcessState, ProgressPoint, RunTrigger};
    let now = crate::model::now_millis();
    let (retried, quiet, bare) = (
        run_with_progress(RunState::Pending, None),
        run_as(RunState::Pending, None),
        run_as(RunState::Pending, None),
    );
    let (done, tied, silent) = (
        run_with_progress(RunState::Completed, Some(now - 200)),
        run_as(RunState::Completed, Some(now - 150)),
        run_as(RunState::Failed, Some(now - 100)),
    );
    store
        .insert_runs(&[
            retried.clone(),
            quiet.clone(),
            bare.clone(),
            done.clone(),
            tied.clone(),
            silent.clone(),
        ])
        .await
        .unwrap();
    let point = |attempt, step, total, at| ProgressPoint { attempt, step, total, at };
    let found = |step: i64, weights: Option<&str>, key: &str| FoundCheckpoint {
        step,
        path: Some(format!("tinker://run/weights/{step}")),
        weights: weights.map(str::to_string),
        key: key.to_string(),
    };
    let metric = |step: i64, reward: Option<f64>| MetricRow {
        step,
        reward_mean: reward,
        recorded_at: now,
        ..MetricRow::default()
    };

    // The retried run: attempt 1 starts, records, fails a stage and is requeued; attempt 2
    // starts and records more.
    let id = retried.0.id;
    let run = store.transition(&retried.0, RunTrigger::Claim, None, None).await.unwrap();
    for p in [point(1, 0, None, now - 900), point(1, 5, Some(10), now - 800), point(1, 7, None, now - 700)] {
        store.record_progress(id, &p).await.unwrap();
    }
    store
        .record_checkpoint(id, 1, &found(5, Some("tinker://run/sampler_weights/5"), "line 5"), now - 750)
        .await
        .unwrap();
    let mut stage = store.stages(id).await.unwrap().remove(0);
    stage.record.state = ProcessState::Exited;
    stage.record.started_at = Some(now - 950);
    stage.record.ended_at = Some(now - 650);
    stage.record.exit = Some(Exit::Code(1));
    store.update_stage(&stage, None).await.unwrap();
    let run = store.transition(&run, RunTrigger::Retry, Some("exited 1"), None).await.unwrap();
    let run = store.requeue(&run, RunTrigger::AllStagesGone, "retry", now).await.unwrap();
    store.transition(&run, RunTrigger::Claim, None, None).await.unwrap();
    for p in
        [point(2, 6, Some(10), now - 500), point(2, 8, Some(10), now - 400), point(2, 9, None, now - 300)]
    {
        store.record_progress(id, &p).await.unwrap();
    }
    store.record_checkpoint(id, 2, &found(8, None, "line 8"), now - 350).await.unwrap();
    store.put_metric_rows(id, &[metric(5, Some(0.2)), metric(8, Some(0.5)), metric(9, None)]).await.unwrap();
    // Values whose shortest text has 17 digits, the smallest and largest, and W&B's plain `loss`.
    let exact = [
        ("train/reward_mean", 0.1 + 0.2),
        ("train/percent_correct", 1.0 / 3.0),
        ("eval/percent_correct", 5e-324),
        ("train/loss", f64::MAX),
        ("loss", -2.5e-8),
    ];
    let readings: Vec<MetricReading> =
        exact.iter().map(|(name, value)| MetricReading::new(*name, 12, *value).unwrap()).collect();
    store.put_metric_values(id, 2, &readings, now - 250).await.unwrap();

    // The bare run: no total, no weights, no metric.
    let bare_id = bare.0.id;
    store.transition(&bare.0, RunTrigger::Claim, None, None).await.unwrap();
    store.record_progress(bare_id, &point(1, 3, None, now - 100)).await.unwrap();
    store.record_checkpoint(bare_id, 1, &found(3, None, "line 3"), now - 90).await.unwrap();
    store.put_metric_rows(bare_id, &[metric(3, None)]).await.unwrap();
    // The quiet run is in flight with nothing recorded.
    store.transition(&quiet.0, RunTrigger::Claim, None, None).await.unwrap();

    // The ended runs: one with records, one whose last step and last checkpoint tie, one with none.
    let done_id = done.0.id;
    for p in [point(1, 2, Some(4), now - 600), point(1, 4, Some(4), now - 590)] {
        store.record_progress(done_id, &p).await.unwrap();
    }
    store
        .record_checkpoint(done_id, 1, &found(4, Some("tinker://done/4"), "line 4"), now - 590)
        .await
        .unwrap();
    store.put_metric_rows(done_id, &[metric(4, Some(0.9))]).await.unwrap();
    let tied_id = tied.0.id;
    for p in [point(1, 1, None, now - 500), point(1, 2, None, now - 400), point(1, 3, None, now - 400)] {
        store.record_progress(tied_id, &p).await.unwrap();
    }
    for key in ["a", "b"] {
        store.record_checkpoint(tied_id, 1, &found(2, Some(key), key), now - 400).await.unwrap();
    }

    let ended = store.runs_ended_since(now - 1000, 100).await.unwrap();
    let live = store.runs_in_flight(100).await.unwrap();
    let listed = |runs: &[ListedRun]| runs.iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(listed(&ended), [silent.0.id, tied_id, done_id]);
    assert_eq!(listed(&live), [id, quiet.0.id, bare_id], "in queue order");
    for listed in ended.iter().chain(&live) {
        let run_id = listed.id;
        let run = store.run(run_id).await.unwrap().unwrap();
        let own = |r: &ListedRun| {
            (
                r.workflow.clone(),
                r.env_name.clone(),
                r.state,
                r.attempt,
                r.reason.clone(),
                r.started_at,
                r.ended_at,
                r.params.clone(),
                r.preemptions,
                r.preempted_work,
            )
        };
        let read = ListedRun {
            workflow: run.workflow.clone(),
            env_name: run.env_name.clone(),
            state: run.state,
            attempt: run.attempt,
            reason: run.reason.clone(),
            started_at: run.started_at,
            ended_at: run.ended_at,
            params: run.params.clone(),
            preemptions: run.preemptions,
            preempted_work: run.preempted_work,
            ..listed.clone()
        };
        assert_eq!(own(listed), own(&read), "{run_id}");
        let ends = store.progress_ends(run_id, run.attempt).await.unwrap();
        if run.state.is_in_flight() {
            assert_eq!(listed.progress, ends, "{run_id}: its attempt's ends");
            assert_eq!(listed.reports_progress, run.spec.progress.is_some(), "{run_id}");
        } else {
            assert!(!listed.reports_progress);
            if run_id == tied_id {
                continue;
            }
            assert_eq!(
                listed.progress,
                ends.last().cloned().into_iter().collect::<Vec<_>>(),
                "{run_id}: its last"
            );
        }
        assert_eq!(listed.checkpoint, store.last_checkpoint(run_id).await.unwrap(), "{run_id}");
        assert_eq!(listed.report, run.spec.report, "{run_id}");
    }
    // What each holds, so the single rows are no vacuous yardstick.
    let of = |id: Uuid| ended.iter().chain(&live).find(|r| r.id == id).unwrap();
    let steps = |r: &ListedRun| r.progress.iter().map(|p| (p.attempt, p.step)).collect::<Vec<_>>();
    assert_eq!(steps(of(id)), [(2, 6), (2, 8), (2, 9)]);
    assert!(of(id).reports_progress && !of(bare_id).reports_progress);
    assert_eq!(steps(of(bare_id)), [(1, 3), (1, 3)], "no total: its first and its last");
    assert_eq!(steps(of(done_id)), [(1, 4)], "ended: its last alone");
    assert!(of(quiet.0.id).progress.is_empty() && of(silent.0.id).progress.is_empty());
    assert_eq!(of(id).checkpoint.as_ref().map(|c| (c.attempt, c.step)), Some((2, 8)));
    assert!(of(quiet.0.id).checkpoint.is_none() && of(silent.0.id).checkpoint.is_none());
    // The headline metrics' last values, read by name for the listed runs at once, exact.
    let listed: Vec<Uuid> = [id, bare_id, done_id, silent.0.id].to_vec();
    let last = |name: &'static str| {
        let listed = listed.clone();
        async move { store.last_values(&listed, name).await.unwrap() }
    };
    let reward = last("train/reward_mean").await;
    assert_eq!(reward.len(), 2, "{reward:?}");
    assert_eq!((reward[&id].step, reward[&id].value), (12, 0.1 + 0.2));
    assert_eq!((reward[&done_id].step, reward[&done_id].value), (4, 0.9));
    assert_eq!(last("train/percent_correct").await[&id].value, 1.0 / 3.0);
    assert_eq!(last("eval/percent_correct").await[&id].value, 5e-324);
    assert_eq!(last("train/loss").await[&id].value, f64::MAX);
    // Ties: either change of the same millisecond, either checkpoint.
    assert!([(1, 2), (1, 3)].contains(&steps(of(tied_id))[0]), "{:?}", of(tied_id).progress);
    let checkpoint = of(tied_id).checkpoint.clone().unwrap();
    assert!(["a", "b"].contains(&checkpoint.weights.as_deref().unwrap()), "{checkpoint:?}");

    // The reads over listed ids, across a chunk's edge, among ids the store never saw.
    let chunk = crate::engine::store::report::CHUNK;
    let mut ids: Vec<Uuid> = (0..chunk + 40).map(|_| Uuid::new_v4()).collect();
    ids[0] = id;
    ids[chunk - 1] = quiet.0.id;
    ids[chunk] = bare_id;
    let weights = store.last_weights_of(&ids).await.unwrap();
    let stages = store.stages_of(&ids).await.unwrap();
    let first_starts = store.first_starts_of(&ids).await.unwrap();
    for run_id in [id, quiet.0.id, bare_id] {
        assert_eq!(weights.get(&run_id), store.last_weights(run_id).await.unwrap().as_ref());
        let json = |stages: &[Stage]| serde_json::to_value(stages).unwrap();
        assert_eq!(json(stages.get(&run_id).unwrap()), json(&store.stages(run_id).await.unwrap()));
        let first = store
            .events(run_id, 0)
            .await
            .unwrap()
            .into_iter()
            .find(|e| e.to_state == Some(RunState::Starting));
        assert_eq!(first_starts.get(&run_id).copied(), first.map(|e| e.at), "{run_id}");
    }
    assert_eq!(weights[&id], "tinker://run/sampler_weights/5", "an earlier checkpoint's");
    assert!(!weights.contains_key(&bare_id));
    // Two attempts started: the first's start is the one read (the run's own is the second's).
    let starts: Vec<i64> = store
        .events(id, 0)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.to_state == Some(RunState::Starting))
        .map(|e| e.at)
        .collect();
    assert_eq!((starts.len(), first_starts.get(&id)), (2, starts.first()));
    assert!(first_starts.contains_key(&quiet.0.id), "claimed once");
    assert_eq!(stages.len(), 3, "the unknown ids have no stages");
    assert!(store.last_weights_of(&[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn sqlite_set_reads_answer_as_the_single_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        crate::engine::store::open(&StoreLocation::Sqlite(dir.path().join("lachesis.db"))).await.unwrap();
    set_reads_answer_as_the_single_rows(&store).await;
    // Each run's rows are found from the run by an index seek: no table is walked.
    for sql in crate::engine::store::report::listed_queries() {
        let plan = super::sqlite_plan(&store, &sql).await;
        assert!(!plan.iter().any(|step| step.starts_with("SCAN")), "{sql}: {plan:?}");
    }
    // The listed runs: an index range in its order (so the reads beside each run for the
    // rows listed alone), each of those reads a seek.
    use crate::engine::store::report::{Listing, listed_runs_query};
    // Ended: its last step and checkpoint; in flight, two more ends of its steps. (Its headline
    // metrics are a read by name for the listed runs, `MetricStore::last_values`.)
    for (listing, index, reads) in
        [(Listing::Ended, "runs_by_end", 2), (Listing::InFlight, "runs_by_state", 4)]
    {
        let sql = listed_runs_query(crate::engine::store::Backend::Sqlite, listing);
        let plan = super::sqlite_plan(&store, sql).await;
        assert!(plan.iter().any(|step| step.contains(index)), "{plan:?}");
        assert!(!plan.iter().any(|step| step.starts_with("SCAN")), "{plan:?}");
        let seeks = plan.iter().filter(|step| step.starts_with("CORRELATED SCALAR SUBQUERY")).count();
        assert_eq!(seeks, reads, "{plan:?}");
    }
}

#[tokio::test]
async fn postgres_set_reads_answer_as_the_single_rows() {
    let Some(url) = fresh_postgres().await else {
        return;
    };
    let store = crate::engine::store::open(&StoreLocation::Postgres(url)).await.unwrap();
    set_reads_answer_as_the_single_rows(&store).await;
}

#[tokio::test]
async fn sqlite_report_reads_are_the_window_and_walk_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        crate::engine::store::open(&StoreLocation::Sqlite(dir.path().join("lachesis.db"))).await.unwrap();
    report_reads(&store).await;
    use crate::engine::store::report::{Listing, listed_runs_query};
    let ended = listed_runs_query(crate::engine::store::Backend::Sqlite, Listing::Ended);
    let plan = super::sqlite_plan(&store, ended).await;
    assert!(plan.iter().any(|step| step.contains("runs_by_end")), "{plan:?}");
    assert!(!plan.iter().any(|step| step.starts_with("SCAN runs")), "{plan:?}");
    assert!(
        !plan.iter().any(|step| step == "USE TEMP B-TREE FOR ORDER BY"),
        "in the index's order: {plan:?}"
    );
    // The window's count reads the end-time index alone, not a row per run.
    let plan = super::sqlite_plan(&store, &crate::engine::store::report::ENDED_RUN_COUNTS).await;
    assert!(plan.iter().any(|step| step.contains("COVERING INDEX runs_by_end")), "{plan:?}");
    // The held count walks the held few, not every pending run (100,000 of them overnight).
    let plan = super::sqlite_plan(&store, crate::engine::store::report::HELD_COUNT).await;
    assert!(plan.iter().any(|step| step.contains("runs_held")), "{plan:?}");
}

#[tokio::test]
async fn postgres_report_reads_are_the_window() {
    let Some(url) = fresh_postgres().await else {
        return;
    };
    let store = crate::engine::store::open(&StoreLocation::Postgres(url)).await.unwrap();
    report_reads(&store).await;
    // No JIT compiling of these short reads: the listed runs' cost estimate, every correlated
    // seek counted, comes near the threshold, and compiling takes longer than the read.
    use sqlx::Row;
    let row = sqlx::query("SELECT current_setting('jit') AS jit").fetch_one(store.pool()).await.unwrap();
    assert_eq!(row.try_get::<String, _>("jit").unwrap(), "off");
}

/// A state name no state has (a row written by hand, or by a newer lachesis) is a corrupt row
/// naming it, never a panic nor a count silently dropped.
#[tokio::test]
async fn an_unknown_state_in_the_store_is_a_corrupt_row() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        crate::engine::store::open(&StoreLocation::Sqlite(dir.path().join("lachesis.db"))).await.unwrap();
    let (run, stages) = run_as(RunState::Pending, None);
    store.insert_runs(&[(run.clone(), stages)]).await.unwrap();
    assert_eq!(store.run_counts().await.unwrap().get(RunState::Pending), 1);
    sqlx::query("UPDATE runs SET state = 'exploded' WHERE id = $1")
        .bind(run.id.to_string())
        .execute(store.pool())
        .await
        .unwrap();
    match store.run_counts().await {
        Err(crate::engine::store::StoreError::Corrupt(what)) => {
            assert!(what.contains("'exploded'"), "{what}")
        }
        other => panic!("{other:?}"),
    }
}
