//! The webhook outbox. A notification is written by the transaction of the move that causes it
//! (`insert_notification`: a run's end or preemption, a dependency failure, a test's end, a
//! sweep's end), whatever process makes the move; a daemon fans each out into one delivery per
//! webhook (the run webhooks are its own `LACHESIS_WEBHOOKS`, hence the late fan-out) and posts
//! the deliveries from here: leased by a compare-and-set so two daemons never post one at once,
//! in order per subject and target, kept until pruned.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use super::events::insert_event;
use super::rows::{corrupt, from_json, json};
use super::sql::{IdRange, SqlStore};
use super::{Backend, Result};
use crate::model::{DeliveryAttempt, DeliveryState, EventKind, Millis, WebhookDelivery, now_millis};
use crate::webhooks::Payload;

/// The columns `delivery_from_row` reads.
macro_rules! delivery_columns {
    () => {
        "id, seq, subject, event, target, target_key, target_url, state, attempts, next_at, since, last_status, \
         last_answer, created_at, updated_at"
    };
}

/// Pending deliveries due by `$1` with no earlier pending one of their subject and target:
/// an index range of the due ones, and a seek per row into the order's index.
pub(super) const DUE_SQL: &str = concat!(
    "SELECT ",
    delivery_columns!(),
    ", payload FROM webhook_deliveries d WHERE state = 'pending' AND next_at <= $1 AND NOT EXISTS (",
    "SELECT 1 FROM webhook_deliveries e WHERE e.subject = d.subject AND e.target_key = d.target_key ",
    "AND e.seq < d.seq AND e.state = 'pending') ORDER BY next_at, seq LIMIT $2"
);

/// A page of the listing, newest first, before notification `$1`: a range of the seq index.
pub(super) const LIST_SQL: &str = concat!(
    "SELECT ",
    delivery_columns!(),
    " FROM webhook_deliveries WHERE seq < $1 ORDER BY seq DESC, id DESC LIMIT $2"
);

/// Writes, in `tx`, a notification about `subject`: to `targets`, or to the run webhooks of
/// the daemon that fans it out when None. Nothing is written for an empty list.
pub(super) async fn insert_notification(
    tx: &mut sqlx::AnyConnection,
    subject: &str,
    payload: &Payload,
    targets: Option<&[String]>,
) -> Result<()> {
    if targets.is_none_or(|t| !t.is_empty()) {
        notification_row(tx, subject, payload, targets).await?;
    }
    Ok(())
}

/// Writes a notification row and returns its place in the order (`seq`).
async fn notification_row(
    tx: &mut sqlx::AnyConnection,
    subject: &str,
    payload: &Payload,
    targets: Option<&[String]>,
) -> Result<i64> {
    let row = sqlx::query(
        "INSERT INTO webhook_notifications (subject, event, payload, targets, created_at) \
         VALUES ($1, $2, $3, $4, $5) RETURNING seq",
    )
    .bind(subject)
    .bind(&payload.kind)
    .bind(json(payload))
    .bind(targets.map(|t| json(&t)))
    .bind(now_millis())
    .fetch_one(&mut *tx)
    .await?;
    Ok(row.try_get("seq")?)
}

/// One delivery an in-memory post already made or started (the health notices), written with
/// the id it was posted under so a receiver drops a repeat.
#[derive(Clone, Debug)]
pub struct PostedDelivery {
    pub id: Uuid,
    pub target: String,
    pub delivered: bool,
}

