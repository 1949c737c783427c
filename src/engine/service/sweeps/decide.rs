//! The daemon's sweep decisions: which running members hyperband stops, whether a member
//! reached the metric's target (no new members then), a bayes sweep's next members
//! (`suggest`), and which sweeps have ended. Each
//! decision is one store write (a run's move with its reason and event; a sweep's compare-and-
//! set), made only from the state it was decided on: a restarted daemon, or a second node on the
//! same PostgreSQL store, finds a stopped member `stopping` or `stopped` and a sweep at its
//! target already moved, and decides neither again.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use uuid::Uuid;

use super::MetricSeries;
use crate::engine::service::{Result, Service};
use crate::engine::store::StoreError;
use crate::model::sweep::{
    Metric, Series, SweepRecord, SweepSpec, SweepState, early_terminated_by, python_float, stop_runs,
};
use crate::model::{MetricPoint, Millis, Run, RunState, RunTrigger, now_millis};

/// What a pass decided.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum SweepDecision {
    /// A running member stopped by hyperband.
    Stopped { sweep: Uuid, k: u64, run: Uuid, reason: String },
    /// A member reached the target: the sweep's pending members were cancelled.
    Target { sweep: Uuid, k: u64, cancelled: usize },
    /// Every member has ended.
    Done { sweep: Uuid },
    /// A bayes sweep's member k was suggested and queued as run `run`.
    Suggested { sweep: Uuid, k: u64, run: Uuid },
    /// A pbt sweep's member k is stopped to continue from member `donor`'s checkpoint.
    Exploited { sweep: Uuid, k: u64, donor: u64, interval: i64 },
    /// A pbt sweep's member k (run `run`) is queued again from its donor's checkpoint.
    Continued { sweep: Uuid, k: u64, run: Uuid },
}

/// How often (in passes) the sweeps with no member in flight are looked at for their end.
const DONE_CHECK_EVERY: u64 = 10;

/// The decider's memory between passes: what it looked at last, so a pass reads only what is
/// new. Losing it (a restart) costs one full pass, never a decision.
#[derive(Debug, Default)]
pub struct SweepDecider {
    /// When the last pass began: readings recorded since are new.
    since: Option<Millis>,
    /// The sweeps with members in flight at the last pass.
    in_flight: BTreeSet<Uuid>,
    passes: u64,
}

impl SweepDecider {
    /// The decisions about `sweeps` (those whose members' readings just landed), made now from
    /// what the store holds: the pass that follows news of readings. It leaves the ticks'
    /// memory alone, so the next `pass` still looks at every sweep with readings since its last.
    pub async fn decide_on(
        &mut self,
        service: &Service,
        source: &dyn MetricSeries,
        sweeps: &BTreeSet<Uuid>,
    ) -> Result<Vec<SweepDecision>> {
        let mut decisions = Vec::new();
        for sweep_id in sweeps {
            let Some(sweep) = service.store.sweep(*sweep_id).await? else { continue };
            if matches!(sweep.state, SweepState::Live | SweepState::Target) {
                decisions.extend(service.decide_sweep(&sweep, source).await?);
                decisions.extend(service.exploit_members(&sweep, source).await?);
            }
        }
        if !decisions.is_empty() {
            service.wake().await;
        }
        Ok(decisions)
    }

    /// One pass over the sweeps with members in flight (those whose members have new readings,
    /// after the first pass) and those whose last members just ended, then the end of sweeps
    /// that may have ended.
    pub async fn pass(&mut self, service: &Service, source: &dyn MetricSeries) -> Result<Vec<SweepDecision>> {
        let started = now_millis();
        // A resume cut short (its process killed after its move) has its re-runs made here.
        service.rerun_marked(None).await?;
        let in_flight: BTreeMap<Uuid, u32> = service.store.sweeps_in_flight().await?;
        let fresh: Option<BTreeSet<Uuid>> = match self.since {
            // A reading recorded in the same millisecond as the last pass is read again: harmless.
            Some(since) => match source.runs_with_readings_since(since.saturating_sub(1)).await? {
                Some(runs) => Some(service.store.sweeps_of_runs(&runs).await?),
                None => None,
            },
            None => None,
        };
        // A sweep whose last members just ended gets one more look: a last reading of theirs may
        // reach the target before a pending member is claimed.
        let left: BTreeSet<Uuid> =
            self.in_flight.iter().filter(|id| !in_flight.contains_key(id)).copied().collect();
        let mut decisions = Vec::new();
        for sweep_id in in_flight.keys().chain(&left) {
            if !left.contains(sweep_id) && fresh.as_ref().is_some_and(|fresh| !fresh.contains(sweep_id)) {
                continue;
            }
            let Some(sweep) = service.store.sweep(*sweep_id).await? else { continue };
            decisions.extend(service.decide_sweep(&sweep, source).await?);
        }
        // Bayes sweeps with a slot open get their next members (one read of the live sweeps;
        // only a bayes sweep, which keeps a member setup, is looked at further).
        for sweep in service.store.sweeps_in_state(SweepState::Live).await? {
            // A pbt sweep's exploits: decided as readings land, applied as losers stop.
            match service.exploit_members(&sweep, source).await {
                Ok(made) => decisions.extend(made),
                Err(err) => tracing::warn!(sweep = %sweep.short_id(), "cannot exploit its members: {err}"),
            }
            if sweep.member_setup.is_none() {
                continue;
            }
            match service.suggest_members(&sweep, source).await {
                Ok(made) => decisions.extend(made),
                // One sweep's trouble (its workflow gone, say) holds up no other sweep.
                Err(err) => {
                    tracing::warn!(sweep = %sweep.short_id(), "cannot suggest its next member: {err}")
                }
            }
        }
        if self.passes.is_multiple_of(DONE_CHECK_EVERY) || !left.is_empty() {
            for state in [SweepState::Live, SweepState::Target, SweepState::Stopped] {
                for sweep in service.store.sweeps_in_state(state).await? {
                    if in_flight.contains_key(&sweep.id)
                        || service.store.sweep_has_open_member(sweep.id).await?
                        || (state == SweepState::Live && service.exploit_owed(&sweep).await?)
                    {
                        continue;
                    }
                    // A live bayes sweep short of its members is not over: the next pass
                    // suggests them.
                    if state == SweepState::Live
                        && sweep.member_setup.is_some()
                        && service
                            .store
                            .sweep_members(sweep.id)
                            .await?
                            .iter()
                            .map(|m| m.k + 1)
                            .max()
                            .unwrap_or(0)
                            < sweep.members
                    {
                        continue;
                    }
                    if service.end_sweep(&sweep, state, source).await? {
                        decisions.push(SweepDecision::Done { sweep: sweep.id });
                    }
                }
            }
        }
        self.in_flight = in_flight.into_keys().collect();
        self.since = Some(started);
        self.passes += 1;
        if decisions.iter().any(|d| !matches!(d, SweepDecision::Done { .. })) {
            service.wake().await;
        }
        Ok(decisions)
    }
}

