//! Time limits: one timer per supervised run fires at its attempt's start plus the workflow's
//! `time_limit`, and the run then fails (or is retried) with the normal stop of its stages.
//! The start is the one the store recorded at the claim, so a restarted daemon keeps the
//! clock. The decision is `core::time_limits::decide`, pure and tested as a table.

use std::time::Duration;

use tokio::task::AbortHandle;
use tracing::info;
use uuid::Uuid;

use super::core::time_limits::{Verdict, deadline, decide};
use super::supervised::Supervised;
use super::{Msg, Reconciler, Result};
use crate::model::{RunTrigger, now_millis};

/// A run's armed time-limit timer; dropped with the run's supervision, it never fires.
pub struct LimitTimer(AbortHandle);

impl Drop for LimitTimer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Arms the run's timer once per supervision, when its attempt has a deadline.
pub(super) fn arm(sup: &mut Supervised, tx: &tokio::sync::mpsc::UnboundedSender<Msg>) {
    if sup.time_limit.is_some() {
        return;
    }
    let Some(deadline) = deadline(&sup.run) else { return };
    let (tx, id) = (tx.clone(), sup.run.id);
    let wait = Duration::from_millis((deadline - now_millis()).max(0) as u64);
    let task = tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        let _ = tx.send(Msg::TimeLimit { run: id });
    });
    sup.time_limit = Some(LimitTimer(task.abort_handle()));
}

impl Reconciler {
    /// A run's time-limit timer fired: stop it as failed (or retried) if it is still going.
    pub(super) async fn on_time_limit(&mut self, id: Uuid) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        sup.time_limit = None;
        match decide(&sup.run, now_millis()) {
            Verdict::None => return Ok(()),
            // Woken early (a clock step): wait again for the rest.
            Verdict::Until(_) => {
                arm(sup, &self.tx);
                return Ok(());
            }
            Verdict::Fail { reason } => {
                info!(run = %sup.run.short_id(), "{reason}");
                self.transition(id, RunTrigger::Fail, Some(&reason)).await?;
            }
            Verdict::Retry { reason, .. } => {
                info!(run = %sup.run.short_id(), "{reason}");
                self.transition(id, RunTrigger::Retry, Some(&reason)).await?;
            }
        }
        self.drive(id).await
    }
}
