//! The nodes sharing the store, as `lachesis node list` and the HTTP API show them.

use serde::Serialize;

use super::{Result, Service, ServiceError};
use crate::model::{Millis, now_millis};
use crate::store::NodeInfo;

#[derive(Clone, Debug, Serialize)]
pub struct NodeView {
    #[serde(flatten)]
    pub node: NodeInfo,
    /// Milliseconds since its last heartbeat.
    pub heartbeat_age_ms: Millis,
    /// Up with a fresh heartbeat, up but overdue (about to be reaped), or lost.
    pub health: &'static str,
}

impl Service {
    /// Every node that ever registered on the store; PostgreSQL only.
    pub async fn nodes(&self) -> Result<Vec<NodeView>> {
        if self.store.backend() == "sqlite" {
            return Err(ServiceError::NeedsPostgres("`lachesis node list`".into()));
        }
        let now = now_millis();
        Ok(self
            .store
            .nodes()
            .await?
            .into_iter()
            .map(|node| {
                let age = (now - node.heartbeat_at).max(0);
                let health = match node.state.as_str() {
                    "up" if age <= node.lease_ms => "up",
                    "up" => "overdue",
                    _ => "lost",
                };
                NodeView { heartbeat_age_ms: age, health, node }
            })
            .collect())
    }
}
