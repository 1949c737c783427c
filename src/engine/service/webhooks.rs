//! The webhook outbox as surfaces see it: the recent deliveries (their targets redacted, since
//! webhook URLs carry tokens) and a failed one sent again by hand.

use serde::Serialize;

use super::{Result, Service, ServiceError, resolve_prefix};
use crate::model::{DeliveryState, WebhookDelivery};

/// Deliveries a listing shows when the caller names no limit, and the most it may ask for.
pub const DELIVERIES_SHOWN: i64 = 50;
pub const MAX_DELIVERIES_SHOWN: i64 = 500;

/// One page of deliveries, newest first.
#[derive(Clone, Debug, Serialize)]
pub struct DeliveryPage {
    pub deliveries: Vec<WebhookDelivery>,
    /// Pass as `before` for the next page (None: this is the last one).
    pub next_before: Option<i64>,
}

fn shown(mut delivery: WebhookDelivery) -> WebhookDelivery {
    delivery.target = crate::secrets::redact_url(&delivery.target);
    delivery
}

impl Service {
    /// The newest `limit` deliveries (at most `MAX_DELIVERIES_SHOWN`), before notification
    /// `before` when given: a page read off an index, whatever the outbox holds.
    pub async fn webhook_deliveries(&self, limit: i64, before: Option<i64>) -> Result<DeliveryPage> {
        let limit = limit.clamp(1, MAX_DELIVERIES_SHOWN);
        let deliveries = self.store.webhook_deliveries(limit, before).await?;
        let next_before =
            (deliveries.len() as i64 == limit).then(|| deliveries.last().map(|d| d.seq)).flatten();
        Ok(DeliveryPage { deliveries: deliveries.into_iter().map(shown).collect(), next_before })
    }

    /// Sends failed delivery `prefix` (an id or its start) again, with the same id and a fresh
    /// retry window, and wakes the daemon to post it.
    pub async fn resend_webhook(&self, prefix: &str) -> Result<WebhookDelivery> {
        let store = &self.store;
        let delivery = resolve_prefix(
            prefix,
            "webhook deliveries",
            async |id| Ok(store.deliveries_by_prefix(&id.to_string(), 1).await?.into_iter().next()),
            async |prefix| store.deliveries_by_prefix(prefix, 10).await,
            |d: &WebhookDelivery| d.id,
            ServiceError::UnknownDelivery,
        )
        .await?;
        if !store.resend_delivery(delivery.id).await? {
            return Err(ServiceError::DeliveryNotFailed {
                id: delivery.id.to_string(),
                state: delivery.state,
            });
        }
        self.wake().await;
        let resent = store.deliveries_by_prefix(&delivery.id.to_string(), 1).await?.into_iter().next();
        Ok(shown(resent.unwrap_or(WebhookDelivery { state: DeliveryState::Pending, ..delivery })))
    }
}
