//! Held writes. A message whose write cannot land (a fault of the store: its disk full, the
//! database away, or a lasting refusal such as a read-only file, a dropped table or a revoked
//! privilege) is held, with every later message of its run behind it. A claim that cannot land
//! waits too: its runs stay pending in the store. What is held is tried again in rounds, each
//! run's messages in their order, after a wait that doubles from 1 s to 30 s while the rounds
//! fail: the store is never hammered, and nothing is dropped. A handler changes the loop's
//! state only once its writes landed, so a replay does only what is not done yet.
//!
//! While anything is held the daemon is unhealthy: `Held` publishes what `GET /health` shows
//! (since when, the fault and its error, what is held), and the loop posts `daemon_unhealthy`
//! once when writes start failing and `daemon_healthy` once they land again. What is held,
//! in what order it replays and how long a round waits is decided in `core::held`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::core::held::{HeldWrites, LONGEST_WAIT};
use super::health::{Health, WritesFailing};
use super::messages::Msg;
use super::{Reconciler, Result, outcome};
use crate::engine::store::{Fault, StoreError};
use crate::model::{NewEvent, now_millis};

pub use super::core::held::Turn;

/// What is held (`core::held` decides), and the health it makes: the loop's, and no one
/// else's. Every change is published for `GET /health`.
pub struct Held {
    writes: HeldWrites<Msg, Fault>,
    health: Arc<watch::Sender<Health>>,
}

impl Held {
    pub fn new(health: Arc<watch::Sender<Health>>) -> Held {
        Held { writes: HeldWrites::default(), health }
    }

    /// Puts `msg` behind its run's held messages; gives it back when the run has none.
    pub fn behind(&mut self, run: Uuid, msg: Msg) -> Option<Msg> {
        let back = self.writes.behind(run, msg);
        if back.is_none() {
            self.publish();
        }
        back
    }

    /// Holds `msg` first in its run's queue, for `fault`. Says whether the run was held
    /// already, and what this did to the health.
    pub fn hold(&mut self, run: Uuid, msg: Msg, fault: Fault, error: String) -> (bool, Turn) {
        let held = self.writes.hold(run, msg, fault, error, now_millis());
        self.publish();
        held
    }

    /// A claim could not land for `fault`.
    pub fn hold_claim(&mut self, fault: Fault, error: String) -> (bool, Turn) {
        let held = self.writes.hold_claim(fault, error, now_millis());
        self.publish();
        held
    }

    /// Drops what is held of `run`, which this node no longer holds; says how many messages.
    pub fn forget(&mut self, run: Uuid) -> usize {
        let dropped = self.writes.forget(run);
        if dropped > 0 {
            self.publish();
        }
        dropped
    }

    /// Whether a claim waits for the next round.
    pub fn claim_waits(&self) -> bool {
        self.writes.claim
    }

    fn round_done(&mut self, failed: bool) -> Turn {
        let turn = self.writes.round_done(failed);
        self.publish();
        turn
    }

    fn next_round(&mut self) -> Option<Duration> {
        let wait = self.writes.next_round(now_millis());
        if wait.is_some() {
            self.publish();
        }
        wait
    }

    pub fn health(&self) -> Health {
        let (held_runs, held_messages) = self.writes.counts();
        Health {
            writes_failing: self.writes.failing.as_ref().map(|f| WritesFailing {
                since: f.since,
                kind: f.fault,
                error: f.error.clone(),
                held_runs,
                held_messages,
                queue_waits: self.writes.claim,
                next_try: self.writes.due,
            }),
        }
    }

    fn publish(&self) {
        self.health.send_replace(self.health());
    }
}

/// The error of a held write, on one line.
fn error_line(err: &StoreError) -> String {
    crate::text::one_line(&err.to_string())
}

impl Reconciler {
    /// Handles `msg`, or holds it: behind earlier messages of its run still held, or because
    /// a write it made could not land. A held message is tried again as it was, so a handler
    /// changes the loop's state only once its writes landed, and does again on a replay only
    /// what is not done yet.
    pub(super) async fn handle_or_hold(&mut self, msg: Msg) -> Result {
        if let Msg::Replay = msg {
            return self.replay().await;
        }
        let Some(run) = msg.run() else { return self.handle(msg).await };
        let Some(msg) = self.held.behind(run, msg) else { return Ok(()) };
        let copy = msg.clone();
        let result = self.handle(msg).await;
        self.or_hold(run, result, copy)
    }

    /// Takes the outcome of a step for run `id` (a message, or one taken outside a message: a
    /// claim, a repair, a rescan): when its write could not land, `msg` is held to take it again.
    pub(super) fn or_hold(&mut self, id: Uuid, result: Result, msg: Msg) -> Result {
        match result {
            Err(err) if outcome::holds(&err) => {
                self.hold(id, msg, &err);
                Ok(())
            }
            other => other,
        }
    }

    /// Records an event of run `id`, or holds it until it can land.
    pub(super) async fn note(&mut self, id: Uuid, event: NewEvent) -> Result {
        let result = self.store.add_event(id, &event).await;
        self.or_hold(id, result, Msg::Note { run: id, event })
    }

