//! The webhook outbox on SQLite and PostgreSQL: a move writes its notification in its own
//! commit, a fan-out makes one delivery per target once, deliveries of a subject and target
//! go out in order, a lease is taken once, a failed delivery is resent, and the outbox stays
//! within its cap, read a page at a time.

use std::sync::Arc;

use uuid::Uuid;

use super::preemptions::queued;
use crate::engine::store::{OutboxStore, PostedDelivery, Store};
use crate::model::{DeliveryAttempt, DeliveryState, Run, RunTrigger, now_millis};
use crate::webhooks::Payload;

const A: &str = "http://user:token@127.0.0.1:9/a?key=k";
const B: &str = "http://127.0.0.1:9/b";

/// A as a delivery keeps it: its token redacted (B has none to redact).
fn shown_a() -> String {
    crate::secrets::redact_url(A)
}

async fn inserted(store: &dyn Store, name: &str, priority: i64) -> Run {
    let run = queued(name, priority);
    store.insert_run(&run, &run.pending_stages()).await.unwrap();
    run
}

fn attempt(state: DeliveryState, next_at: i64) -> DeliveryAttempt {
    DeliveryAttempt { state, next_at, status: Some(503), answer: "http 503".into(), event: None }
}

/// A run that is preempted, queued again and completes makes two notifications; each target
/// gets the second only once the first is delivered.
async fn a_run_s_notifications_go_out_in_order_per_target(store: &dyn Store) {
    let (victim, urgent) = (inserted(store, "low", 0).await, inserted(store, "urgent", 10).await);
    let victim = store.transition(&victim, RunTrigger::Claim, None, None).await.unwrap();
    let victim = store.transition(&victim, RunTrigger::AllStagesUp, None, None).await.unwrap();
    let mut params = victim.params.clone();
    params.preempted_by = Some(urgent.id);
    let stopping = store.preempt(&victim, &params, "preempted", urgent.id, "took it").await.unwrap();
    let mut next = stopping.params.clone();
    next.preempted_by = None;
    let pending = store.requeue_preempted(&stopping, "queued again", &next, "again", 0).await.unwrap();
    let claimed = store.transition(&pending, RunTrigger::Claim, None, None).await.unwrap();
    let up = store.transition(&claimed, RunTrigger::AllStagesUp, None, None).await.unwrap();
    store.transition(&up, RunTrigger::Complete, Some("done"), None).await.unwrap();

    // Nothing is delivered before a fan-out; then one delivery per target and notification.
    assert!(store.due_deliveries(i64::MAX, 10).await.unwrap().is_empty());
    assert_eq!(store.fan_out_notifications(&[A.into(), B.into()], 100).await.unwrap(), 2);
    assert_eq!(store.fan_out_notifications(&[A.into(), B.into()], 100).await.unwrap(), 0, "fanned out once");
    let listed = store.webhook_deliveries(10, None).await.unwrap();
    assert_eq!(listed.len(), 4);
    // A run webhook's URL is kept as its digest and its redacted form: no token in the store.
    assert!(listed.iter().all(|d| d.target_url.is_none() && !d.target.contains("token")), "{listed:?}");
    let a = listed.iter().find(|d| d.target == shown_a()).unwrap();
    assert_eq!(a.target_key, crate::webhooks::target_key(A));
    assert!(listed.iter().all(|d| d.subject == victim.id.to_string() && d.state == DeliveryState::Pending));

    let due = store.due_deliveries(now_millis(), 10).await.unwrap();
    let kinds: Vec<(&str, &str)> = due.iter().map(|(d, p)| (d.target.as_str(), p.kind.as_str())).collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert!(kinds.iter().all(|(_, kind)| *kind == Payload::RUN_PREEMPTED), "{kinds:?}");
    assert_eq!(due[0].1.ids["run"], victim.id.to_string());
    let (first_a, _) = due.iter().find(|(d, _)| d.target == shown_a()).unwrap().clone();

    // A first attempt that must wait holds the second back; its delivery lets it go.
    assert!(store.lease_delivery(&first_a, now_millis() + 30_000).await.unwrap());
    store
        .record_delivery_attempt(first_a.id, &attempt(DeliveryState::Pending, now_millis() + 60_000))
        .await
        .unwrap();
    let due = store.due_deliveries(now_millis(), 10).await.unwrap();
    assert!(due.iter().all(|(d, _)| d.target == B), "A's second waits for its first: {due:?}");
    assert!(store.next_delivery_due(now_millis()).await.unwrap().is_some());
    let told = DeliveryAttempt {
        state: DeliveryState::Delivered,
        next_at: now_millis(),
        status: Some(200),
        answer: "http 200".into(),
        event: Some("webhook told".into()),
    };
    store.record_delivery_attempt(first_a.id, &told).await.unwrap();
    let due = store.due_deliveries(now_millis(), 10).await.unwrap();
    let second_a = due.iter().find(|(d, _)| d.target == shown_a()).expect("A's second is due now");
    assert_eq!(second_a.1.kind, Payload::RUN_COMPLETED);
    let events = store.events(victim.id, 0).await.unwrap();
    assert!(events.iter().any(|e| e.message == "webhook told"), "the delivery's event is the run's");
    let read = store.webhook_deliveries(10, None).await.unwrap();
    let first = read.iter().find(|d| d.id == first_a.id).unwrap();
    assert_eq!((first.state, first.attempts, first.last_status), (DeliveryState::Delivered, 2, Some(200)));
}

