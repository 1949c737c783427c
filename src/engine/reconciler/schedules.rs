//! Schedules in the reconciler: when a schedule is due, enqueue its test — one catch-up test
//! for any number of due times missed while the daemon was down, and a recorded skip while a
//! test of the same schedule still runs (`crate::cron::tick` decides, `core::schedules` says it).

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};
use tracing::{info, warn};

use super::{Reconciler, Result, core};
use crate::cron::{Cron, Tick, tick};
use crate::inference::regression::{baselines, regressions_of};
use crate::model::{InferenceTest, TestState};
use crate::model::{NewEvent, now_millis};

fn utc(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_else(Utc::now)
}

impl Reconciler {
    /// Handles every due schedule; returns when the next one is due.
    pub(super) async fn tick_schedules(&mut self) -> Result<Option<DateTime<Utc>>> {
        let now = utc(now_millis());
        let mut next_due: Option<DateTime<Utc>> = None;
        for mut schedule in self.store.schedules().await? {
            if schedule.paused {
                continue;
            }
            let cron = match Cron::parse(&schedule.cron, schedule.tz.as_deref()) {
                Ok(cron) => cron,
                Err(err) => {
                    warn!(schedule = %schedule.name, "unusable schedule: {err}");
                    continue;
                }
            };
            let newest = self.store.schedule_tests(schedule.id, 1).await?;
            let running = newest.first().is_some_and(|j| !j.state.is_terminal());
            let outcome = tick(&cron, utc(schedule.last_fired), now, running);
            let fired_at = now.timestamp_millis();
            let note = match outcome {
                Tick::Idle { .. } => None,
                Tick::Fire { .. } => {
                    let test = InferenceTest::queued(
                        uuid::Uuid::new_v4(),
                        schedule.spec.clone(),
                        Some(schedule.id),
                        &self.config.tests_dir,
                    );
                    let tasks = test.pending_tasks();
                    if !self.store.fire_schedule(&schedule, fired_at, Some((&test, &tasks))).await? {
                        continue; // another daemon fired it
                    }
                    info!(schedule = %schedule.name, test = %crate::model::short_id(&test.id), "schedule fired");
                    core::schedules::note(&outcome, test.id)
                }
                Tick::Skip { .. } => {
                    if !self.store.fire_schedule(&schedule, fired_at, None).await? {
                        continue;
                    }
                    // A skip enqueues no test: its words name none.
                    core::schedules::note(&outcome, uuid::Uuid::nil())
                }
            };
            if let Some(note) = note {
                schedule.last_fired = fired_at;
                self.store.add_event(schedule.id, &NewEvent::note(note)).await?;
            }
            next_due = core::schedules::earliest(next_due, outcome.next());
        }
        Ok(next_due)
    }

    /// For a scheduled test that succeeded: the models whose accuracy fell below the baseline
    /// (median of the schedule's last 5 succeeded tests), as `(reason, regressions JSON)`.
    pub(super) async fn check_regression(
        &self,
        test: &InferenceTest,
        results: &serde_json::Value,
    ) -> Result<Option<(String, serde_json::Value)>> {
        let Some(schedule_id) = test.schedule_id else { return Ok(None) };
        let policy = self
            .store
            .schedules()
            .await?
            .into_iter()
            .find(|s| s.id == schedule_id)
            .map(|s| s.policy)
            .unwrap_or_default();
        let accuracies = |results: &serde_json::Value| -> BTreeMap<String, Option<f64>> {
            results["models"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| {
                    let ok = m["error"].is_null() && m["steps_tested"].as_u64().unwrap_or(0) > 0;
                    // A verifiers test is judged by its mean reward, an Atropos one by its accuracy.
                    let score = m["reward"].as_f64().or_else(|| m["accuracy"].as_f64());
                    Some((m["model"].as_str()?.to_string(), if ok { score } else { None }))
                })
                .collect()
        };
        let history: Vec<BTreeMap<String, f64>> = self
            .store
            .schedule_tests(schedule_id, 20)
            .await?
            .iter()
            .filter(|j| j.id != test.id && j.state == TestState::Succeeded)
            .filter_map(|j| j.results.as_ref())
            .map(|r| accuracies(r).into_iter().filter_map(|(m, a)| Some((m, a?))).collect())
            .collect();
        let figure = match test.spec.env_kind {
            crate::model::EnvKind::Atropos => "accuracy",
            crate::model::EnvKind::Verifiers => "reward",
        };
        let found = regressions_of(figure, &policy, &baselines(&history), &accuracies(results));
        if found.is_empty() {
            return Ok(None);
        }
        let reason = found.iter().map(|r| format!("{} {}", r.model, r.reason)).collect::<Vec<_>>().join("; ");
        Ok(Some((format!("regressed: {reason}"), serde_json::to_value(&found).unwrap_or_default())))
    }
}
