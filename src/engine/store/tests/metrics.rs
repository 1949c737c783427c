//! Metrics by name on SQLite and PostgreSQL: readings upserted by (run, name, attempt, step),
//! series that a resume rewinds, names and summaries, the runs read since a mark, and the W&B
//! rows results show made of the named readings.

use std::path::PathBuf;

use uuid::Uuid;

use crate::engine::store::Store;
use crate::model::metric_point::MAX_SERIES_POINTS;
use crate::model::{MetricPoint, MetricReading, MetricRow, Run, RunParams};
use crate::workflow::Workflow;

async fn insert(store: &dyn Store) -> Uuid {
    let spec =
        Workflow::parse(std::path::Path::new("m.yaml"), "name: m\nstages:\n  - {name: t, argv: ['true']}\n")
            .unwrap();
    let id = Uuid::new_v4();
    let run = Run::queued(id, spec, PathBuf::from(format!("/runs/{id}")), 0, RunParams::default());
    store.insert_run(&run, &run.pending_stages()).await.unwrap();
    id
}

fn r(name: &str, step: i64, value: f64) -> MetricReading {
    MetricReading::new(name, step, value).unwrap()
}

fn p(attempt: u32, step: i64, value: f64) -> MetricPoint {
    MetricPoint { attempt, step, value }
}

on_both_backends!(
    a_reading_is_kept_once_per_name_attempt_and_step,
    a_resumed_attempt_replaces_the_steps_from_its_resume_on,
    names_and_summaries_list_each_metric_once,
    runs_read_since_a_mark_are_those_with_new_or_changed_values,
    result_rows_are_made_of_the_w_and_b_names,
    a_long_series_is_read_up_to_its_bound,
);

async fn a_reading_is_kept_once_per_name_attempt_and_step(store: &dyn Store) {
    let run = insert(store).await;
    let other = insert(store).await;
    assert!(store.metric_series(run, "loss").await.unwrap().is_empty());
    store
        .put_metric_values(run, 1, &[r("loss", 2, 0.5), r("loss", 1, 0.9), r("reward", 1, 3.0)], 10)
        .await
        .unwrap();
    store.put_metric_values(other, 1, &[r("loss", 1, 7.0)], 10).await.unwrap();
    // A re-read (a follower after a restart) adds nothing; a changed value replaces.
    store.put_metric_values(run, 1, &[r("loss", 2, 0.5), r("loss", 1, 0.8)], 20).await.unwrap();
    store.put_metric_values(run, 1, &[], 30).await.unwrap();
    assert_eq!(store.metric_series(run, "loss").await.unwrap(), vec![p(1, 1, 0.8), p(1, 2, 0.5)]);
    assert_eq!(store.metric_series(run, "reward").await.unwrap(), vec![p(1, 1, 3.0)]);
    assert_eq!(store.metric_series(other, "loss").await.unwrap(), vec![p(1, 1, 7.0)]);
    assert!(store.metric_series(run, "nothing").await.unwrap().is_empty());
    // A batch larger than one statement's rows lands whole.
    let many: Vec<MetricReading> = (0..150).map(|s| r("many", s, s as f64 / 2.0)).collect();
    store.put_metric_values(run, 1, &many, 40).await.unwrap();
    let series = store.metric_series(run, "many").await.unwrap();
    assert_eq!(series.len(), 150);
    assert_eq!(series[149], p(1, 149, 74.5));
}

async fn a_resumed_attempt_replaces_the_steps_from_its_resume_on(store: &dyn Store) {
    let run = insert(store).await;
    let first: Vec<MetricReading> = (0..=8).map(|s| r("loss", s, s as f64)).collect();
    store.put_metric_values(run, 1, &first, 10).await.unwrap();
    // The second attempt resumed from the checkpoint at step 5 and reached step 6.
    store.put_metric_values(run, 2, &[r("loss", 5, 50.0), r("loss", 6, 60.0)], 20).await.unwrap();
    let series = store.metric_series(run, "loss").await.unwrap();
    let expected: Vec<MetricPoint> =
        (0..5).map(|s| p(1, s, s as f64)).chain([p(2, 5, 50.0), p(2, 6, 60.0)]).collect();
    assert_eq!(series, expected);
    // Its summary's last reading is the latest attempt's, its count every stored reading.
    let summaries = store.metric_summaries(run).await.unwrap();
    assert_eq!(summaries.len(), 1);
    assert_eq!((summaries[0].count, summaries[0].last), (11, p(2, 6, 60.0)));
}

async fn names_and_summaries_list_each_metric_once(store: &dyn Store) {
    let run = insert(store).await;
    assert!(store.metric_names(run).await.unwrap().is_empty());
    assert!(store.metric_summaries(run).await.unwrap().is_empty());
    store
        .put_metric_values(
            run,
            1,
            &[r("env/all/reward/total", 1, 0.1), r("env/all/reward/total", 2, 0.2)],
            10,
        )
        .await
        .unwrap();
    store.put_metric_values(run, 1, &[r("loss", 1, 1.0)], 15).await.unwrap();
    assert_eq!(store.metric_names(run).await.unwrap(), vec!["env/all/reward/total", "loss"]);
    let summaries = store.metric_summaries(run).await.unwrap();
    let got: Vec<(&str, i64, MetricPoint, i64)> =
        summaries.iter().map(|s| (s.name.as_str(), s.count, s.last, s.recorded_at)).collect();
    assert_eq!(got, vec![("env/all/reward/total", 2, p(1, 2, 0.2), 10), ("loss", 1, p(1, 1, 1.0), 15)]);
}

