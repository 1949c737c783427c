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
//! once when writes start failing and `daemon_healthy` once they land again.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::health::{Health, WritesFailing};
use super::messages::Msg;
use super::{Reconciler, Result, outcome};
use crate::engine::store::{Fault, StoreError};
use crate::model::{Millis, NewEvent, now_millis};

/// The first wait before held writes are tried again.
const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait between two rounds, however long the store refuses.
const LONGEST_WAIT: Duration = Duration::from_secs(30);

/// The wait before the next round after `failed_rounds` rounds in a row that did not land:
/// 1 s, doubling, at most 30 s.
pub fn retry_wait(failed_rounds: u32) -> Duration {
    FIRST_WAIT.saturating_mul(1u32 << failed_rounds.min(16)).min(LONGEST_WAIT)
}

/// What a change to the held writes did to the daemon's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Writes started failing: the first hold of an episode.
    Unhealthy,
    /// Everything held has landed.
    Healthy,
    Same,
}

/// The episode of failing writes under way.
#[derive(Clone, Debug)]
struct Failing {
    since: Millis,
    fault: Fault,
    error: String,
}

/// What is held, and the health it makes: the loop's, and no one else's.
pub struct Held {
    /// Per run, its messages whose writes could not land, oldest first, with the ones that came
    /// after them; runs in the order they were first held.
    queues: Vec<(Uuid, VecDeque<Msg>)>,
    /// A claim could not land: the next round claims again (and the loop does not before).
    claim: bool,
    failing: Option<Failing>,
    /// Rounds in a row in which something could not land.
    failed_rounds: u32,
    /// When the next round is due, while its timer runs.
    due: Option<Millis>,
    /// The run a round is replaying, and whether its handler held a write of its own (the
    /// round then leaves the run for the next one).
    marked: Option<Uuid>,
    held_marked: bool,
    /// A round is under way: it has the next one due when it ends.
    replaying: bool,
    health: Arc<watch::Sender<Health>>,
}

impl Held {
    pub fn new(health: Arc<watch::Sender<Health>>) -> Held {
        Held {
            queues: Vec::new(),
            claim: false,
            failing: None,
            failed_rounds: 0,
            due: None,
            marked: None,
            held_marked: false,
            replaying: false,
            health,
        }
    }

    fn queue(&mut self, run: Uuid) -> Option<&mut VecDeque<Msg>> {
        self.queues.iter_mut().find(|(id, _)| *id == run).map(|(_, queue)| queue)
    }

    /// Puts `msg` behind its run's held messages; gives it back when the run has none.
    pub fn behind(&mut self, run: Uuid, msg: Msg) -> Option<Msg> {
        match self.queue(run) {
            Some(queue) => {
                queue.push_back(msg);
                self.publish();
                None
            }
            None => Some(msg),
        }
    }

    /// Holds `msg` first in its run's queue, for `fault`. Says whether the run was held
    /// already, and what this did to the health.
    pub fn hold(&mut self, run: Uuid, msg: Msg, fault: Fault, error: String) -> (bool, Turn) {
        self.held_marked |= self.marked == Some(run);
        let already = match self.queue(run) {
            Some(queue) => {
                queue.push_front(msg);
                true
            }
            None => {
                self.queues.push((run, VecDeque::from([msg])));
                false
            }
        };
        (already, self.failed(fault, error))
    }

    /// A claim could not land for `fault`.
    pub fn hold_claim(&mut self, fault: Fault, error: String) -> (bool, Turn) {
        let already = std::mem::replace(&mut self.claim, true);
        (already, self.failed(fault, error))
    }

    fn failed(&mut self, fault: Fault, error: String) -> Turn {
        let turn = match &self.failing {
            Some(_) => Turn::Same,
            None => Turn::Unhealthy,
        };
        let since = self.failing.as_ref().map_or_else(now_millis, |f| f.since);
        self.failing = Some(Failing { since, fault, error });
        self.publish();
        turn
    }

    /// Whether a claim waits for the next round.
    pub fn claim_waits(&self) -> bool {
        self.claim
    }

    /// The runs held, in the order they were first held.
    fn runs(&self) -> Vec<Uuid> {
        self.queues.iter().map(|(id, _)| *id).collect()
    }

    fn pop(&mut self, run: Uuid) -> Option<Msg> {
        self.queue(run).and_then(VecDeque::pop_front)
    }

    /// Drops the queue of `run` once empty; says whether it did.
    fn landed(&mut self, run: Uuid) -> bool {
        let before = self.queues.len();
        self.queues.retain(|(id, queue)| *id != run || !queue.is_empty());
        self.queues.len() < before
    }

    fn mark(&mut self, run: Option<Uuid>) {
        self.marked = run;
        self.held_marked = false;
    }

