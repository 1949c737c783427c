//! Webhooks from the reconciler: a notification is handed to delivery tasks and forgotten;
//! how each delivery went comes back as an event on the run or test, never as a wait here.
//! Runs a dependency failed never reach a daemon's supervision (they fail inside another run's
//! end, perhaps in a CLI): a task beside the loop finds them in the event log and posts theirs.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::Notify;
use uuid::Uuid;

use super::Reconciler;
use super::health::Health;
use super::held::Turn;
use crate::engine::store::Store;
use crate::model::{InferenceTest, TestState};
use crate::model::{NewEvent, Run, RunState};
use crate::webhooks::{Payload, Webhook, WebhookClient};

/// How far back in the event log a starting daemon looks for dependency failures whose notice
/// nobody took (a `run stop` made while no daemon ran): a bound on the start's read.
const BACKLOG_EVENTS: i64 = 10_000;
/// Dependency failures read per query.
const PAGE: i64 = 200;
/// Event ids below the last look that are read again: on PostgreSQL a transaction that took
/// its ids earlier may commit after a later one (each notice is taken once whatever is re-read).
const OVERLAP_EVENTS: i64 = 1_000;

/// Webhooks told about every run that completes or fails (`LACHESIS_WEBHOOKS`, comma-separated).
pub fn run_webhooks() -> Vec<String> {
    crate::environ::var("LACHESIS_WEBHOOKS")
        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect())
        .unwrap_or_default()
}

