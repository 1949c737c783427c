//! The outbox's poster: a task beside the loop that fans the store's notifications out into
//! deliveries and posts them, so a slow or dead receiver never holds up the loop that sees
//! exits. Every attempt's outcome is written back before the next attempt of its subject and
//! target may start, so deliveries go out in order per subject and target, and a daemon that
//! dies mid-post posts again once its lease on the delivery runs out (at least once; the
//! delivery id lets a receiver drop the repeat).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::engine::store::{Store, StoreError};
use crate::model::{DeliveryAttempt, DeliveryState, Millis, WebhookDelivery, now_millis};
use crate::webhooks::{Answer, OutboxPolicy, Payload, WebhookClient};

/// Notifications fanned out per read.
const FAN_OUT_PAGE: i64 = 100;
/// Posts in flight at once (each bounded by the client's per-attempt timeout).
const IN_FLIGHT: usize = 16;
/// How long a post holds its delivery: longer than an attempt can take, short enough that a
/// crashed daemon's post is made again soon.
const LEASE: Duration = Duration::from_secs(30);
/// The longest sleep between passes: notifications written where no poke reaches this daemon
/// (another machine) are found at least this often.
const IDLE: Duration = Duration::from_secs(5);
/// The longest time between two prunes.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

pub(super) struct OutboxPoster {
    pub(super) store: Arc<dyn Store>,
    pub(super) client: WebhookClient,
    /// `LACHESIS_WEBHOOKS`: where notifications that name no target go.
    pub(super) run_webhooks: Vec<String>,
    pub(super) policy: OutboxPolicy,
}

/// When the last prune ran, and how many deliveries ended since.
struct Pruning {
    at: Option<Instant>,
    ended: i64,
}

