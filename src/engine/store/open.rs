//! Opening the store (either backend) and the lock a daemon holds on it.

use crate::settings::StoreLocation;

use super::SqlStore;
use super::sql::Locking;
use super::{Backend, Result, postgres, sqlite};

/// Held while a daemon owns the store; dropping it lets another daemon start.
pub struct DaemonLock {
    pub(super) _held: Box<dyn std::any::Any + Send + Sync>,
}

/// Opens (creating and migrating if needed) the store at `location`.
pub async fn open(location: &StoreLocation) -> Result<SqlStore> {
    match location {
        StoreLocation::Sqlite(path) => {
            Ok(SqlStore::new(sqlite::open(path).await?, Backend::Sqlite, Locking::File(path.clone())))
        }
        StoreLocation::Postgres(url) => {
            Ok(SqlStore::new(postgres::open(url).await?, Backend::Postgres, Locking::Advisory))
        }
    }
}
