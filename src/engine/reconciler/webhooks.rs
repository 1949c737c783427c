//! Webhooks from the reconciler. What runs, tests and sweeps are told is written by the store
//! with the move that causes it (the outbox) and posted by the poster beside the loop
//! (`outbox.rs`); the loop only rings it after a batch. The daemon's health is the exception:
//! `daemon_unhealthy` is said exactly when the store cannot be written, so it is posted from
//! memory, and once writes land again it is recorded in the outbox under the ids it was posted
//! with (so a receiver drops a repeat), followed by `daemon_healthy`, posted from there.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;
use uuid::Uuid;

use super::Reconciler;
use super::health::Health;
use super::held::Turn;
use super::outbox::OutboxPoster;
use crate::engine::store::PostedDelivery;
use crate::webhooks::{Payload, Webhook, WebhookClient};

/// Webhooks told about every run that ends (`LACHESIS_WEBHOOKS`, comma-separated).
pub fn run_webhooks() -> Vec<String> {
    crate::environ::var("LACHESIS_WEBHOOKS")
        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The `daemon_unhealthy` notice of the current episode, as posted from memory.
pub(super) struct UnhealthyPosts {
    note: Payload,
    posts: Vec<(PostedDelivery, Arc<AtomicBool>, tokio::task::AbortHandle)>,
}

impl Reconciler {
    /// Starts the outbox's poster; the loop rings the returned handle after each batch.
    pub(super) fn spawn_outbox_poster(&self) -> Option<Arc<Notify>> {
        let client = self.webhooks.clone()?;
        let policy = self.config.outbox.clone().unwrap_or_default();
        let wake = Arc::new(Notify::new());
        let poster = OutboxPoster { store: self.store.clone(), client, run_webhooks: run_webhooks(), policy };
        tokio::spawn(poster.serve(Arc::clone(&wake)));
        Some(wake)
    }

    /// Tells every run webhook (`LACHESIS_WEBHOOKS`) that the daemon's writes started failing
    /// (`health` as it is now) or land again (`health` as it was, failing).
    pub(super) fn post_health_webhook(&self, turn: Turn, health: &Health) {
        let urls = run_webhooks();
        let (Some(webhooks), Some(failing)) = (&self.webhooks, &health.writes_failing) else { return };
        if urls.is_empty() {
            return;
        }
        let ids =
            serde_json::json!({ "node": self.node.registration.id, "store": self.store.backend().as_str() });
        let note = |kind: &str, state: &str, summary| Payload {
            kind: kind.into(),
            ids: ids.clone(),
            state: state.into(),
            summary,
            at: chrono::Utc::now().timestamp(),
            delivery_id: None,
        };
        match turn {
            Turn::Unhealthy => {
                let note = note(Payload::DAEMON_UNHEALTHY, "unhealthy", serde_json::json!(failing));
                let posts = urls.into_iter().map(|url| post_in_memory(webhooks, url, &note)).collect();
                *self.unhealthy.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(UnhealthyPosts { note, posts });
            }
            Turn::Healthy => {
                let failed_for_s = (crate::model::now_millis() - failing.since).max(0) / 1000;
                let summary = serde_json::json!({
                    "failed_since": failing.since,
                    "failed_for_s": failed_for_s,
                    "kind": failing.kind,
                    "error": failing.error,
                });
                let healthy = note(Payload::DAEMON_HEALTHY, "healthy", summary);
                let unhealthy = self.unhealthy.lock().unwrap_or_else(|e| e.into_inner()).take();
                self.record_health(unhealthy, healthy, urls);
            }
            Turn::Same => {}
        }
    }

    /// Writes the episode's notices to the outbox (the unhealthy one's memory posts stopped
    /// first, what they achieved kept); when even that fails, posts the healthy one from memory.
    fn record_health(&self, unhealthy: Option<UnhealthyPosts>, healthy: Payload, urls: Vec<String>) {
        let (store, outbox, webhooks) = (self.store.clone(), self.outbox.clone(), self.webhooks.clone());
        let subject = format!("daemon:{}", self.node.registration.id);
        tokio::spawn(async move {
            let (note, posted) = match unhealthy {
                Some(UnhealthyPosts { note, posts }) => {
                    let posted = posts
                        .into_iter()
                        .map(|(mut post, delivered, task)| {
                            task.abort();
                            post.delivered = delivered.load(Ordering::SeqCst);
                            post
                        })
                        .collect();
                    (note, posted)
                }
                None => (healthy.clone(), Vec::new()),
            };
            match store.record_health_notices(&subject, &note, &posted, &healthy).await {
                Ok(()) => {
                    if let Some(outbox) = outbox {
                        outbox.notify_one();
                    }
                }
                Err(err) => {
                    tracing::warn!(
                        "cannot record the health notices in the outbox ({err}): posting from memory"
                    );
                    if let Some(webhooks) = &webhooks {
                        for url in urls {
                            post_in_memory(webhooks, url, &healthy);
                        }
                    }
                }
            }
        });
    }
}

/// Posts `note` to `url` from memory (retried per the client's policy), the outcome to the log.
fn post_in_memory(
    webhooks: &WebhookClient,
    url: String,
    note: &Payload,
) -> (PostedDelivery, Arc<AtomicBool>, tokio::task::AbortHandle) {
    let id = Uuid::new_v4();
    let delivered = Arc::new(AtomicBool::new(false));
    let (client, hook, note, flag) =
        (webhooks.clone(), Webhook { url: url.clone() }, note.clone(), delivered.clone());
    let task = tokio::spawn(async move {
        let report = client.send(&hook, &note, id).await;
        flag.store(report.delivered, Ordering::SeqCst);
        match report.delivered {
            true => tracing::info!("webhook {} told of {}", report.url, report.kind),
            false => tracing::warn!(
                "webhook {} not told of {} after {} attempts: {}",
                report.url,
                report.kind,
                report.attempts,
                report.error.as_deref().unwrap_or("no answer")
            ),
        }
    });
    (PostedDelivery { id, target: url, delivered: false }, delivered, task.abort_handle())
}