impl OutboxPoster {
    pub(super) async fn serve(self, wake: Arc<Notify>) {
        let poster = Arc::new(self);
        let mut posts = JoinSet::new();
        let mut pruning = Pruning { at: None, ended: 0 };
        loop {
            let sleep = match poster.pass(&mut posts, &mut pruning).await {
                Ok(sleep) => sleep,
                Err(err) => {
                    tracing::warn!("webhook outbox: {err}; trying again in {}s", IDLE.as_secs());
                    IDLE
                }
            };
            tokio::select! {
                _ = wake.notified() => {}
                Some(ended) = posts.join_next(), if !posts.is_empty() => {
                    pruning.ended += i64::from(ended.unwrap_or(false));
                }
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    }

    /// Fans out what is new, starts the posts that are due, prunes when it is time; returns
    /// how long to sleep unless woken.
    async fn pass(
        self: &Arc<Self>,
        posts: &mut JoinSet<bool>,
        pruning: &mut Pruning,
    ) -> Result<Duration, StoreError> {
        while self.store.fan_out_notifications(&self.run_webhooks, FAN_OUT_PAGE).await? as i64 == FAN_OUT_PAGE
        {
        }
        let now = now_millis();
        let room = IN_FLIGHT.saturating_sub(posts.len()) as i64;
        if room > 0 {
            for (delivery, payload) in self.store.due_deliveries(now, room).await? {
                if self.store.lease_delivery(&delivery, now + LEASE.as_millis() as i64).await? {
                    let poster = Arc::clone(self);
                    posts.spawn(async move { poster.post(delivery, payload).await });
                }
            }
        }
        let every = (self.policy.cap / 10).max(1);
        if pruning.at.is_none_or(|at| at.elapsed() >= PRUNE_EVERY) || pruning.ended >= every {
            let pruned = self
                .store
                .prune_deliveries(self.policy.keep_delivered.as_millis() as i64, self.policy.cap)
                .await?;
            if pruned > 0 {
                tracing::debug!(pruned, "webhook outbox pruned");
            }
            *pruning = Pruning { at: Some(Instant::now()), ended: 0 };
        }
        let next = self.store.next_delivery_due(now_millis()).await?;
        let until_due = next.map_or(IDLE, |at| Duration::from_millis((at - now_millis()).max(0) as u64));
        Ok(until_due.min(IDLE))
    }

    /// Where `delivery` goes: its kept URL (a schedule's), else the run webhook with its digest.
    fn url_of<'a>(&'a self, delivery: &'a WebhookDelivery) -> Option<&'a str> {
        delivery.target_url.as_deref().or_else(|| {
            let found =
                self.run_webhooks.iter().find(|url| crate::webhooks::target_key(url) == delivery.target_key);
            found.map(String::as_str)
        })
    }

    /// One attempt at `delivery`, its outcome written back; true when the delivery ended.
    async fn post(&self, delivery: WebhookDelivery, payload: Payload) -> bool {
        let answer = match (self.url_of(&delivery), payload.body(delivery.id)) {
            (Some(url), Ok(body)) => self.client.post(url, delivery.id, &delivery.event, &body).await,
            (None, _) => Answer::Refused {
                status: None,
                answer: "the webhook is no longer in this daemon's LACHESIS_WEBHOOKS".into(),
            },
            (_, Err(err)) => {
                Answer::Refused { status: None, answer: format!("cannot encode the notification: {err}") }
            }
        };
        let attempt = outcome(&self.policy, &delivery, &answer, now_millis());
        let ended = attempt.state != DeliveryState::Pending;
        if let Err(err) = self.store.record_delivery_attempt(delivery.id, &attempt).await {
            // Its lease runs out and it is posted again: at least once.
            tracing::warn!(delivery = %delivery.short_id(), "webhook outbox: cannot record an attempt: {err}");
        }
        ended
    }
}

/// What attempt number `delivery.attempts + 1`, answered `answer` at `now`, leaves: delivered,
/// failed for good, failed out of time, or pending until its backoff is over.
fn outcome(
    policy: &OutboxPolicy,
    delivery: &WebhookDelivery,
    answer: &Answer,
    now: Millis,
) -> DeliveryAttempt {
    let attempts = delivery.attempts + 1;
    let shown = crate::secrets::redact_url(&delivery.target);
    let kind = &delivery.event;
    let (state, next_at, event) = match answer {
        Answer::Delivered { .. } => (
            DeliveryState::Delivered,
            now,
            Some(format!("webhook {shown} told of {kind} (attempt {attempts})")),
        ),
        Answer::Refused { answer, .. } => (
            DeliveryState::Failed,
            now,
            Some(format!("webhook {shown} not told of {kind} after {attempts} attempts: {answer}")),
        ),
        Answer::Retry { answer, retry_after, .. } => {
            let wait = policy.backoff.wait(u32::try_from(attempts).unwrap_or(u32::MAX), *retry_after);
            let next_at = now + wait.as_millis() as i64;
            match next_at > delivery.since + policy.retry_for.as_millis() as i64 {
                true => (
                    DeliveryState::Failed,
                    now,
                    Some(format!(
                        "webhook {shown} not told of {kind} after {attempts} attempts in {}: {answer}",
                        humantime::format_duration(policy.retry_for)
                    )),
                ),
                false => (DeliveryState::Pending, next_at, None),
            }
        }
    };
    DeliveryAttempt { state, next_at, status: answer.status(), answer: answer.text(), event }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(attempts: i64, since: Millis) -> WebhookDelivery {
        WebhookDelivery {
            id: uuid::Uuid::from_u128(7),
            seq: 1,
            subject: uuid::Uuid::from_u128(8).to_string(),
            event: "run_failed".into(),
            target: "https://***@hooks.example/x?***".into(),
            target_key: String::new(),
            target_url: None,
            state: DeliveryState::Pending,
            attempts,
            next_at: since,
            since,
            last_status: None,
            last_answer: None,
            created_at: since,
            updated_at: since,
        }
    }

    fn retry(retry_after: Option<Duration>) -> Answer {
        Answer::Retry { status: Some(503), answer: "http 503 Service Unavailable".into(), retry_after }
    }

    #[test]
    fn retries_back_off_then_give_up_when_the_window_closes() {
        let policy = OutboxPolicy::default();
        let waited = outcome(&policy, &delivery(0, 0), &retry(None), 1_000);
        assert_eq!((waited.state, waited.next_at, waited.event), (DeliveryState::Pending, 3_000, None));
        let later = outcome(&policy, &delivery(3, 0), &retry(None), 10_000);
        assert_eq!(later.next_at, 10_000 + 16_000, "2 s doubled per attempt");
        // A receiver asking for an hour waits the longest backoff, 10 min.
        let asked = outcome(&policy, &delivery(0, 0), &retry(Some(Duration::from_secs(3600))), 0);
        assert_eq!(asked.next_at, 600_000);
        let day = 24 * 3600 * 1000;
        let out = outcome(&policy, &delivery(40, 0), &retry(None), day - 1_000);
        assert_eq!((out.state, out.status), (DeliveryState::Failed, Some(503)));
        let event = out.event.unwrap();
        assert_eq!(
            event,
            "webhook https://***@hooks.example/x?*** not told of run_failed after 41 attempts in 1day: http 503 Service Unavailable"
        );
    }

    #[test]
    fn a_refusal_ends_at_once_and_a_delivery_says_its_attempt() {
        let policy = OutboxPolicy::default();
        let gone = Answer::Refused { status: Some(410), answer: "http 410 Gone: bye".into() };
        let out = outcome(&policy, &delivery(0, 0), &gone, 5);
        assert_eq!((out.state, out.answer.as_str()), (DeliveryState::Failed, "http 410 Gone: bye"));
        let told = outcome(&policy, &delivery(1, 0), &Answer::Delivered { status: 204 }, 5);
        assert_eq!(told.state, DeliveryState::Delivered);
        assert_eq!(
            told.event.unwrap(),
            "webhook https://***@hooks.example/x?*** told of run_failed (attempt 2)"
        );
    }
}