/// Hands `note` about `subject` to delivery tasks; each outcome becomes an event of `subject`.
fn deliver(
    webhooks: &WebhookClient,
    store: &Arc<dyn Store>,
    subject: Uuid,
    urls: Vec<String>,
    note: Payload,
) {
    if urls.is_empty() {
        return;
    }
    let hooks = urls.into_iter().map(|url| Webhook { url }).collect();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    webhooks.spawn_send(hooks, note, tx);
    let store = Arc::clone(store);
    tokio::spawn(async move {
        while let Some(report) = rx.recv().await {
            let message = match (&report.error, report.delivered) {
                (_, true) => {
                    format!("webhook {} told of {} (attempt {})", report.url, report.kind, report.attempts)
                }
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

/// What every run webhook is told of a run that completed or failed; None in other states.
fn run_note(run: &Run) -> Option<Payload> {
    let kind = match run.state {
        RunState::Completed => Payload::RUN_COMPLETED,
        RunState::Failed => Payload::RUN_FAILED,
        RunState::Stopping if run.preempted_by().is_some() => Payload::RUN_PREEMPTED,
        _ => return None,
    };
    let summary = match run.preempted_by() {
        Some(by) => {
            serde_json::json!({ "reason": run.reason, "preempted_by": by, "preemptions": run.preemptions })
        }
        None => serde_json::json!({ "reason": run.reason }),
    };
    Some(Payload {
        kind: kind.into(),
        ids: serde_json::json!({ "run": run.id, "workflow": run.workflow, "env": run.env_name }),
        state: run.state.to_string(),
        summary,
        at: chrono::Utc::now().timestamp(),
    })
}

/// The task that posts the failure of every run a dependency failed, woken by the loop when
/// runs may have ended; it writes nothing but its notices' events, so the loop never waits on it.
struct DependencyFailures {
    store: Arc<dyn Store>,
    webhooks: WebhookClient,
    urls: Vec<String>,
    /// Event ids up to this one were looked at (None: not yet, the start's backlog is next).
    after: Option<i64>,
    /// Runs whose notice this task already saw taken, so a re-read costs no transaction.
    seen: HashSet<Uuid>,
}

impl DependencyFailures {
    async fn serve(mut self, wake: Arc<Notify>) {
        loop {
            if let Err(err) = self.look().await {
                tracing::warn!("cannot read the runs a dependency failed: {err}");
            }
            wake.notified().await;
        }
    }

    /// Posts the notices of the dependency failures logged since the last look.
    async fn look(&mut self) -> Result<(), crate::engine::store::StoreError> {
        let upto = self.store.last_event_id().await?;
        let mut after = match self.after {
            Some(after) => (after - OVERLAP_EVENTS).max(0),
            None => (upto - BACKLOG_EVENTS).max(0),
        };
        loop {
            let found = self.store.dependency_failures(after, upto, PAGE).await?;
            for &(event, run) in &found {
                if self.seen.contains(&run) {
                    continue;
                }
                // A notice that cannot be taken now is looked for again from its event.
                let taken = match self.store.take_failure_notice(run).await {
                    Ok(taken) => taken,
                    Err(err) => {
                        self.after = Some(self.after.map_or(event - 1, |a| a.min(event - 1)));
                        return Err(err);
                    }
                };
                if self.seen.len() >= 4 * OVERLAP_EVENTS as usize {
                    self.seen.clear();
                }
                self.seen.insert(run);
                if let Some(note) = taken.as_ref().and_then(run_note) {
                    deliver(&self.webhooks, &self.store, run, self.urls.clone(), note);
                }
            }
            match found.last() {
                Some(&(last, _)) if found.len() as i64 == PAGE => after = last,
                _ => break,
            }
        }
        self.after = Some(upto);
        Ok(())
    }
}

impl Reconciler {
    /// Starts the task posting the failures of runs a dependency failed, when run webhooks are
    /// set; the loop wakes it through the returned handle.
    pub(super) fn spawn_dependency_failures(&self) -> Option<Arc<Notify>> {
        let urls = run_webhooks();
        let webhooks = self.webhooks.clone().filter(|_| !urls.is_empty())?;
        let wake = Arc::new(Notify::new());
        let task = DependencyFailures {
            store: self.store.clone(),
            webhooks,
            urls,
            after: None,
            seen: HashSet::new(),
        };
        tokio::spawn(task.serve(Arc::clone(&wake)));
        Some(wake)
    }

    fn deliver(&self, subject: Uuid, urls: Vec<String>, note: Payload) {
        if let Some(webhooks) = &self.webhooks {
            deliver(webhooks, &self.store, subject, urls, note);
        }
    }

    /// A run reached `completed` or `failed`.
    pub(super) fn post_run_webhooks(&self, run: &Run) {
        if let Some(note) = run_note(run) {
            self.deliver(run.id, run_webhooks(), note);
        }
    }

    /// Tells every run webhook (`LACHESIS_WEBHOOKS`) that the daemon's writes started failing
    /// (`health` as it is now) or land again (`health` as it was, failing). Delivery runs
    /// beside the loop; the store may not take an event, so its outcome goes to the log.
    pub(super) fn post_health_webhook(&self, turn: Turn, health: &Health) {
        let urls = run_webhooks();
        let (Some(webhooks), Some(failing)) = (&self.webhooks, &health.writes_failing) else { return };
        if urls.is_empty() {
            return;
        }
        let (kind, state, summary) = match turn {
            Turn::Unhealthy => (Payload::DAEMON_UNHEALTHY, "unhealthy", serde_json::json!(failing)),
            Turn::Healthy => {
                let failed_for_s = (crate::model::now_millis() - failing.since).max(0) / 1000;
                let summary = serde_json::json!({
                    "failed_since": failing.since,
                    "failed_for_s": failed_for_s,
                    "kind": failing.kind,
                    "error": failing.error,
                });
                (Payload::DAEMON_HEALTHY, "healthy", summary)
            }
            Turn::Same => return,
        };
        let note = Payload {
            kind: kind.into(),
            ids: serde_json::json!({
                "node": self.node.registration.id,
                "store": self.store.backend().as_str(),
            }),
            state: state.into(),
            summary,
            at: chrono::Utc::now().timestamp(),
        };
        let hooks = urls.into_iter().map(|url| Webhook { url }).collect();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        webhooks.spawn_send(hooks, note, tx);
        tokio::spawn(async move {
            while let Some(report) = rx.recv().await {
                match (report.delivered, &report.error) {
                    (true, _) => tracing::info!("webhook {} told of {}", report.url, report.kind),
                    (false, error) => tracing::warn!(
                        "webhook {} not told of {} after {} attempts: {}",
                        report.url,
                        report.kind,
                        report.attempts,
                        error.as_deref().unwrap_or("no answer")
                    ),
                }
            }
        });
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
