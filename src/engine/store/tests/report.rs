//! The morning report's reads: runs and tests by end time within a window, the ones still
//! going, the counts, a run's last checkpoint, weights and metric row, and the cron post's
//! compare-and-set; on SQLite and PostgreSQL. On SQLite the window's read is checked to walk
//! the end-time index rather than the table.

use std::path::PathBuf;

use uuid::Uuid;

use crate::engine::store::Store;
use crate::model::{FoundCheckpoint, InferenceTest, MetricRow, Run, RunParams, RunState, Stage, TestState};
use crate::settings::StoreLocation;
use crate::workflow::Workflow;

use super::fresh_postgres;

const HOUR: i64 = 3_600_000;

fn run_as(state: RunState, ended_at: Option<i64>) -> (Run, Vec<Stage>) {
    let spec = Workflow::parse(
        std::path::Path::new("r.yaml"),
        "name: r\nstages:\n  - {name: trainer, argv: ['true']}\n",
    )
    .unwrap();
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

    let ids = |runs: Vec<Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    // The latest end first; the run that ended before the window is not read.
    let ended = ids(store.runs_ended_since(since, 100).await.unwrap());
    assert_eq!(ended, [stopped.0.id, failed.0.id, completed.0.id]);
    assert_eq!(ids(store.runs_ended_since(since, 2).await.unwrap()), [stopped.0.id, failed.0.id]);
    assert_eq!(ids(store.runs_in_flight(100).await.unwrap()), [running.0.id]);
    let counts = store.ended_run_counts(since).await.unwrap();
    let expected: Vec<(String, i64)> =
        [("completed", 1), ("failed", 1), ("stopped", 1)].map(|(s, n)| (s.to_string(), n)).to_vec();
    assert_eq!(counts, expected);
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
    assert_eq!(counts, [("regressed".to_string(), 1), ("succeeded".to_string(), 1)]);
    let live = store.live_test_counts().await.unwrap();
    assert_eq!(live, [("queued".to_string(), 2), ("running".to_string(), 1)]);

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
    let last = store.last_metric_row(id).await.unwrap().unwrap();
    assert_eq!((last.step, last.reward_mean), (20, Some(0.6)));
    assert_eq!(store.last_metric_row(failed.0.id).await.unwrap(), None);

    // The cron post: the first read records now; a move lands once.
    let first = store.report_post_since("0 7 * * * UTC", now).await.unwrap();
    assert_eq!(first, now);
    assert_eq!(store.report_post_since("0 7 * * * UTC", now + 5).await.unwrap(), now, "kept, not reset");
    assert!(store.claim_report_post("0 7 * * * UTC", now, now + HOUR).await.unwrap());
    assert!(!store.claim_report_post("0 7 * * * UTC", now, now + 2 * HOUR).await.unwrap(), "moved already");
    assert_eq!(store.report_post_since("0 7 * * * UTC", now).await.unwrap(), now + HOUR);
    assert_eq!(store.report_post_since("0 8 * * * UTC", now + 9).await.unwrap(), now + 9, "its own row");
}

/// The report's set reads over many runs give what the single-row reads give for each, across
/// a chunk's edge, for a run with two attempts, a run with nothing recorded and a run whose
/// records hold no total, no weights and no metric.
async fn set_reads_answer_as_the_single_rows(store: &dyn Store) {
    use crate::model::{Exit, ProcessState, ProgressPoint, RunTrigger};
    let now = crate::model::now_millis();
    let (retried, quiet, bare) =
        (run_as(RunState::Pending, None), run_as(RunState::Pending, None), run_as(RunState::Pending, None));
    store.insert_runs(&[retried.clone(), quiet.clone(), bare.clone()]).await.unwrap();
    let point = |attempt, step, total, at| ProgressPoint { attempt, step, total, at };
    let found = |step: i64, weights: Option<&str>| FoundCheckpoint {
        step,
        path: Some(format!("tinker://run/weights/{step}")),
        weights: weights.map(str::to_string),
        key: format!("line {step}"),
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
        .record_checkpoint(id, 1, &found(5, Some("tinker://run/sampler_weights/5")), now - 750)
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
    store.record_checkpoint(id, 2, &found(8, None), now - 350).await.unwrap();
    store.put_metric_rows(id, &[metric(5, Some(0.2)), metric(8, Some(0.5)), metric(9, None)]).await.unwrap();

    // The bare run: no total, no weights, no metric.
    let bare_id = bare.0.id;
    store.transition(&bare.0, RunTrigger::Claim, None, None).await.unwrap();
    store.record_progress(bare_id, &point(1, 3, None, now - 100)).await.unwrap();
    store.record_checkpoint(bare_id, 1, &found(3, None), now - 90).await.unwrap();
    store.put_metric_rows(bare_id, &[metric(3, None)]).await.unwrap();

    // Across a chunk's edge, among ids the store never saw.
    let chunk = crate::engine::store::report::CHUNK;
    let mut ids: Vec<Uuid> = (0..chunk + 40).map(|_| Uuid::new_v4()).collect();
    ids[0] = id;
    ids[chunk - 1] = quiet.0.id;
    ids[chunk] = bare_id;
    let progress = store.progress_ends_of(&ids).await.unwrap();
    let checkpoints = store.last_checkpoints_of(&ids).await.unwrap();
    let weights = store.last_weights_of(&ids).await.unwrap();
    let metrics = store.last_metric_rows_of(&ids).await.unwrap();
    let stages = store.stages_of(&ids).await.unwrap();
    let first_starts = store.first_starts_of(&ids).await.unwrap();
    for run_id in [id, quiet.0.id, bare_id] {
        let run = store.run(run_id).await.unwrap().unwrap();
        let ends = store.progress_ends(run_id, run.attempt).await.unwrap();
        assert_eq!(progress.get(&run_id).cloned().unwrap_or_default(), ends, "{run_id}");
        assert_eq!(checkpoints.get(&run_id), store.last_checkpoint(run_id).await.unwrap().as_ref());
        assert_eq!(weights.get(&run_id), store.last_weights(run_id).await.unwrap().as_ref());
        assert_eq!(metrics.get(&run_id), store.last_metric_row(run_id).await.unwrap().as_ref());
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
    // What each holds, so the single rows are no vacuous yardstick.
    assert_eq!(
        progress[&id].iter().map(|p| (p.attempt, p.step)).collect::<Vec<_>>(),
        [(2, 6), (2, 8), (2, 9)]
    );
    assert_eq!(progress[&bare_id].len(), 2, "no total: its first and its last");
    assert!(!progress.contains_key(&quiet.0.id));
    assert_eq!(checkpoints[&id].step, 8);
    assert_eq!(weights[&id], "tinker://run/sampler_weights/5");
    assert!(!weights.contains_key(&bare_id));
    assert_eq!(metrics[&id].step, 8);
    assert!(!metrics.contains_key(&bare_id));
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
    assert!(!first_starts.contains_key(&quiet.0.id));
    assert_eq!(stages.len(), 3, "the unknown ids have no stages");
    assert!(store.progress_ends_of(&[]).await.unwrap().is_empty());
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
    let plan = super::sqlite_plan(&store, crate::engine::store::report::RUNS_ENDED).await;
    assert!(plan.iter().any(|step| step.contains("runs_by_end")), "{plan:?}");
    assert!(!plan.iter().any(|step| step.starts_with("SCAN runs")), "{plan:?}");
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
}
