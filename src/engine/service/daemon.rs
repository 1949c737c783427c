//! What the daemon process asks of the service: the database's kind, the daemon lock, the
//! reconciler over the store and its health, wake-ups from other machines and the Prometheus page.

use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;

use super::{Result, Service};
use crate::engine::store::{Backend, DaemonLock, NodeRegistration};
use crate::reconciler::{Health, Msg, Reconciler, ReconcilerConfig};
use crate::telemetry::Telemetry;

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
        telemetry: Arc<Telemetry>,
    ) -> Reconciler {
        Reconciler::new(
            Arc::clone(&self.store),
            registration,
            config,
            tx,
            telemetry,
            Arc::clone(&self.health),
            Arc::clone(&self.sweep_readings),
        )
    }

    /// The health of the daemon in this process, as its reconciler last published it: whether
    /// the store takes its writes, and if not since when, why and what is held. The store is
    /// not asked (it may be what fails). Healthy where no reconciler runs in this process.
    pub fn health(&self) -> Health {
        self.health.borrow().clone()
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

    /// News of the readings of sweeps' members recorded in this process: the sweep decider
    /// waits on it.
    pub fn sweep_readings(&self) -> Arc<super::SweepReadings> {
        Arc::clone(&self.sweep_readings)
    }

    /// The Prometheus text of `metrics`, with run and test counts read from the store now.
    pub async fn prometheus(&self, telemetry: &Telemetry) -> String {
        let runs = self.store.run_counts().await.unwrap_or_default();
        let tests = self.store.test_counts().await.unwrap_or_default();
        telemetry.render(&runs, &tests)
    }
}
