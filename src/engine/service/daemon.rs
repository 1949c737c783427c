//! What the daemon process asks of the service: the database's kind, the daemon lock, the
//! reconciler over the store, wake-ups from other machines and the Prometheus page.

use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;

use super::{Result, Service};
use crate::engine::store::{Backend, DaemonLock, NodeRegistration};
use crate::metrics::Metrics;
use crate::reconciler::{Msg, Reconciler, ReconcilerConfig};

impl Service {
    /// The database underneath, and what it supports.
    pub fn backend(&self) -> Backend {
        self.store.backend()
    }

    /// Takes the daemon lock for `node`, or says who holds it.
    pub async fn lock_daemon(&self, node: &str) -> Result<DaemonLock> {
        Ok(self.store.lock_daemon(node).await?)
    }

    /// The loop that owns run and test state, over this service's store.
    pub fn reconciler(
        &self,
        registration: NodeRegistration,
        config: ReconcilerConfig,
        tx: UnboundedSender<Msg>,
        metrics: Arc<Metrics>,
    ) -> Reconciler {
        Reconciler::new(Arc::clone(&self.store), registration, config, tx, metrics)
    }

    /// Calls `wake` whenever a command on another machine announces work (PostgreSQL `NOTIFY`),
    /// until `wake` returns false; returns at once on a store that serves one machine.
    pub async fn listen_for_wakes(&self, wake: impl Fn() -> bool) -> Result<()> {
        match (&self.settings.database_url, self.backend()) {
            (Some(url), Backend::Postgres) => {
                Ok(crate::engine::store::postgres::listen_for_wakes(url, wake).await?)
            }
            _ => Ok(()),
        }
    }

    /// The Prometheus text of `metrics`, with run and test counts read from the store now.
    pub async fn prometheus(&self, metrics: &Metrics) -> String {
        let runs = self.store.run_counts().await.unwrap_or_default();
        let tests = self.store.test_counts().await.unwrap_or_default();
        metrics.render(runs, tests)
    }
}