    /// Keeps `msg` first in its run's queue until a round lands it.
    fn hold(&mut self, run: Uuid, msg: Msg, err: &StoreError) {
        let fault = err.fault().unwrap_or(Fault::Lasting);
        let what = msg.what();
        let (already, turn) = self.held.hold(run, msg, fault, error_line(err));
        let why = outcome::why_held(err);
        // Said when the run's writes start being held, not at every round while they are.
        if already {
            debug!(run = %run, "still cannot record {what}: {why}");
        } else {
            warn!(run = %run, "could not record {what}: {why}; held until the store takes it");
        }
        self.after_hold(turn);
    }

    /// Claims runs, unless a claim that could not land waits for the next round; one that
    /// cannot land now waits for it (its runs stay pending in the store meanwhile).
    pub(super) async fn claim_or_wait(&mut self) -> Result {
        if self.held.claim_waits() {
            return Ok(());
        }
        match self.claim_runs().await {
            Err(err) if outcome::holds(&err) => {
                let (already, turn) =
                    self.held.hold_claim(err.fault().unwrap_or(Fault::Lasting), error_line(&err));
                if !already {
                    warn!(
                        "reconciler: cannot schedule: {}; the queue waits until the store takes it",
                        outcome::why_held(&err)
                    );
                }
                self.after_hold(turn);
                Ok(())
            }
            other => other,
        }
    }

    /// After a hold: says so when writes start failing, and has a round due.
    fn after_hold(&mut self, turn: Turn) {
        if turn == Turn::Unhealthy
            && let Some(failing) = self.held.health().writes_failing
        {
            warn!(
                kind = %failing.kind,
                "writes to the store fail ({}): {}; what they record is held and tried again, every {}s at most",
                failing.kind.meaning(),
                failing.error,
                LONGEST_WAIT.as_secs()
            );
            self.post_health_webhook(turn, &self.held.health());
        }
        self.schedule_round();
    }

    fn schedule_round(&mut self) {
        let Some(wait) = self.held.next_round() else { return };
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = tx.send(Msg::Replay);
        });
    }

    /// A round: a claim that waits, then each held run's messages in order until one cannot
    /// land again (the next run is tried all the same: a fault may be one table's).
    async fn replay(&mut self) -> Result {
        self.held.writes.due = None;
        self.held.writes.replaying = true;
        let was = self.held.health();
        let mut failed = false;
        if self.held.writes.claim {
            self.queue_drained = false;
            match self.claim_runs().await {
                Err(err) if outcome::holds(&err) => {
                    self.held.hold_claim(err.fault().unwrap_or(Fault::Lasting), error_line(&err));
                    debug!("still cannot schedule: {}", outcome::why_held(&err));
                    failed = true;
                }
                result => {
                    self.held.writes.claim = false;
                    if let Err(err) = result {
                        warn!("reconciler: cannot schedule: {err}");
                    }
                }
            }
        }
        for run in self.held.writes.runs() {
            while let Some(msg) = self.held.writes.pop(run) {
                let copy = msg.clone();
                self.held.writes.mark(Some(run));
                match self.handle(msg).await {
                    // A write of the handler's own was held: the run waits for the next round.
                    Ok(()) if self.held.writes.held_marked => {
                        failed = true;
                        break;
                    }
                    Ok(()) => {}
                    Err(err) if outcome::holds(&err) => {
                        let fault = err.fault().unwrap_or(Fault::Lasting);
                        self.held.hold(run, copy, fault, error_line(&err));
                        debug!(run = %run, "still cannot record: {}", outcome::why_held(&err));
                        failed = true;
                        break;
                    }
                    Err(err) => self.on_error(err).await,
                }
            }
            self.held.writes.mark(None);
            if self.held.writes.landed(run) {
                info!(run = %run, "recorded what was held");
            }
        }
        self.held.writes.replaying = false;
        let turn = self.held.round_done(failed);
        if turn == Turn::Healthy {
            let since = was.writes_failing.as_ref().map_or_else(now_millis, |f| f.since);
            info!(
                "writes to the store land again, after {}s: what was held is recorded",
                (now_millis() - since).max(0) / 1000
            );
            self.post_health_webhook(turn, &was);
        }
        self.schedule_round();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_held_is_published_for_the_health_endpoint() {
        let (tx, health) = watch::channel(Health::default());
        let mut held = Held::new(Arc::new(tx));
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        held.hold(a, Msg::Drive { run: a }, Fault::Full, "disk full".into());
        held.hold(b, Msg::Drive { run: b }, Fault::Lasting, "readonly".into());
        assert!(held.behind(a, Msg::Checkpoints { run: a }).is_none(), "a held run's messages wait");
        assert!(held.behind(Uuid::from_u128(3), Msg::Wake).is_some(), "others' do not");
        let shown = health.borrow().writes_failing.clone().unwrap();
        assert_eq!((shown.kind, shown.error.as_str()), (Fault::Lasting, "readonly"), "the last failure");
        assert_eq!((shown.held_runs, shown.held_messages), (2, 3));
        assert!(held.next_round().is_some());
        assert!(health.borrow().writes_failing.as_ref().is_some_and(|f| f.next_try.is_some()));
        while held.writes.pop(a).is_some() {}
        while held.writes.pop(b).is_some() {}
        held.writes.landed(a);
        held.writes.landed(b);
        assert_eq!(held.round_done(false), Turn::Healthy);
        assert!(health.borrow().is_healthy());
    }
}
