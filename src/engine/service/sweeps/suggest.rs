//! A bayes sweep's members, suggested as slots open: while fewer than `max_live` of its members
//! are open (pending or in flight) and fewer than `run_cap` exist, the next member k is
//! `bayes::suggest` of what the members before it showed, planned as `submit` plans a run, and
//! written with its suggestion, its run and its stages in one transaction whose (sweep, k) key
//! makes it once: a retried pass, a restarted daemon or a second node's decider writes nothing
//! more, and a daemon killed before the commit left nothing to lose.
//!
//! The value a member counts with is its best reading of the metric (W&B's `metric_extremum`
//! of the run's history and summary): a member hyperband stopped counts with the best it
//! reached. A sweep whose members all ended without a numeric reading of the metric ends there
//! (done, without a winner, saying so): a model of nothing would only draw at random.

use serde_json::Value;
use uuid::Uuid;

use super::MetricSeries;
use super::decide::SweepDecision;
use super::submit::{MemberPlanner, MemberSetup};
use crate::engine::service::{Result, Service, ServiceError};
use crate::model::sweep::bayes::{self, Observed, Seen};
use crate::model::sweep::{BAYES_MAX_LIVE, Method, SweepRecord, SweepSpec, SweepState};
use crate::model::{RunState, now_millis};

impl Service {
    /// Writes the members the live bayes sweep `sweep` is owed now, or ends it when its members
    /// all ended without a numeric reading. Nothing for another sweep.
    pub(super) async fn suggest_members(
        &self,
        sweep: &SweepRecord,
        source: &dyn MetricSeries,
    ) -> Result<Vec<SweepDecision>> {
        if sweep.state != SweepState::Live {
            return Ok(Vec::new());
        }
        let Ok(spec) = SweepSpec::parse(&sweep.file) else { return Ok(Vec::new()) };
        let (Method::Bayes, Some(metric)) = (spec.method, &spec.metric) else { return Ok(Vec::new()) };
        let members = self.store.sweep_members(sweep.id).await?;
        // The next k follows the last one (a member retention forgot leaves a gap, not a k).
        let made = members.iter().map(|m| m.k + 1).max().unwrap_or(0);
        // A member a resume marked to run again is in flight already, though its run still
        // reads ended until its requeue lands (a pass between the two must not fill its slot).
        let open = members.iter().filter(|m| !m.state.is_terminal() || m.rerun_marked).count() as u64;
        let max_live = u64::from(sweep.max_live.unwrap_or(BAYES_MAX_LIVE));
        let owed = max_live.saturating_sub(open).min(spec.members().saturating_sub(made));
        if owed == 0 {
            return Ok(Vec::new());
        }
        let started: Vec<Uuid> = members.iter().filter(|m| m.started()).map(|m| m.run).collect();
        let mut series = source.members_series(sweep.id, &started, &metric.name).await?;
        let mut observed: Vec<Observed> = members
            .iter()
            .map(|member| {
                let readings: Vec<f64> = series
                    .remove(&member.run)
                    .unwrap_or_default()
                    .iter()
                    .map(|point| point.value)
                    .filter(|v| v.is_finite())
                    .collect();
                let seen = if member.state.is_terminal() {
                    let worst = match metric.goal {
                        crate::model::sweep::Goal::Minimize => readings.iter().copied().reduce(f64::max),
                        crate::model::sweep::Goal::Maximize => readings.iter().copied().reduce(f64::min),
                    };
                    Seen::Ended {
                        counts: member.state == RunState::Completed || member.early_terminated(),
                        best: metric.best(&readings),
                        worst,
                    }
                } else {
                    Seen::InFlight
                };
                let values = match &member.suggestion {
                    Some(Value::Object(values)) => values.clone().into_iter().collect(),
                    _ => Default::default(),
                };
                Observed { values, seen }
            })
            .collect();
        let silent = observed.iter().all(|o| matches!(o.seen, Seen::Ended { best: None, worst: None, .. }));
        if made > 0 && open == 0 && silent {
            let why = format!(
                "no member reported a numeric {}: every one of its {made} members ended without one, so there is nothing to fit",
                crate::text::one_line(&metric.name)
            );
            let ended = self.store.end_sweep(sweep.id, SweepState::Live, None, Some(&why)).await?;
            tracing::warn!(sweep = %sweep.short_id(), "{why}");
            if ended.is_some_and(|edges| edges > 0) {
                self.wake().await;
            }
            return Ok(ended.map(|_| SweepDecision::Done { sweep: sweep.id }).into_iter().collect());
        }
        let setup: MemberSetup = match &sweep.member_setup {
            Some(setup) => serde_json::from_value(setup.clone()).map_err(|err| {
                ServiceError::Sweep(format!("sweep {}: its member setup: {err}", sweep.short_id()))
            })?,
            None => MemberSetup::default(),
        };
        let mut planner = MemberPlanner::new(self, &spec, sweep.id, &setup)?;
        let mut decisions = Vec::new();
        for k in made..made + owed {
            let started = now_millis();
            let member = bayes::suggest(&spec, &observed, k);
            let values = member.values();
            let suggestion = Value::Object(values.clone().into_iter().collect());
            let (run, stages) = planner.plan(member).await?;
            crate::failpoint::Failpoint::SweepSuggested.hit();
            if !self.store.add_member(sweep.id, k, &suggestion, &run, &stages).await? {
                // Made already (another pass, another node), or the sweep moved: the next pass
                // looks again at what is there.
                break;
            }
            tracing::info!(
                sweep = %sweep.short_id(),
                member = k,
                run = %run.short_id(),
                ms = now_millis() - started,
                "suggested {}",
                crate::text::one_line(&suggestion.to_string())
            );
            observed.push(Observed { values, seen: Seen::InFlight });
            decisions.push(SweepDecision::Suggested { sweep: sweep.id, k, run: run.id });
        }
        if !decisions.is_empty() {
            self.wake_queued().await;
        }
        Ok(decisions)
    }
}