/// A member's iterations: the values of its series (one per step, a resumed attempt's over the
/// steps it rewound), those that are not finite left out as W&B leaves them out.
fn iterations(series: &[MetricPoint]) -> Vec<f64> {
    series.iter().map(|point| point.value).filter(|value| value.is_finite()).collect()
}

impl Service {
    /// The decisions about one sweep, made now: its target, then hyperband's stops.
    pub(super) async fn decide_sweep(
        &self,
        sweep: &SweepRecord,
        source: &dyn MetricSeries,
    ) -> Result<Vec<SweepDecision>> {
        let spec = match SweepSpec::parse(&sweep.file) {
            Ok(spec) => spec,
            Err(err) => {
                tracing::warn!(sweep = %sweep.short_id(), "cannot read the sweep's file again: {err}");
                return Ok(Vec::new());
            }
        };
        let Some(metric) = &spec.metric else { return Ok(Vec::new()) };
        let members = self.store.sweep_member_runs(sweep.id).await?;
        // A member that never started has no readings: its series is not read.
        let started: Vec<Uuid> = members
            .iter()
            .filter(|(_, run)| run.started_at.is_some() || run.attempt > 1)
            .map(|(_, run)| run.id)
            .collect();
        let mut series = source.members_series(sweep.id, &started, &metric.name).await?;
        let values: Vec<Vec<f64>> =
            members.iter().map(|(_, run)| iterations(&series.remove(&run.id).unwrap_or_default())).collect();
        let mut decisions = Vec::new();
        if sweep.state == SweepState::Live
            && let Some(decision) = self.reach_target(sweep, metric, &members, &values).await?
        {
            decisions.push(decision);
        }
        let Some(hyperband) = &spec.early_terminate else { return Ok(decisions) };
        let series: Vec<Series<usize>> = members
            .iter()
            .zip(&values)
            .enumerate()
            .map(|(place, ((_, run), values))| Series {
                id: place,
                running: run.state == RunState::Running,
                values,
            })
            .collect();
        for stop in stop_runs(&series, metric, hyperband) {
            let (k, run) = &members[stop.id];
            let reason = format!("{}: {}", early_terminated_by(&sweep.id), stop.reason(&metric.name));
            match self.store.early_terminate(run, &reason).await {
                Ok(_) => {
                    tracing::info!(sweep = %sweep.short_id(), member = k, run = %run.short_id(), "{reason}");
                    decisions.push(SweepDecision::Stopped { sweep: sweep.id, k: *k, run: run.id, reason });
                }
                // It moved since it was read (it ended, or another node stopped it): the next
                // pass decides on what is there then.
                Err(StoreError::Conflict { .. }) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(decisions)
    }

    /// Once a member's reading reaches the target: the sweep moves to `target` (once: a
    /// compare-and-set) and its pending members are cancelled, saying why.
    async fn reach_target(
        &self,
        sweep: &SweepRecord,
        metric: &Metric,
        members: &[(u64, Run)],
        values: &[Vec<f64>],
    ) -> Result<Option<SweepDecision>> {
        let reached = members.iter().zip(values).find_map(|((k, _), values)| {
            values.iter().find(|v| metric.reaches_target(**v)).map(|v| (*k, *v))
        });
        let (Some((k, value)), Some(target)) = (reached, metric.target) else { return Ok(None) };
        let why = format!(
            "member {k} reached the target: {} {} (target {})",
            metric.name,
            python_float(value),
            python_float(target)
        );
        if !self.store.move_sweep(sweep.id, SweepState::Live, SweepState::Target, Some(&why)).await? {
            return Ok(None);
        }
        let reason = format!("cancelled: sweep {} {why}", sweep.short_id());
        let mut cancelled = 0;
        for (_, run) in members.iter().filter(|(_, run)| run.state == RunState::Pending) {
            match self.store.transition(run, RunTrigger::Cancel, Some(&reason), None).await {
                Ok(_) => cancelled += 1,
                Err(StoreError::Conflict { .. }) => {}
                Err(err) => return Err(err.into()),
            }
        }
        tracing::info!(sweep = %sweep.short_id(), cancelled, "{why}");
        Ok(Some(SweepDecision::Target { sweep: sweep.id, k, cancelled }))
    }
}
