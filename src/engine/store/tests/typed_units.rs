//! Migration 26 (issue 38): a run's pool units and the run its preemption stops for, written
//! by an earlier lachesis as template variables in `params.resolved` (`pool.gpu` = "1,2",
//! `preempted_by`), are typed fields of its params once the store is opened, on SQLite and
//! PostgreSQL, with every other value kept.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::engine::store::migrations::Schema;
use crate::engine::store::{self, Store};
use crate::model::RunState;
use crate::settings::StoreLocation;

/// The schema before the move.
const BEFORE: i64 = 25;

struct Written {
    victim: Uuid,
    urgent: Uuid,
    plain: Uuid,
}

async fn write_old(db: &sqlx::AnyPool) -> Written {
    let (victim, urgent, plain) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let spec = serde_json::to_string(&super::preemptions::queued("low", 0).spec).unwrap();
    let victim_params = serde_json::json!({
        "vars": {"steps": "7"},
        "needs": {"gpu": 2, "nvme": 0},
        "resolved": {"port.api": "8123", "pool.gpu": "1,2", "pool.nvme": "", "preempted_by": urgent.to_string(), "run_id": victim.to_string()},
    });
    let plain_params = serde_json::json!({"resolved": {"port.api": "8124", "pooled": "x"}});
    for (id, state, params) in [
        (victim, "stopping", victim_params.to_string()),
        (urgent, "pending", "{}".to_string()),
        (plain, "pending", plain_params.to_string()),
    ] {
        sqlx::query(
            "INSERT INTO runs (id, workflow, env_name, state, version, priority, attempt, created_at, \
             updated_at, started_at, ended_at, reason, run_dir, spec, params) \
             VALUES ($1, 'low', NULL, $2, 3, 0, 1, 1000, 1000, NULL, NULL, NULL, $3, $4, $5)",
        )
        .bind(id.to_string())
        .bind(state)
        .bind(format!("/runs/{id}"))
        .bind(&spec)
        .bind(params)
        .execute(db)
        .await
        .unwrap();
    }
    Written { victim, urgent, plain }
}

async fn read_back(location: &StoreLocation, written: &Written) {
    let store = store::open(location).await.unwrap();
    let victim = store.run(written.victim).await.unwrap().unwrap();
    let units: BTreeMap<String, Vec<String>> =
        BTreeMap::from([("gpu".into(), vec!["1".into(), "2".into()]), ("nvme".into(), vec![])]);
    assert_eq!(victim.units(), &units);
    assert_eq!((victim.state, victim.preempted_by()), (RunState::Stopping, Some(written.urgent)));
    let kept: Vec<&str> = victim.params.resolved.keys().map(String::as_str).collect();
    assert_eq!(kept, ["port.api", "run_id"], "the rest of its values are kept, and only they");
    assert_eq!(victim.params.vars["steps"], "7");
    assert_eq!(victim.params.needs.to_string(), "gpu=2,nvme=0");
    // Its stages still see them as template values.
    let values = victim.template_values();
    assert_eq!((values["pool.gpu"].as_str(), values["pool.nvme"].as_str()), ("1,2", ""));
    let plain = store.run(written.plain).await.unwrap().unwrap();
    assert!(plain.units().is_empty() && plain.params.preempted_by.is_none());
    assert_eq!(plain.params.resolved["pooled"], "x", "a name that only starts like a pool's is no pool's");
    assert_eq!(store.run(written.urgent).await.unwrap().unwrap().params, Default::default());
}

#[tokio::test]
async fn sqlite_units_and_preemptions_become_typed_values() {
    sqlx::any::install_default_drivers();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lachesis.db");
    let pool = sqlx::AnyPool::connect(&format!("sqlite://{}?mode=rwc", path.display())).await.unwrap();
    Schema::Sqlite.migrator_through(BEFORE).run(&pool).await.unwrap();
    let written = write_old(&pool).await;
    pool.close().await;
    read_back(&StoreLocation::Sqlite(path), &written).await;
}

#[tokio::test]
async fn postgres_units_and_preemptions_become_typed_values() {
    sqlx::any::install_default_drivers();
    let Some(url) = super::fresh_postgres().await else { return };
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    Schema::Postgres.migrator_through(BEFORE).run(&pool).await.unwrap();
    let written = write_old(&pool).await;
    pool.close().await;
    read_back(&StoreLocation::Postgres(url), &written).await;
}
