//! `Service`, the handle every surface holds: opening it, and waking the daemons after a write.

use std::sync::Arc;

use crate::engine::store::{Store, StoreError};
use crate::settings::Settings;

use super::{Result, ServiceError};

#[derive(Clone)]
pub struct Service {
    pub settings: Settings,
    /// Surfaces never see it: every read and write they offer is a method here.
    pub(super) store: Arc<dyn Store>,
    /// The daemon's health, written by its reconciler alone (see `Service::health`).
    pub(super) health: Arc<tokio::sync::watch::Sender<crate::reconciler::Health>>,
    /// Which sweeps got new readings in this process, for the daemon's sweep decider.
    pub(super) sweep_readings: Arc<super::SweepReadings>,
}

impl Service {
    pub async fn open(settings: Settings) -> Result<Service> {
        settings
            .ensure_private_home()
            .map_err(|source| StoreError::Io { path: settings.home.clone(), source })?;
        let store = crate::engine::store::open(&settings.store_location().map_err(StoreError::from)?).await?;
        let health = Arc::new(tokio::sync::watch::Sender::new(crate::reconciler::Health::default()));
        let sweep_readings = Arc::default();
        Ok(Service { settings, store: Arc::new(store), health, sweep_readings })
    }

    /// After a write the daemons must act on: pokes this machine's daemon through its socket,
    /// and the daemons of other machines through the store. Returns whether a local one heard.
    pub async fn wake(&self) -> bool {
        self.poke(crate::wake::Poke::Changed).await
    }

    /// `wake` after queueing new work: the local daemon only looks at its queue.
    pub async fn wake_queued(&self) -> bool {
        self.poke(crate::wake::Poke::Queued).await
    }

    async fn poke(&self, poke: crate::wake::Poke) -> bool {
        if let Err(err) = self.store.announce().await {
            tracing::debug!("cannot announce to other daemons: {err}");
        }
        crate::wake::poke(&self.settings.socket_path(), poke)
    }
}

/// What a user's id or id prefix names: the row with that exact id, else the one row whose id
/// starts with it; `unknown` when none does, `Ambiguous` (naming `what`) when several do.
pub(super) async fn resolve_prefix<T>(
    prefix: &str,
    what: &'static str,
    by_id: impl AsyncFnOnce(uuid::Uuid) -> crate::engine::store::Result<Option<T>>,
    by_prefix: impl AsyncFnOnce(&str) -> crate::engine::store::Result<Vec<T>>,
    id_of: impl Fn(&T) -> uuid::Uuid,
    unknown: fn(String) -> ServiceError,
) -> Result<T> {
    let prefix = prefix.trim();
    if let Ok(id) = uuid::Uuid::parse_str(prefix)
        && let Some(found) = by_id(id).await?
    {
        return Ok(found);
    }
    let mut matches = by_prefix(prefix).await?;
    match matches.len() {
        // The prefix comes from the user: shown escaped, so the error stays one printable line.
        0 => Err(unknown(crate::text::one_line(prefix))),
        1 => Ok(matches.remove(0)),
        _ => Err(ServiceError::Ambiguous {
            what,
            prefix: crate::text::one_line(prefix),
            candidates: matches.iter().map(|m| id_of(m).to_string()).collect(),
        }),
    }
}
