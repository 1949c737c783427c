//! The one id-prefix lookup (`sql::IdRange`): on SQLite each table's is a range on its id's
//! unique index, never a walk of the table; anything but hex and dashes matches nothing.

use crate::engine::store::sql::IdRange;

#[tokio::test]
async fn every_prefix_lookup_is_a_seek_on_the_id_index() {
    let dir = tempfile::tempdir().unwrap();
    let location = crate::settings::StoreLocation::Sqlite(dir.path().join("lachesis.db"));
    let store = crate::engine::store::open(&location).await.unwrap();
    for table in ["runs", "tests", "sweeps", "webhook_deliveries"] {
        let sql = format!("SELECT id FROM {table} WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3");
        let plan = super::sqlite_plan(&store, &sql).await;
        assert!(plan.iter().all(|step| !step.starts_with("SCAN")), "{table}: {plan:?}");
        assert!(plan.iter().all(|step| !step.contains("TEMP B-TREE")), "{table}: in id order: {plan:?}");
    }
    for bad in ["", "%", "1a_", "1A%2", "x", "1a\0"] {
        assert!(IdRange::of(bad).is_none(), "{bad:?}");
    }
    let range = IdRange::of("1A2B-").unwrap();
    assert_eq!((range.from.as_str(), range.below.as_str()), ("1a2b-", "1a2b-~"));
}