async fn runs_read_since_a_mark_are_those_with_new_or_changed_values(store: &dyn Store) {
    let quiet = insert(store).await;
    let busy = insert(store).await;
    store.put_metric_values(quiet, 1, &[r("loss", 1, 1.0)], 100).await.unwrap();
    store.put_metric_values(busy, 1, &[r("loss", 1, 1.0)], 100).await.unwrap();
    assert!(store.metric_runs_since(100).await.unwrap().is_empty());
    let mut since = store.metric_runs_since(99).await.unwrap();
    since.sort();
    let mut both = vec![quiet, busy];
    both.sort();
    assert_eq!(since, both);
    // The same values read again are no news; a new step and a changed value are.
    store.put_metric_values(quiet, 1, &[r("loss", 1, 1.0)], 200).await.unwrap();
    store.put_metric_values(busy, 1, &[r("loss", 2, 2.0)], 200).await.unwrap();
    assert_eq!(store.metric_runs_since(100).await.unwrap(), vec![busy]);
    store.put_metric_values(quiet, 1, &[r("loss", 1, 1.5)], 300).await.unwrap();
    assert_eq!(store.metric_runs_since(200).await.unwrap(), vec![quiet]);
}

async fn result_rows_are_made_of_the_w_and_b_names(store: &dyn Store) {
    let run = insert(store).await;
    assert!(store.last_values(&[run], "train/loss").await.unwrap().is_empty());
    store
        .put_metric_values(
            run,
            1,
            &[
                r("train/reward_mean", 1, 0.25),
                r("train/loss", 1, 2.0),
                r("eval/percent_correct", 2, 0.5),
                r("loss", 3, 1.5),
                r("env/all/reward/total", 4, 9.0),
            ],
            10,
        )
        .await
        .unwrap();
    let row = |step, reward, eval, loss| MetricRow {
        step,
        reward_mean: reward,
        eval_percent_correct: eval,
        loss,
        recorded_at: 10,
        ..MetricRow::default()
    };
    let rows = store.metric_rows(run).await.unwrap();
    assert_eq!(
        rows,
        vec![
            row(1, Some(0.25), None, Some(2.0)),
            row(2, None, Some(0.5), None),
            row(3, None, None, Some(1.5))
        ]
    );
    let last =
        |name: &'static str| async move { store.last_values(&[run], name).await.unwrap().remove(&run) };
    assert_eq!(last("loss").await.map(|v| (v.step, v.value)), Some((3, 1.5)));
    assert_eq!(last("env/all/reward/total").await.map(|v| (v.step, v.value)), Some((4, 9.0)));
    // A resumed attempt's readings are the last, though its step is lower.
    store.put_metric_values(run, 2, &[r("train/reward_mean", 2, 0.75)], 20).await.unwrap();
    assert_eq!(last("train/reward_mean").await.map(|v| (v.step, v.value)), Some((2, 0.75)));
}

async fn a_long_series_is_read_up_to_its_bound(store: &dyn Store) {
    let run = insert(store).await;
    let readings: Vec<MetricReading> = (0..MAX_SERIES_POINTS as i64 + 10).map(|s| r("x", s, 1.0)).collect();
    for chunk in readings.chunks(20_000) {
        store.put_metric_values(run, 1, chunk, 10).await.unwrap();
    }
    let series = store.metric_series(run, "x").await.unwrap();
    assert_eq!(series.len(), MAX_SERIES_POINTS);
    assert_eq!(series.last().map(|p| p.step), Some(MAX_SERIES_POINTS as i64 - 1));
}

/// The reads walk their index: a series and a summary the key's range of one run, the runs with
/// news the time index from the mark, never the table.
#[tokio::test]
async fn sqlite_metric_reads_walk_their_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let location = crate::settings::StoreLocation::Sqlite(dir.path().join("lachesis.db"));
    let store = crate::engine::store::open(&location).await.unwrap();
    let series = "SELECT attempt, step, value FROM metric_values WHERE run_id = $1 AND name = $2 \
                  ORDER BY attempt, step LIMIT $3";
    let plan = super::sqlite_plan(&store, series).await;
    assert!(
        plan.iter().any(|s| s.contains("USING PRIMARY KEY") || s.contains("sqlite_autoindex")),
        "{plan:?}"
    );
    assert!(!plan.iter().any(|s| s.contains("TEMP B-TREE")), "read in key order: {plan:?}");
    let since = crate::engine::store::metric_values::METRIC_RUNS_SINCE;
    let plan = super::sqlite_plan(&store, since).await;
    assert!(plan.iter().any(|s| s.contains("COVERING INDEX metric_values_by_time")), "{plan:?}");
    let last = crate::engine::store::metric_values::LAST_VALUES.replace("{ids}", "$2, $3");
    let plan = super::sqlite_plan(&store, &last).await;
    assert!(!plan.iter().any(|s| s.starts_with("SCAN")), "{plan:?}");
}