#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// Fans out up to `limit` notifications, oldest first, into one pending delivery per
    /// target (`run_webhooks` for those that name none); returns how many notifications.
    async fn fan_out_notifications(&self, run_webhooks: &[String], limit: i64) -> Result<usize>;
    /// Pending deliveries due by `now` that no earlier pending delivery of their subject and
    /// target holds back, with their payloads; at most `limit`, soonest first. One whose stored
    /// payload cannot be read is marked failed instead, saying so.
    async fn due_deliveries(&self, now: Millis, limit: i64) -> Result<Vec<(WebhookDelivery, Payload)>>;
    /// When the soonest pending delivery due after `after` is due (None: none is).
    async fn next_delivery_due(&self, after: Millis) -> Result<Option<Millis>>;
    /// Takes `delivery` for a post until `until`, if it is still as read: false when another
    /// poster took it first.
    async fn lease_delivery(&self, delivery: &WebhookDelivery, until: Millis) -> Result<bool>;
    /// Records an attempt at delivery `id` (and, when it ends, its event on the subject).
    async fn record_delivery_attempt(&self, id: Uuid, attempt: &DeliveryAttempt) -> Result<()>;
    /// The newest deliveries, `before` a `seq` when given (the next page): read off an index.
    async fn webhook_deliveries(&self, limit: i64, before: Option<i64>) -> Result<Vec<WebhookDelivery>>;
    /// The deliveries whose id starts with `prefix` (at most `limit`).
    async fn deliveries_by_prefix(&self, prefix: &str, limit: i64) -> Result<Vec<WebhookDelivery>>;
    /// Makes failed delivery `id` pending again, due now, with a fresh retry window; false
    /// when it is not failed.
    async fn resend_delivery(&self, id: Uuid) -> Result<bool>;
    /// Forgets delivered rows older than `keep_delivered` ms, then the oldest ended ones
    /// (delivered or failed) beyond `cap` rows in all; returns how many.
    async fn prune_deliveries(&self, keep_delivered: Millis, cap: i64) -> Result<u64>;
    /// Writes the health notices of an episode the store could not record: `unhealthy` as it
    /// was posted from memory (each target's delivery, delivered or not), then `healthy` to
    /// the run webhooks, in one transaction and in that order.
    async fn record_health_notices(
        &self,
        subject: &str,
        unhealthy: &Payload,
        posted: &[PostedDelivery],
        healthy: &Payload,
    ) -> Result<()>;
}

