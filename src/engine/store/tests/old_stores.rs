//! Stores written by older lachesis: a store at each of several earlier schema versions (the
//! first, and some between), on SQLite and PostgreSQL, holding what the lachesis of that version
//! wrote (its workflow snapshot and params in their JSON of the time), is opened by this one,
//! migrated, and its runs, stages, events and metrics read back intact.

use sqlx::Executor;
use uuid::Uuid;

use crate::engine::store::metric_values::MetricStore;
use crate::engine::store::migrations::Schema;
use crate::engine::store::{self, Store};
use crate::model::{Exit, ProcessState, RunState};
use crate::settings::StoreLocation;

/// The schema versions tested: the first, the last before metrics by name (its fixed-column
/// metric history migrates into them), and two between.
const VERSIONS: [i64; 4] = [1, 8, 12, 17];

/// A workflow snapshot as the first lachesis wrote it (every field it had, `Dur` as text).
const FIRST_SPEC: &str = r#"{"name":"demo","description":"the demo","default":true,"credentials":[],
"resources":["gpu:0"],"ports":{"api":"auto"},"vars":{"steps":"3"},
"stages":[{"name":"trainer","argv":["sh","-c","echo {steps}"],"env":{"A":"1"},"start_delay":"2s"}],
"completion":{"stages":["trainer"]},"stop_grace":"5s"}"#;
const FIRST_PARAMS: &str = r#"{"vars":{"steps":"7"},"resolved":{"port.api":"8123"}}"#;

struct Written {
    done: Uuid,
    queued: Uuid,
}

/// Writes, with the columns of schema version 1 (every later version keeps them), a completed
/// run with its stage and events and a pending run; at a version with the fixed-column metric
/// history, a row of it.
async fn write_old<'c, E>(db: E, version: i64) -> Written
where
    E: Executor<'c, Database = sqlx::Any> + Copy,
{
    let (done, queued) = (Uuid::new_v4(), Uuid::new_v4());
    for (id, state, ended) in [(done, "completed", Some(5_000i64)), (queued, "pending", None)] {
        sqlx::query(
            "INSERT INTO runs (id, workflow, env_name, state, version, priority, attempt, created_at, \
             updated_at, started_at, ended_at, reason, run_dir, spec, params) \
             VALUES ($1, 'demo', NULL, $2, 3, 0, 1, 1000, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(id.to_string())
        .bind(state)
        .bind(ended.unwrap_or(1000))
        .bind(ended.map(|_| 2_000i64))
        .bind(ended)
        .bind(ended.map(|_| "all stages exited 0"))
        .bind(format!("/home/u/.lachesis/runs/{id}"))
        .bind(FIRST_SPEC)
        .bind(FIRST_PARAMS)
        .execute(db)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO stages (run_id, idx, name, state, shim, process, started_at, ready_at, ended_at, \
         exit_code, exit_signal, log_path) VALUES ($1, 0, 'trainer', 'exited', NULL, NULL, 2000, 2000, 5000, 0, NULL, $2)",
    )
    .bind(done.to_string())
    .bind(format!("/home/u/.lachesis/runs/{done}/trainer.log"))
    .execute(db)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO stages (run_id, idx, name, state, shim, process, started_at, ready_at, ended_at, \
         exit_code, exit_signal, log_path) VALUES ($1, 0, 'trainer', 'pending', NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'x.log')",
    )
    .bind(queued.to_string())
    .execute(db)
    .await
    .unwrap();
    for (at, from, to, message) in [
        (1000i64, None, "pending", "submitted"),
        (2000, Some("pending"), "running", "claimed"),
        (5000, Some("running"), "completed", "all stages exited 0"),
    ] {
        sqlx::query(
            "INSERT INTO events (run_id, at, kind, from_state, to_state, stage, message) VALUES ($1, $2, 'state', $3, $4, NULL, $5)",
        )
        .bind(done.to_string())
        .bind(at)
        .bind(from)
        .bind(to)
        .bind(message)
        .execute(db)
        .await
        .unwrap();
    }
    if (8..18).contains(&version) {
        sqlx::query(
            "INSERT INTO metric_history (run_id, step, reward_mean, percent_correct, eval_percent_correct, loss, recorded_at) \
             VALUES ($1, 3, 0.625, 0.5, NULL, 1.25, 5000)",
        )
        .bind(done.to_string())
        .execute(db)
        .await
        .unwrap();
    }
    Written { done, queued }
}

