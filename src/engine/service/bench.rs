//! What `lachesis bench --claims` asks of the service: claims made as a daemon's loop makes
//! them, one at a time, by as many nodes as it likes. Nothing else calls these.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::{Result, Service};
use crate::engine::store::{Lease, NodeRegistration, Pick, Store};
use crate::model::Run;

#[doc(hidden)]
impl Service {
    /// Registers `node` (a 60 s lease, no labels) and returns a claimer holding its lease.
    pub async fn claimer(&self, node: &str) -> Result<Claimer> {
        let registration = NodeRegistration {
            id: node.to_string(),
            hostname: "bench".into(),
            labels: Default::default(),
            lease: Duration::from_secs(60),
        };
        let lease = self.store.register_node(&registration).await?;
        Ok(Claimer { store: Arc::clone(&self.store), lease })
    }
}

/// One node's claims, as its daemon makes them.
#[doc(hidden)]
pub struct Claimer {
    store: Arc<dyn Store>,
    lease: Lease,
}

impl Claimer {
    /// Claims the next pending run in queue order (keeping its params and directory); `None`
    /// once the queue is empty.
    pub async fn claim_one(&self) -> Result<Option<Uuid>> {
        let mut taken = false;
        let mut pick = |run: &Run| {
            if taken {
                return Pick::Stop;
            }
            taken = true;
            Pick::Take { params: run.params.clone(), run_dir: run.run_dir.clone() }
        };
        let claimed = self.store.claim_runs(&self.lease, 8, 1, &mut pick).await?;
        Ok(claimed.first().map(|run| run.id))
    }
}