fn delivery_from_row(row: &AnyRow) -> Result<WebhookDelivery> {
    let id: String = row.try_get("id")?;
    let state: String = row.try_get("state")?;
    Ok(WebhookDelivery {
        id: Uuid::parse_str(&id).map_err(|e| corrupt(format!("delivery id {id}: {e}")))?,
        seq: row.try_get("seq")?,
        subject: row.try_get("subject")?,
        event: row.try_get("event")?,
        target: row.try_get("target")?,
        target_key: row.try_get("target_key")?,
        target_url: row.try_get("target_url")?,
        state: state.parse().map_err(corrupt)?,
        attempts: row.try_get("attempts")?,
        next_at: row.try_get("next_at")?,
        since: row.try_get("since")?,
        last_status: row.try_get("last_status")?,
        last_answer: row.try_get("last_answer")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// Where one delivery goes: its URL, and whether the store may keep it (a schedule's, which
/// the store holds anyway) or only its digest and redacted form (`LACHESIS_WEBHOOKS`').
struct Target<'a> {
    url: &'a str,
    kept: bool,
}

/// Writes one pending (or, when `delivered`, delivered) delivery of notification `seq`.
#[allow(clippy::too_many_arguments)]
async fn insert_delivery(
    tx: &mut sqlx::AnyConnection,
    id: Uuid,
    seq: i64,
    subject: &str,
    event: &str,
    target: Target<'_>,
    payload: &str,
    delivered: bool,
) -> Result<()> {
    let now = now_millis();
    let state = if delivered { DeliveryState::Delivered } else { DeliveryState::Pending };
    sqlx::query(
        "INSERT INTO webhook_deliveries (id, seq, subject, event, target, target_key, target_url, payload, state, \
         attempts, next_at, since, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, \
         $11, $11)",
    )
    .bind(id.to_string())
    .bind(seq)
    .bind(subject)
    .bind(event)
    .bind(crate::secrets::redact_url(target.url))
    .bind(crate::webhooks::target_key(target.url))
    .bind(target.kept.then_some(target.url))
    .bind(payload)
    .bind(state.as_str())
    .bind(i64::from(delivered))
    .bind(now)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

#[async_trait]
impl OutboxStore for SqlStore {
    async fn fan_out_notifications(&self, run_webhooks: &[String], limit: i64) -> Result<usize> {
        let rows = sqlx::query(
            "SELECT seq, subject, event, payload, targets FROM webhook_notifications ORDER BY seq LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        for row in &rows {
            let seq: i64 = row.try_get("seq")?;
            let subject: String = row.try_get("subject")?;
            let event: String = row.try_get("event")?;
            let payload: String = row.try_get("payload")?;
            let targets: Option<String> = row.try_get("targets")?;
            let kept = targets.is_some();
            let mut targets =
                match targets.map(|text| from_json::<Vec<String>>(&text, "notification targets")) {
                    Some(Ok(targets)) => targets,
                    // Unreadable, it could only block the ones behind it: it goes, and the log says so.
                    Some(Err(err)) => {
                        tracing::warn!(subject, event, "webhook notification dropped: {err}");
                        Vec::new()
                    }
                    None => run_webhooks.to_vec(),
                };
            targets.dedup();
            let mut tx = self.pool().begin().await?;
            // Deleted first: a notification another daemon fanned out is not fanned out twice.
            let taken = sqlx::query("DELETE FROM webhook_notifications WHERE seq = $1")
                .bind(seq)
                .execute(&mut *tx)
                .await?;
            if taken.rows_affected() == 0 {
                continue;
            }
            for url in &targets {
                let target = Target { url, kept };
                insert_delivery(&mut tx, Uuid::new_v4(), seq, &subject, &event, target, &payload, false)
                    .await?;
            }
            tx.commit().await?;
        }
        Ok(rows.len())
    }

    async fn due_deliveries(&self, now: Millis, limit: i64) -> Result<Vec<(WebhookDelivery, Payload)>> {
        let rows = sqlx::query(DUE_SQL).bind(now).bind(limit).fetch_all(self.pool()).await?;
        let mut due = Vec::with_capacity(rows.len());
        for row in &rows {
            let delivery = delivery_from_row(row)?;
            let payload: String = row.try_get("payload")?;
            match serde_json::from_str::<Payload>(&payload) {
                Ok(payload) => due.push((delivery, payload)),
                // A row nobody can post would hold its subject's later ones back for good.
                Err(err) => {
                    let answer = format!("the stored notification cannot be read: {err}");
                    let unreadable = DeliveryAttempt {
                        state: DeliveryState::Failed,
                        next_at: now,
                        status: None,
                        answer,
                        event: None,
                    };
                    self.record_delivery_attempt(delivery.id, &unreadable).await?;
                }
            }
        }
        Ok(due)
    }

    async fn next_delivery_due(&self, after: Millis) -> Result<Option<Millis>> {
        let row = sqlx::query(
            "SELECT MIN(next_at) AS due FROM webhook_deliveries WHERE state = 'pending' AND next_at > $1",
        )
        .bind(after)
        .fetch_one(self.pool())
        .await?;
        Ok(row.try_get("due")?)
    }

    async fn lease_delivery(&self, delivery: &WebhookDelivery, until: Millis) -> Result<bool> {
        let leased = sqlx::query(
            "UPDATE webhook_deliveries SET next_at = $1 WHERE id = $2 AND state = 'pending' AND next_at = $3 \
             AND attempts = $4",
        )
        .bind(until)
        .bind(delivery.id.to_string())
        .bind(delivery.next_at)
        .bind(delivery.attempts)
        .execute(self.pool())
        .await?;
        Ok(leased.rows_affected() == 1)
    }

    async fn record_delivery_attempt(&self, id: Uuid, attempt: &DeliveryAttempt) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query(
            "UPDATE webhook_deliveries SET state = $1, attempts = attempts + 1, next_at = $2, last_status = $3, \
             last_answer = $4, updated_at = $5 WHERE id = $6 AND state = 'pending' RETURNING subject",
        )
        .bind(attempt.state.as_str())
        .bind(attempt.next_at)
        .bind(attempt.status.map(i64::from))
        .bind(&attempt.answer)
        .bind(now_millis())
        .bind(id.to_string())
        .fetch_optional(&mut *tx)
        .await?;
        // A subject that is a run or a test hears how its notice went, as an event.
        let subject = row.map(|row| row.try_get::<String, _>("subject")).transpose()?;
        if let (Some(subject), Some(message)) = (subject, &attempt.event)
            && let Ok(subject) = Uuid::parse_str(&subject)
        {
            insert_event(&mut *tx, subject, EventKind::Note, None, None, message).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn webhook_deliveries(&self, limit: i64, before: Option<i64>) -> Result<Vec<WebhookDelivery>> {
        let rows =
            sqlx::query(LIST_SQL).bind(before.unwrap_or(i64::MAX)).bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(delivery_from_row).collect()
    }

    async fn deliveries_by_prefix(&self, prefix: &str, limit: i64) -> Result<Vec<WebhookDelivery>> {
        let Some(range) = IdRange::of(prefix) else { return Ok(Vec::new()) };
        let sql = match super::Store::backend(self) {
            Backend::Sqlite => concat!(
                "SELECT ",
                delivery_columns!(),
                " FROM webhook_deliveries WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3"
            ),
            Backend::Postgres => concat!(
                "SELECT ",
                delivery_columns!(),
                " FROM webhook_deliveries WHERE id ~>=~ $1 AND id ~<~ $2 ORDER BY id LIMIT $3"
            ),
        };
        let rows =
            sqlx::query(sql).bind(range.from).bind(range.below).bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(delivery_from_row).collect()
    }

    async fn resend_delivery(&self, id: Uuid) -> Result<bool> {
        let now = now_millis();
        let resent = sqlx::query(
            "UPDATE webhook_deliveries SET state = 'pending', next_at = $1, since = $1, updated_at = $1 \
             WHERE id = $2 AND state = 'failed'",
        )
        .bind(now)
        .bind(id.to_string())
        .execute(self.pool())
        .await?;
        Ok(resent.rows_affected() == 1)
    }

    async fn prune_deliveries(&self, keep_delivered: Millis, cap: i64) -> Result<u64> {
        let old = sqlx::query("DELETE FROM webhook_deliveries WHERE state = 'delivered' AND updated_at < $1")
            .bind(now_millis() - keep_delivered)
            .execute(self.pool())
            .await?
            .rows_affected();
        // The cap's boundary: the seq of the cap-th newest row, read off the listing's index.
        let boundary = sqlx::query("SELECT seq FROM webhook_deliveries ORDER BY seq DESC LIMIT 1 OFFSET $1")
            .bind(cap.max(0))
            .fetch_optional(self.pool())
            .await?;
        let Some(boundary) = boundary else { return Ok(old) };
        let boundary: i64 = boundary.try_get("seq")?;
        let over = sqlx::query("DELETE FROM webhook_deliveries WHERE seq <= $1 AND state <> 'pending'")
            .bind(boundary)
            .execute(self.pool())
            .await?
            .rows_affected();
        Ok(old + over)
    }

    async fn record_health_notices(
        &self,
        subject: &str,
        unhealthy: &Payload,
        posted: &[PostedDelivery],
        healthy: &Payload,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        // An empty notification takes the unhealthy notice's place in the order; its
        // deliveries are the ones already posted, under their ids.
        let seq = notification_row(&mut tx, subject, unhealthy, Some(&[])).await?;
        sqlx::query("DELETE FROM webhook_notifications WHERE seq = $1").bind(seq).execute(&mut *tx).await?;
        let body = json(unhealthy);
        for post in posted {
            insert_delivery(
                &mut tx,
                post.id,
                seq,
                subject,
                &unhealthy.kind,
                Target { url: &post.target, kept: false },
                &body,
                post.delivered,
            )
            .await?;
        }
        insert_notification(&mut tx, subject, healthy, None).await?;
        tx.commit().await?;
        Ok(())
    }
}