/// Opens the store as this lachesis does (migrating it) and reads back what was written.
async fn read_back(location: &StoreLocation, written: &Written, version: i64) {
    let store = store::open(location).await.unwrap_or_else(|e| panic!("version {version}: {e}"));
    let run = store.run(written.done).await.unwrap().unwrap_or_else(|| panic!("version {version}: run lost"));
    assert_eq!(
        (run.state, run.attempt, run.reason.as_deref()),
        (RunState::Completed, 1, Some("all stages exited 0"))
    );
    assert_eq!((run.spec.name.as_str(), run.spec.stages[0].argv[2].as_str()), ("demo", "echo {steps}"));
    assert_eq!(run.spec.stop_grace.map(|d| d.0), Some(std::time::Duration::from_secs(5)));
    assert_eq!((run.params.vars["steps"].as_str(), run.params.resolved["port.api"].as_str()), ("7", "8123"));
    let stages = store.stages(written.done).await.unwrap();
    assert_eq!(stages.len(), 1, "version {version}");
    assert_eq!((stages[0].record.state, stages[0].record.exit), (ProcessState::Exited, Some(Exit::Code(0))));
    let events = store.events(written.done, 0).await.unwrap();
    let moves: Vec<_> = events.iter().filter_map(|e| e.to_state.map(|s| s.as_str())).collect();
    assert_eq!(moves, ["pending", "running", "completed"], "version {version}");
    let queued = store.run(written.queued).await.unwrap().unwrap();
    assert_eq!(queued.state, RunState::Pending);
    let listed = store.list_runs(&crate::model::RunQuery::default()).await.unwrap();
    assert_eq!(listed.len(), 2, "version {version}");
    // The old fixed-column history is now metrics by name, nothing lost.
    if (8..18).contains(&version) {
        let last = |name: &'static str| {
            let store = &store;
            async move { store.last_values(&[written.done], name).await.unwrap().remove(&written.done) }
        };
        assert_eq!(last("train/reward_mean").await.map(|v| (v.step, v.value)), Some((3, 0.625)));
        assert_eq!(last("train/loss").await.map(|v| v.value), Some(1.25));
        assert!(last("eval/percent_correct").await.is_none());
    }
}

#[tokio::test]
async fn sqlite_stores_of_earlier_versions_open_with_their_runs_intact() {
    sqlx::any::install_default_drivers();
    for version in VERSIONS {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lachesis.db");
        let url = format!("sqlite://{}?mode=rwc", path.display());
        let pool = sqlx::AnyPool::connect(&url).await.unwrap();
        Schema::Sqlite.migrator_through(version).run(&pool).await.unwrap();
        let written = write_old(&pool, version).await;
        pool.close().await;
        read_back(&StoreLocation::Sqlite(path), &written, version).await;
    }
}

#[tokio::test]
async fn postgres_stores_of_earlier_versions_open_with_their_runs_intact() {
    sqlx::any::install_default_drivers();
    for version in VERSIONS {
        let Some(url) = super::fresh_postgres().await else {
            return;
        };
        let pool = sqlx::AnyPool::connect(&url).await.unwrap();
        Schema::Postgres.migrator_through(version).run(&pool).await.unwrap();
        let written = write_old(&pool, version).await;
        pool.close().await;
        read_back(&StoreLocation::Postgres(url), &written, version).await;
    }
}
