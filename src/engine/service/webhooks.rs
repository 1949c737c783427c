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

/// A delivery as surfaces may show it: no URL but the redacted one.
fn shown(delivery: WebhookDelivery) -> WebhookDelivery {
    WebhookDelivery { target_url: None, ..delivery }
}

impl Service {
    /// The newest `limit` deliveries (at most `MAX_DELIVERIES_SHOWN`; fewer when the last
    /// notification's would not all fit), before notification `before` when given: a page read
    /// off an index, whatever the outbox holds.
    pub async fn webhook_deliveries(&self, limit: i64, before: Option<i64>) -> Result<DeliveryPage> {
        let limit = limit.clamp(1, MAX_DELIVERIES_SHOWN);
        let mut deliveries = self.store.webhook_deliveries(limit, before).await?;
        let full = deliveries.len() as i64 == limit;
        // A notification's deliveries (one per target) share its seq, the cursor: a full page
        // ends before a notification it would cut, which the next page then starts with.
        if full && let Some(last) = deliveries.last().map(|d| d.seq) {
            let whole = deliveries.iter().rposition(|d| d.seq != last).map_or(deliveries.len(), |i| i + 1);
            deliveries.truncate(whole);
        }
        let next_before = deliveries.last().filter(|_| full).map(|d| d.seq);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Run, RunParams, RunTrigger};

    #[tokio::test]
    async fn pages_never_cut_a_notification_and_show_no_token() {
        let home = tempfile::tempdir().unwrap();
        let settings = crate::settings::Settings::new(Some(home.path().to_path_buf()), None);
        let service = Service::open(settings).await.unwrap();
        let spec = crate::workflow::Workflow::parse(
            std::path::Path::new("w.yaml"),
            "name: w\nstages:\n  - {name: main, argv: ['true']}\n",
        )
        .unwrap();
        for _ in 0..3 {
            let id = uuid::Uuid::new_v4();
            let run =
                Run::queued(id, spec.clone(), home.path().join(id.to_string()), 0, RunParams::default());
            service.store.insert_run(&run, &run.pending_stages()).await.unwrap();
            service.store.transition(&run, RunTrigger::Cancel, None, None).await.unwrap();
        }
        let targets =
            ["https://lab:t0ken@hooks.example/a".to_string(), "https://hooks.example/b?k=t0ken".to_string()];
        service.store.fan_out_notifications(&targets, 100).await.unwrap();
        let mut seen = Vec::new();
        let mut before = None;
        loop {
            let page = service.webhook_deliveries(3, before).await.unwrap();
            assert_eq!(page.deliveries.len(), 2, "a page of 3 ends before the notification it would cut");
            assert!(page.deliveries.iter().all(|d| d.seq == page.deliveries[0].seq));
            seen.extend(page.deliveries.iter().map(|d| (d.id, d.target.clone())));
            match page.next_before {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        assert_eq!(seen.len(), 6);
        assert!(seen.iter().all(|(_, target)| !target.contains("t0ken")), "{seen:?}");
        let ids: std::collections::BTreeSet<_> = seen.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids.len(), 6);
    }
}
