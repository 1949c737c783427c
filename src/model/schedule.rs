//! A schedule: a cron expression that enqueues an inference test (a nightly regression check).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::InferenceSpec;
use super::Millis;
use super::regression::RegressionPolicy;

/// A cron expression that enqueues an inference test (a nightly regression check).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Schedule {
    pub id: Uuid,
    pub name: String,
    pub cron: String,
    pub tz: Option<String>,
    /// The inference test each firing enqueues.
    pub spec: InferenceSpec,
    /// URLs POSTed when a test of this schedule finishes or regresses.
    pub webhooks: Vec<String>,
    /// How far a model's accuracy may fall below the baseline before the test is `regressed`.
    pub policy: RegressionPolicy,
    pub paused: bool,
    /// Due times up to here are handled (fired, caught up or skipped).
    pub last_fired: Millis,
    pub created_at: Millis,
}

impl Schedule {
    /// The first due time after `now`, in milliseconds; `None` when paused or when the
    /// expression never fires again.
    pub fn next_due(&self, now: chrono::DateTime<chrono::Utc>) -> Option<Millis> {
        if self.paused {
            return None;
        }
        let cron = crate::cron::Cron::parse(&self.cron, self.tz.as_deref()).ok()?;
        Some(cron.next_after(now)?.timestamp_millis())
    }
}
