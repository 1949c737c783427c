//! News of readings: which sweeps' members got new readings of their metric in this process,
//! rung by whoever recorded them (the reconciler's metric workers, the W&B poller) and waited
//! on by the sweep decider, so a reading that condemns a member is decided on at once rather
//! than at the next tick. It only says where to look: a decision is still made from what the
//! store holds, so losing the news (a restart, a reading another process recorded) costs the
//! decider's next tick, never a decision.

use std::collections::BTreeSet;
use std::sync::Mutex;

use tokio::sync::Notify;
use uuid::Uuid;

use crate::workflow::metrics::NotNumber;

/// The sweeps with new readings since the decider last took them, and its wake-up.
#[derive(Debug, Default)]
pub struct SweepReadings {
    /// At most one entry per sweep with a member running here: bounded by the runs supervised.
    sweeps: Mutex<BTreeSet<Uuid>>,
    wake: Notify,
}

impl SweepReadings {
    /// Readings of sweep `sweep`'s metric landed in the store.
    pub fn landed(&self, sweep: Uuid) {
        if let Ok(mut sweeps) = self.sweeps.lock() {
            sweeps.insert(sweep);
        }
        // Kept as a permit when the decider is busy: news rung meanwhile wakes its next wait.
        self.wake.notify_one();
    }

    /// Waits until readings land (at once if some landed since the last wait).
    pub async fn wait(&self) {
        self.wake.notified().await;
    }

    /// The sweeps with new readings, emptied.
    pub fn take(&self) -> BTreeSet<Uuid> {
        self.sweeps.lock().map(|mut sweeps| std::mem::take(&mut *sweeps)).unwrap_or_default()
    }
}

/// The event a member's metric worker writes (once per attempt) when a value of the sweep's
/// metric is no number: `metrics: loss at step 4 is not a number ("0.5"): sweep 1a2b3c4d
/// leaves it out`.
pub fn not_a_number_note(odd: &NotNumber, sweep: Uuid) -> String {
    format!(
        "metrics: {} at step {} is not a number ({}): sweep {} leaves it out",
        odd.name,
        odd.step,
        odd.text,
        crate::model::short_id(&sweep)
    )
}

/// What such an event says of metric `metric` (`loss at step 4 is not a number ("0.5")`), if
/// `message` is one.
pub(crate) fn not_a_number_of<'m>(message: &'m str, metric: &str) -> Option<&'m str> {
    let said = message.strip_prefix("metrics: ")?;
    let (what, _) = said.rsplit_once(": sweep ")?;
    (what.strip_prefix(metric)?.starts_with(" at step ") && what.contains(" is not a number ("))
        .then_some(what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn news_rung_before_the_wait_wakes_it_and_is_taken_once() {
        let readings = SweepReadings::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        readings.landed(a);
        readings.landed(b);
        readings.landed(a);
        tokio::time::timeout(std::time::Duration::from_secs(5), readings.wait()).await.unwrap();
        assert_eq!(readings.take(), BTreeSet::from([a, b]));
        assert!(readings.take().is_empty());
    }

    #[test]
    fn a_not_a_number_note_reads_back_for_its_metric_only() {
        let odd = NotNumber { name: "train/loss".into(), step: 4, text: "\"0.5\"".into() };
        let note = not_a_number_note(&odd, Uuid::nil());
        assert_eq!(
            note,
            "metrics: train/loss at step 4 is not a number (\"0.5\"): sweep 00000000 leaves it out"
        );
        assert_eq!(
            not_a_number_of(&note, "train/loss"),
            Some("train/loss at step 4 is not a number (\"0.5\")")
        );
        assert_eq!(not_a_number_of(&note, "train"), None);
        assert_eq!(not_a_number_of(&note, "loss"), None);
        assert_eq!(not_a_number_of("stop: early-terminated", "loss"), None);
    }
}
