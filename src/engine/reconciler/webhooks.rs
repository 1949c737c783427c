//! Webhooks from the reconciler: a notification is handed to delivery tasks and forgotten;
//! how each delivery went comes back as an event on the run or test, never as a wait here.

use uuid::Uuid;

use super::Reconciler;
use crate::model::{InferenceTest, TestState};
use crate::model::{NewEvent, Run, RunState};
use crate::webhooks::{Payload, Webhook};

/// Webhooks told about every run that completes or fails (`LACHESIS_WEBHOOKS`, comma-separated).
pub fn run_webhooks() -> Vec<String> {
    crate::environ::var("LACHESIS_WEBHOOKS")
        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect())
        .unwrap_or_default()
}

impl Reconciler {
    fn deliver(&self, subject: Uuid, urls: Vec<String>, note: Payload) {
        let (Some(webhooks), false) = (&self.webhooks, urls.is_empty()) else { return };
        let hooks = urls.into_iter().map(|url| Webhook { url }).collect();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        webhooks.spawn_send(hooks, note, tx);
        let store = self.store.clone();
        tokio::spawn(async move {
            while let Some(report) = rx.recv().await {
                let message = match (&report.error, report.delivered) {
                    (_, true) => format!(
                        "webhook {} told of {} (attempt {})",
                        report.url, report.kind, report.attempts
                    ),
                    (Some(error), false) => format!(
                        "webhook {} not told of {} after {} attempts: {error}",
                        report.url, report.kind, report.attempts
                    ),
                    (None, false) => format!("webhook {} not told of {}", report.url, report.kind),
                };
                let _ = store.add_event(subject, &NewEvent::note(message)).await;
            }
        });
    }

    /// A run reached `completed` or `failed`.
    pub(super) fn post_run_webhooks(&self, run: &Run) {
        let kind = match run.state {
            RunState::Completed => Payload::RUN_COMPLETED,
            RunState::Failed => Payload::RUN_FAILED,
            _ => return,
        };
        let note = Payload {
            kind: kind.into(),
            ids: serde_json::json!({ "run": run.id, "workflow": run.workflow, "env": run.env_name }),
            state: run.state.to_string(),
            summary: serde_json::json!({ "reason": run.reason }),
            at: chrono::Utc::now().timestamp(),
        };
        self.deliver(run.id, run_webhooks(), note);
    }

    /// A scheduled test ended: its schedule's webhooks hear that it finished, and of a regression.
    pub(super) async fn post_test_webhooks(&self, test: &InferenceTest) {
        let Some(schedule_id) = test.schedule_id else { return };
        let Ok(schedules) = self.store.schedules().await else { return };
        let Some(schedule) = schedules.into_iter().find(|s| s.id == schedule_id) else { return };
        let ids = serde_json::json!({ "test": test.id, "schedule": schedule.name, "env": test.env_name });
        let summary = test.results.as_ref().map(|r| r["summary"].clone()).unwrap_or_default();
        let mut kinds = vec![Payload::TEST_FINISHED];
        if test.state == TestState::Regressed {
            kinds.push(Payload::REGRESSION);
        }
        for kind in kinds {
            let note = Payload {
                kind: kind.into(),
                ids: ids.clone(),
                state: test.state.to_string(),
                summary: if kind == Payload::REGRESSION {
                    serde_json::json!({ "reason": test.reason, "regressions": test.results.as_ref().map(|r| r["regressions"].clone()) })
                } else {
                    summary.clone()
                },
                at: chrono::Utc::now().timestamp(),
            };
            self.deliver(test.id, schedule.webhooks.clone(), note);
        }
    }
}
