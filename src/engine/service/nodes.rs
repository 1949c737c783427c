//! The nodes sharing the store, as `lachesis node list` and the HTTP API show them.

use serde::Serialize;

use super::{Result, Service, ServiceError};
use crate::engine::store::NodeInfo;
use crate::model::{Millis, now_millis};

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
        if !self.store.backend().supports_nodes() {
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

    /// Drops a lost node from the list. A node that is up (or only overdue) is refused: its
    /// daemon may still be running, and the reaper decides when it is lost.
    pub async fn forget_node(&self, id: &str) -> Result<()> {
        let nodes = self.nodes().await?;
        let Some(node) = nodes.iter().find(|n| n.node.id == id) else {
            let known: Vec<&str> = nodes.iter().map(|n| n.node.id.as_str()).collect();
            return Err(ServiceError::UnknownNode { id: id.to_string(), known: known.join(", ") });
        };
        if node.health != "lost" || !self.store.forget_node(id).await? {
            return Err(ServiceError::NodeNotLost {
                id: id.to_string(),
                health: node.health,
                age_s: node.heartbeat_age_ms / 1000,
            });
        }
        Ok(())
    }
}