    /// Ends a round: `failed` when something could not land. Nothing left held ends the episode.
    fn round_done(&mut self, failed: bool) -> Turn {
        self.failed_rounds = if failed { self.failed_rounds.saturating_add(1) } else { 0 };
        let turn = match (&self.failing, self.queues.is_empty() && !self.claim) {
            (Some(_), true) => {
                self.failing = None;
                self.failed_rounds = 0;
                Turn::Healthy
            }
            _ => Turn::Same,
        };
        self.publish();
        turn
    }

    /// When something is held and no round is due yet: the wait before the next one.
    fn next_round(&mut self) -> Option<Duration> {
        if self.due.is_some() || self.replaying || (self.queues.is_empty() && !self.claim) {
            return None;
        }
        let wait = retry_wait(self.failed_rounds);
        self.due = Some(now_millis() + wait.as_millis() as Millis);
        self.publish();
        Some(wait)
    }

    pub fn health(&self) -> Health {
        Health {
            writes_failing: self.failing.as_ref().map(|f| WritesFailing {
                since: f.since,
                kind: f.fault,
                error: f.error.clone(),
                held_runs: self.queues.len(),
                held_messages: self.queues.iter().map(|(_, q)| q.len()).sum(),
                queue_waits: self.claim,
                next_try: self.due,
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
        self.held.due = None;
        self.held.replaying = true;
        let was = self.held.health();
        let mut failed = false;
        if self.held.claim {
            self.queue_drained = false;
            match self.claim_runs().await {
                Err(err) if outcome::holds(&err) => {
                    self.held.hold_claim(err.fault().unwrap_or(Fault::Lasting), error_line(&err));
                    debug!("still cannot schedule: {}", outcome::why_held(&err));
                    failed = true;
                }
                result => {
                    self.held.claim = false;
                    if let Err(err) = result {
                        warn!("reconciler: cannot schedule: {err}");
                    }
                }
            }
        }
        for run in self.held.runs() {
            while let Some(msg) = self.held.pop(run) {
                let copy = msg.clone();
                self.held.mark(Some(run));
                match self.handle(msg).await {
                    // A write of the handler's own was held: the run waits for the next round.
                    Ok(()) if self.held.held_marked => {
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
            self.held.mark(None);
            if self.held.landed(run) {
                info!(run = %run, "recorded what was held");
            }
        }
        self.held.replaying = false;
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

    fn held() -> (Held, watch::Receiver<Health>) {
        let (tx, rx) = watch::channel(Health::default());
        (Held::new(Arc::new(tx)), rx)
    }

    #[test]
    fn the_wait_doubles_from_a_second_to_half_a_minute() {
        let waits: Vec<u64> = (0..8).map(|n| retry_wait(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(retry_wait(u32::MAX), LONGEST_WAIT);
    }

    #[test]
    fn an_episode_turns_unhealthy_once_and_healthy_once_everything_landed() {
        let (mut held, health) = held();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        assert_eq!(
            held.hold(a, Msg::Drive { run: a }, Fault::Full, "disk full".into()),
            (false, Turn::Unhealthy)
        );
        assert_eq!(held.hold(a, Msg::Drive { run: a }, Fault::Full, "disk full".into()), (true, Turn::Same));
        assert_eq!(
            held.hold(b, Msg::Drive { run: b }, Fault::Lasting, "readonly".into()),
            (false, Turn::Same)
        );
        assert!(held.behind(a, Msg::Checkpoints { run: a }).is_none(), "a held run's messages wait");
        assert!(held.behind(Uuid::from_u128(3), Msg::Wake).is_some(), "others' do not");
        let shown = health.borrow().writes_failing.clone().unwrap();
        assert_eq!((shown.kind, shown.error.as_str()), (Fault::Lasting, "readonly"), "the last failure");
        assert_eq!((shown.held_runs, shown.held_messages), (2, 4));
        assert_eq!(held.next_round(), Some(FIRST_WAIT));
        assert_eq!(held.next_round(), None, "one round at a time");
        held.due = None;
        // A round where a lands and b does not.
        while held.pop(a).is_some() {}
        assert!(held.landed(a));
        assert_eq!(held.round_done(true), Turn::Same);
        assert_eq!(held.next_round(), Some(Duration::from_secs(2)), "the wait grows while rounds fail");
        held.due = None;
        assert_eq!(health.borrow().writes_failing.as_ref().map(|f| f.held_messages), Some(1));
        // A claim waits too: the episode goes on until it lands.
        assert_eq!(held.hold_claim(Fault::Away, "pool timed out".into()), (false, Turn::Same));
        while held.pop(b).is_some() {}
        assert!(held.landed(b));
        assert_eq!(held.round_done(false), Turn::Same);
        held.claim = false;
        assert_eq!(held.round_done(false), Turn::Healthy);
        assert!(health.borrow().is_healthy());
        assert_eq!(held.next_round(), None, "nothing held, no round");
        assert_eq!(
            held.hold(a, Msg::Drive { run: a }, Fault::Away, "x".into()).1,
            Turn::Unhealthy,
            "a new episode"
        );
        assert_eq!(held.next_round(), Some(FIRST_WAIT), "which starts at the first wait again");
    }
}
