//! What is POSTed: one JSON shape for every notification, and how a run's, a test's and a
//! sweep's moves become one (the store writes these in the transaction of the move).

use serde::{Deserialize, Serialize};

use crate::model::sweep::SweepWinner;
use crate::model::{InferenceTest, Run, RunState, TestState};

/// What is POSTed, as JSON, to every webhook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payload {
    /// One of the `Payload::*` kinds (`run_completed`, `regression`, …).
    pub kind: String,
    /// Which run/test/workflow this is about.
    pub ids: serde_json::Value,
    pub state: String,
    pub summary: serde_json::Value,
    /// Unix seconds.
    pub at: i64,
    /// The delivery's id, the same in every attempt of it (and in `X-Lachesis-Delivery`), so
    /// a receiver can drop the duplicates at-least-once delivery may bring. Set when posted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
}

impl Payload {
    pub const TEST_FINISHED: &str = "test_finished";
    pub const REGRESSION: &str = "regression";
    pub const RUN_COMPLETED: &str = "run_completed";
    pub const RUN_FAILED: &str = "run_failed";
    /// A user stopped the run (or cancelled it while it waited).
    pub const RUN_STOPPED: &str = "run_stopped";
    /// A run was stopped for a run of higher priority; it queues again once its stages are gone.
    pub const RUN_PREEMPTED: &str = "run_preempted";
    /// A sweep ended: every member ended (`done`, with its winner) or a user stopped it.
    pub const SWEEP_ENDED: &str = "sweep_ended";
    /// The daemon's morning report (`src/engine/report_poster.rs`): the whole report as the summary.
    pub const MORNING_REPORT: &str = "morning_report";
    /// The daemon's writes to the store started failing (posted once per episode, to
    /// `LACHESIS_WEBHOOKS`): the summary says since when, why and what is held.
    pub const DAEMON_UNHEALTHY: &str = "daemon_unhealthy";
    /// The daemon's writes land again, and what was held is recorded.
    pub const DAEMON_HEALTHY: &str = "daemon_healthy";

    fn now(kind: &str, ids: serde_json::Value, state: &str, summary: serde_json::Value) -> Payload {
        Payload {
            kind: kind.into(),
            ids,
            state: state.into(),
            summary,
            at: chrono::Utc::now().timestamp(),
            delivery_id: None,
        }
    }

    /// What every run webhook is told of a run that just moved to its state: None for states
    /// nobody is told of (a start, a requeue).
    pub fn of_run(run: &Run) -> Option<Payload> {
        let kind = match run.state {
            RunState::Completed => Payload::RUN_COMPLETED,
            RunState::Failed => Payload::RUN_FAILED,
            RunState::Stopped => Payload::RUN_STOPPED,
            RunState::Stopping if run.preempted_by().is_some() => Payload::RUN_PREEMPTED,
            _ => return None,
        };
        let summary = match run.preempted_by() {
            Some(by) => {
                serde_json::json!({ "reason": run.reason, "preempted_by": by, "preemptions": run.preemptions })
            }
            None => serde_json::json!({ "reason": run.reason }),
        };
        let ids = serde_json::json!({ "run": run.id, "workflow": run.workflow, "env": run.env_name });
        Some(Payload::now(kind, ids, run.state.as_str(), summary))
    }

    /// What a scheduled test's webhooks are told when it ends: that it finished, and of a
    /// regression. Nothing while it has not ended.
    pub fn of_test(test: &InferenceTest, schedule: &str) -> Vec<Payload> {
        if !test.state.is_terminal() {
            return Vec::new();
        }
        let ids = serde_json::json!({ "test": test.id, "schedule": schedule, "env": test.env_name });
        let summary = test.results.as_ref().map(|r| r["summary"].clone()).unwrap_or_default();
        let mut notes = vec![Payload::now(Payload::TEST_FINISHED, ids.clone(), test.state.as_str(), summary)];
        if test.state == TestState::Regressed {
            let regressions = test.results.as_ref().map(|r| r["regressions"].clone());
            let summary = serde_json::json!({ "reason": test.reason, "regressions": regressions });
            notes.push(Payload::now(Payload::REGRESSION, ids, test.state.as_str(), summary));
        }
        notes
    }

    /// What every run webhook is told of a sweep that ended (`state` done or stopped).
    pub fn of_sweep(
        id: uuid::Uuid,
        workflow: &str,
        state: &str,
        reason: Option<&str>,
        winner: Option<&SweepWinner>,
    ) -> Payload {
        let winner = winner.map(|w| serde_json::json!({ "k": w.k, "run": w.run, "value": w.value }));
        let summary = serde_json::json!({ "reason": reason, "winner": winner });
        Payload::now(
            Payload::SWEEP_ENDED,
            serde_json::json!({ "sweep": id, "workflow": workflow }),
            state,
            summary,
        )
    }

    /// The body posted for delivery `id`: this payload with its `delivery_id`.
    pub fn body(&self, id: uuid::Uuid) -> Result<Vec<u8>, serde_json::Error> {
        let mut note = self.clone();
        note.delivery_id = Some(id.to_string());
        serde_json::to_vec(&note)
    }
}