/// Two posters racing for one delivery: one lease lands.
async fn a_delivery_is_leased_once(store: Arc<dyn Store>) {
    let run = inserted(&*store, "t", 0).await;
    let run = store.transition(&run, RunTrigger::Claim, None, None).await.unwrap();
    store.transition(&run, RunTrigger::Fail, Some("boom"), None).await.unwrap();
    store.fan_out_notifications(&[B.into()], 100).await.unwrap();
    let (delivery, payload) = store.due_deliveries(now_millis(), 10).await.unwrap().remove(0);
    assert_eq!((payload.kind.as_str(), payload.state.as_str()), (Payload::RUN_FAILED, "failed"));
    let racers: Vec<_> = (0..4)
        .map(|_| {
            let (store, delivery) = (Arc::clone(&store), delivery.clone());
            tokio::spawn(async move { store.lease_delivery(&delivery, now_millis() + 30_000).await.unwrap() })
        })
        .collect();
    let mut won = 0;
    for racer in racers {
        won += usize::from(racer.await.unwrap());
    }
    assert_eq!(won, 1);
    assert!(store.due_deliveries(now_millis(), 10).await.unwrap().is_empty(), "a leased one is not due");
}

/// A failed delivery is found by its id's prefix and sent again, with its id; a delivered one
/// is not.
async fn a_failed_delivery_is_resent(store: &dyn Store) {
    let run = inserted(store, "t", 0).await;
    store.transition(&run, RunTrigger::Cancel, None, None).await.unwrap();
    store.fan_out_notifications(&[A.into()], 100).await.unwrap();
    let (delivery, payload) = store.due_deliveries(now_millis(), 10).await.unwrap().remove(0);
    assert_eq!(payload.kind, Payload::RUN_STOPPED);
    let refused = DeliveryAttempt {
        state: DeliveryState::Failed,
        next_at: now_millis(),
        status: Some(410),
        answer: "http 410 Gone: no such hook".into(),
        event: None,
    };
    store.record_delivery_attempt(delivery.id, &refused).await.unwrap();
    assert!(store.due_deliveries(i64::MAX, 10).await.unwrap().is_empty());
    let prefix = &delivery.id.to_string()[..6];
    let found = store.deliveries_by_prefix(prefix, 10).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].last_answer.as_deref(), Some("http 410 Gone: no such hook"));
    assert!(store.resend_delivery(delivery.id).await.unwrap());
    assert!(!store.resend_delivery(delivery.id).await.unwrap(), "a pending one is not resent");
    let (again, _) = store.due_deliveries(now_millis(), 10).await.unwrap().remove(0);
    assert_eq!((again.id, again.state, again.attempts), (delivery.id, DeliveryState::Pending, 1));
    assert!(again.since >= delivery.since);
    assert!(store.deliveries_by_prefix("%", 10).await.unwrap().len() <= 1, "a wildcard is no prefix");
}

/// Pruning keeps the newest rows up to the cap and every pending one; a listing pages through.
async fn the_outbox_is_bounded_and_read_by_pages(store: &dyn Store) {
    let mut runs = Vec::new();
    for _ in 0..8 {
        let run = inserted(store, "t", 0).await;
        let run = store.transition(&run, RunTrigger::Claim, None, None).await.unwrap();
        store.transition(&run, RunTrigger::Fail, Some("boom"), None).await.unwrap();
        runs.push(run.id);
    }
    store.fan_out_notifications(&[B.into()], 3).await.unwrap();
    store.fan_out_notifications(&[B.into()], 100).await.unwrap();
    let all = store.webhook_deliveries(100, None).await.unwrap();
    assert_eq!(all.len(), 8);
    let page = store.webhook_deliveries(3, None).await.unwrap();
    let next = store.webhook_deliveries(3, Some(page.last().unwrap().seq)).await.unwrap();
    assert_eq!(
        page.iter().chain(&next).map(|d| d.id).collect::<Vec<_>>(),
        all[..6].iter().map(|d| d.id).collect::<Vec<_>>()
    );
    // The two oldest stay pending; the rest end.
    for d in &all[..6] {
        store.record_delivery_attempt(d.id, &attempt(DeliveryState::Delivered, now_millis())).await.unwrap();
    }
    let pruned = store.prune_deliveries(i64::MAX / 2, 3).await.unwrap();
    assert_eq!(pruned, 3);
    let left = store.webhook_deliveries(100, None).await.unwrap();
    let kept: Vec<Uuid> = left.iter().map(|d| d.id).collect();
    let mut want: Vec<Uuid> = all[..3].iter().chain(&all[6..]).map(|d| d.id).collect();
    want.sort();
    let mut kept_sorted = kept.clone();
    kept_sorted.sort();
    assert_eq!(kept_sorted, want, "the 3 newest and the pending ones stay");
    // Delivered rows past their retention go whatever the cap.
    assert_eq!(store.prune_deliveries(-1, 1000).await.unwrap(), 3);
    assert!(left.len() == 5 && store.webhook_deliveries(100, None).await.unwrap().len() == 2);
}

