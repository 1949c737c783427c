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

#[tokio::test]
async fn sqlite_report_reads_are_the_window_and_walk_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        crate::engine::store::open(&StoreLocation::Sqlite(dir.path().join("lachesis.db"))).await.unwrap();
    report_reads(&store).await;
    let plan = super::sqlite_plan(&store, crate::engine::store::report::RUNS_ENDED).await;
    assert!(plan.iter().any(|step| step.contains("runs_by_end")), "{plan:?}");
    assert!(!plan.iter().any(|step| step.starts_with("SCAN runs")), "{plan:?}");
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
