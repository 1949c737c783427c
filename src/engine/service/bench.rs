//! What the figures bench's `--claims` asks of the service: claims made as a daemon's loop
//! makes them, one at a time, by as many nodes as it likes. Compiled only with `testing`.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::{Result, Service};
use crate::engine::store::{Lease, NodeRegistration, Pick, Store};
use crate::model::Run;

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
        Ok(Claimer { store: Arc::clone(&self.store), lease, pools: None })
    }
}

/// One node's claims, as its daemon makes them.
pub struct Claimer {
    store: Arc<dyn Store>,
    lease: Lease,
    /// Counted pools: each claim assigns a run its units as the daemon's picker does (with
    /// every unit free, since a bench run never ends to give its units back).
    pools: Option<crate::model::Pools>,
}

impl Claimer {
    /// This claimer assigns units of `pools` to the runs it claims.
    pub fn with_pools(self, pools: crate::model::Pools) -> Claimer {
        Claimer { pools: Some(pools), ..self }
    }

    /// Claims the next pending run in queue order (keeping its params and directory); `None`
    /// once the queue is empty.
    pub async fn claim_one(&self) -> Result<Option<Uuid>> {
        let mut taken = false;
        let mut pick = |run: &Run| {
            if taken {
                return Pick::Stop;
            }
            let mut params = run.params.clone();
            if let Some(pools) = &self.pools {
                let free = std::collections::BTreeSet::new();
                let Some(units) = crate::model::pool::assign(pools, &free, &run.params.needs) else {
                    return Pick::Skip;
                };
                params.units = units;
            }
            taken = true;
            Pick::Take { params: Box::new(params), run_dir: run.run_dir.clone() }
        };
        let claimed = self.store.claim_runs(&self.lease, 8, 1, &mut pick).await?;
        Ok(claimed.runs.first().map(|run| run.id))
    }
}