/// The health notices of an episode, written once writes land: the unhealthy one under the ids
/// it was posted with (delivered or not), then the healthy one, in that order.
async fn health_notices_keep_their_ids_and_order(store: &dyn Store) {
    let note = |kind: &str| Payload {
        kind: kind.into(),
        ids: serde_json::json!({ "node": "n1" }),
        state: kind.into(),
        summary: serde_json::Value::Null,
        at: 1,
        delivery_id: None,
    };
    let posted = [
        PostedDelivery { id: Uuid::new_v4(), target: A.into(), delivered: true },
        PostedDelivery { id: Uuid::new_v4(), target: B.into(), delivered: false },
    ];
    let (unhealthy, healthy) = (note(Payload::DAEMON_UNHEALTHY), note(Payload::DAEMON_HEALTHY));
    store.record_health_notices("daemon:n1", &unhealthy, &posted, &healthy).await.unwrap();
    store.fan_out_notifications(&[A.into(), B.into()], 100).await.unwrap();
    let due = store.due_deliveries(now_millis(), 10).await.unwrap();
    let shown: Vec<(Uuid, &str, &str)> =
        due.iter().map(|(d, p)| (d.id, d.target.as_str(), p.kind.as_str())).collect();
    // A's unhealthy one was delivered: its healthy one is due. B's waits behind its unhealthy one.
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert!(shown.contains(&(posted[1].id, B, Payload::DAEMON_UNHEALTHY)), "{shown:?}");
    assert!(
        shown.iter().any(|(_, target, kind)| *target == shown_a() && *kind == Payload::DAEMON_HEALTHY),
        "{shown:?}"
    );
    let listed = store.deliveries_by_prefix(&posted[0].id.to_string(), 1).await.unwrap();
    assert_eq!(listed[0].state, DeliveryState::Delivered);
}

on_both_backends!(
    a_run_s_notifications_go_out_in_order_per_target,
    a_delivery_is_leased_once,
    a_failed_delivery_is_resent,
    the_outbox_is_bounded_and_read_by_pages,
    health_notices_keep_their_ids_and_order,
);

/// The listing and the poster's read are index ranges and seeks, never a scan of the outbox.
#[tokio::test]
async fn sqlite_reads_the_outbox_off_its_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let location = crate::settings::StoreLocation::Sqlite(dir.path().join("lachesis.db"));
    let store = crate::engine::store::open(&location).await.unwrap();
    for sql in [crate::engine::store::outbox::LIST_SQL, crate::engine::store::outbox::DUE_SQL] {
        let plan = super::sqlite_plan(&store, sql).await;
        assert!(!plan.iter().any(|step| step.starts_with("SCAN")), "{sql}: {plan:?}");
    }
}

/// A delivery whose stored body cannot be read fails, saying so, and holds nothing back.
#[tokio::test]
async fn sqlite_an_unreadable_delivery_fails_and_blocks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let location = crate::settings::StoreLocation::Sqlite(dir.path().join("lachesis.db"));
    let store = crate::engine::store::open(&location).await.unwrap();
    for _ in 0..2 {
        let run = inserted(&store, "t", 0).await;
        store.transition(&run, RunTrigger::Cancel, None, None).await.unwrap();
    }
    store.fan_out_notifications(&[B.into()], 100).await.unwrap();
    let oldest = store.webhook_deliveries(10, None).await.unwrap().pop().unwrap();
    sqlx::query("UPDATE webhook_deliveries SET payload = 'not json' WHERE id = $1")
        .bind(oldest.id.to_string())
        .execute(store.pool())
        .await
        .unwrap();
    let due = store.due_deliveries(now_millis(), 10).await.unwrap();
    assert_eq!(due.len(), 1, "the readable one is due: {due:?}");
    let read = store.deliveries_by_prefix(&oldest.id.to_string(), 1).await.unwrap().remove(0);
    assert_eq!(read.state, DeliveryState::Failed);
    assert!(read.last_answer.unwrap().starts_with("the stored notification cannot be read: "));
}
