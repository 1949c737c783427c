//! What sweeps look like from outside: found by prefix, listed, and a leaderboard.

use std::collections::BTreeMap;

use serde::Serialize;
use uuid::Uuid;

use super::MetricSeries;
use super::curves::Curve;
use super::ending::{STOP_REQUESTED, SweepEnd};
use crate::engine::service::{Result, Service, ServiceError};
use crate::engine::store::StoreError;
use crate::model::sweep::pbt::ExploitRecord;
use crate::model::sweep::{Goal, Member, MemberOutcome, Method, SweepRecord, SweepSpec, SweepState};
use crate::model::{RunState, StateCounts};

/// The most sweeps a listing shows.
pub const SWEEP_LIST_LIMIT: i64 = 200;

/// A sweep as listings show it: its row (without the file) and its members by state.
#[derive(Clone, Debug, Serialize)]
pub struct SweepSummary {
    pub id: Uuid,
    pub workflow: String,
    pub state: SweepState,
    /// The last reason recorded with a move of the sweep (a target's, a stop's, why no winner).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why it ended; none while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended: Option<SweepEnd>,
    pub members: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_live: Option<u32>,
    /// grid, random, bayes or pbt, as its file says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    pub created_at: crate::model::Millis,
}

impl From<&SweepRecord> for SweepSummary {
    fn from(sweep: &SweepRecord) -> SweepSummary {
        SweepSummary {
            id: sweep.id,
            workflow: sweep.workflow.clone(),
            state: sweep.state,
            reason: sweep.reason.clone(),
            ended: SweepEnd::of(sweep),
            members: sweep.members,
            max_live: sweep.max_live,
            method: sweep.config.get("method").and_then(serde_json::Value::as_str).map(crate::text::one_line),
            created_at: sweep.created_at,
        }
    }
}

/// A sweep with how many of its members are in each run state (the dashboard's list).
#[derive(Clone, Debug, Serialize)]
pub struct SweepListing {
    #[serde(flatten)]
    pub sweep: SweepSummary,
    pub counts: StateCounts<RunState>,
}

/// A sweep's leaderboard: every member with its parameters, state and metric, best first.
#[derive(Clone, Debug, Serialize)]
pub struct SweepStatus {
    #[serde(flatten)]
    pub sweep: SweepSummary,
    /// The metric members are compared by, and its goal (`minimize` or `maximize`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<Goal>,
    /// How many members are in each state.
    pub counts: StateCounts<RunState>,
    /// Best first by the metric's goal; members without a reading after them, by k.
    pub leaderboard: Vec<MemberStatus>,
    /// The best member, once no member is pending or in flight (for a sweep that is `done`,
    /// the one recorded with its end: what the runs waiting for it got).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub winner: Option<u64>,
    /// While members have started and none has reported the metric: which metrics one does
    /// report (a misspelt `metric.name` shows here, not after a night of runs), or that it
    /// writes the metric as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreported: Option<String>,
    /// Each time it was resumed (`sweep resume`), oldest first, with what it re-ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resumes: Vec<crate::engine::store::SweepEvent>,
    /// A pbt sweep's exploits, in the order they were decided: its lineage.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exploits: Vec<ExploitRecord>,
}

/// A sweep's member as the service shows it, the one member view: a leaderboard's row
/// (`sweep status`), the report's best member (`ReportSweep::best`, its best reading the
/// summed-up series' lowest or highest) and a member of the dashboard's chart (with its
/// `curve`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemberStatus {
    pub k: u64,
    pub run: Uuid,
    pub state: RunState,
    /// Its parameters' values, by parameter path.
    pub parameters: BTreeMap<String, serde_json::Value>,
    /// Its best reading so far by the goal, and the step of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_step: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<f64>,
    /// Its readings (hyperband's iterations).
    pub iterations: usize,
    /// Why it ended, for one that did (an early-terminated member says by which band).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub early_terminated: bool,
    /// Its series of the metric, for a chart (`Service::sweep_curves` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub curve: Option<Curve>,
}

impl MemberStatus {
    /// `member` with its values `parameters`, nothing of its readings yet.
    pub fn of(member: &Member, parameters: BTreeMap<String, serde_json::Value>) -> MemberStatus {
        MemberStatus {
            k: member.k,
            run: member.run,
            state: member.state,
            parameters,
            best: None,
            best_step: None,
            last: None,
            iterations: 0,
            reason: member.state.is_terminal().then(|| member.reason.clone()).flatten(),
            early_terminated: member.outcome() == MemberOutcome::EarlyTerminated,
            curve: None,
        }
    }
}

impl Service {
    /// Finds a sweep by its full id or a unique prefix of it.
    pub async fn resolve_sweep(&self, prefix: &str) -> Result<SweepRecord> {
        let by_id = async |id| self.store.sweep(id).await;
        let by_prefix = async |prefix: &str| self.store.sweeps_by_prefix(prefix, 6).await;
        crate::engine::service::resolve_prefix(
            prefix,
            "sweeps",
            by_id,
            by_prefix,
            |s: &SweepRecord| s.id,
            ServiceError::UnknownSweep,
        )
        .await
    }

    /// Sweeps, newest first.
    pub async fn sweeps(&self) -> Result<Vec<SweepSummary>> {
        Ok(self.store.list_sweeps(SWEEP_LIST_LIMIT).await?.iter().map(SweepSummary::from).collect())
    }

    /// Sweeps, newest first, each with its members by state: one grouped read for all of them.
    pub async fn sweeps_with_member_counts(&self) -> Result<Vec<SweepListing>> {
        let sweeps = self.sweeps().await?;
        let ids: Vec<Uuid> = sweeps.iter().map(|s| s.id).collect();
        let mut states = self.store.member_states_of(&ids).await?;
        sweeps
            .into_iter()
            .map(|sweep| {
                let named = states.remove(&sweep.id).unwrap_or_default();
                let counts = StateCounts::from_names(named.into_iter().map(|(state, n)| (state, n as i64)))
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                Ok(SweepListing { counts, sweep })
            })
            .collect()
    }

    /// The leaderboard of the sweep `prefix` names, with the store's metric readings.
    pub async fn sweep_status(&self, prefix: &str) -> Result<SweepStatus> {
        let sweep = self.resolve_sweep(prefix).await?;
        self.sweep_status_with(&sweep, self).await
    }

    /// The leaderboard of `sweep`, with readings from `source`: each member's count, best and
    /// last reading summed up where they are kept, never every reading.
    pub async fn sweep_status_with(
        &self,
        sweep: &SweepRecord,
        source: &dyn MetricSeries,
    ) -> Result<SweepStatus> {
        let spec = SweepSpec::parse(&sweep.file)?;
        let members = self.store.sweep_members(sweep.id).await?;
        let mut counts = StateCounts::default();
        let mut leaderboard = Vec::with_capacity(members.len());
        // A member that never started has no readings: its series is not read.
        let started: Vec<uuid::Uuid> =
            members.iter().filter(|member| member.started()).map(|member| member.run).collect();
        let mut summaries = match &spec.metric {
            Some(metric) if !started.is_empty() => {
                source.members_summaries(sweep.id, &started, &metric.name, metric.goal).await?
            }
            _ => Default::default(),
        };
        let exploits = match spec.method {
            Method::Pbt => self.store.sweep_exploits(sweep.id).await?,
            _ => Vec::new(),
        };
        for member in &members {
            counts.add(member.state, 1);
            let summary = summaries.remove(&member.run);
            // A pbt member's values are its last exploit's.
            let explored = exploits.iter().rfind(|e| e.k == member.k).map(|e| e.values.clone());
            leaderboard.push(MemberStatus {
                best: summary.map(|s| s.best.value),
                best_step: summary.map(|s| s.best.step),
                last: summary.map(|s| s.last.value),
                iterations: summary.map_or(0, |s| s.count),
                ..MemberStatus::of(member, explored.unwrap_or_else(|| member.values(&spec)))
            });
        }
        let unreported = match &spec.metric {
            Some(metric) if leaderboard.iter().all(|m| m.iterations == 0) => {
                self.unreported(&metric.name, &members).await?
            }
            _ => None,
        };
        let goal = spec.metric.as_ref().map(|m| m.goal);
        leaderboard.sort_by(|a, b| ranked(a, b, goal));
        let finished = members.iter().all(|run| run.state.is_terminal());
        // The winner recorded with the sweep's end is the one its waiting runs got.
        let winner = match (sweep.winner, finished) {
            (Some(recorded), _) => Some(recorded.k),
            (None, true) => leaderboard.first().filter(|m| m.best.is_some()).map(|m| m.k),
            (None, false) => None,
        };
        Ok(SweepStatus {
            sweep: SweepSummary::from(sweep),
            metric: spec.metric.as_ref().map(|m| m.name.clone()),
            goal,
            counts,
            leaderboard,
            winner,
            unreported,
            resumes: self
                .store
                .sweep_events(sweep.id)
                .await?
                .into_iter()
                .filter(|event| event.to == SweepState::Live)
                .collect(),
            exploits,
        })
    }

    /// "no member has reported loss yet (member 0 reports train/loss, train/reward_mean)", once
    /// a member has started; "no member has reported loss as a number yet (member 0: loss at
    /// step 4 is not a number ("0.5"))" when its trainer writes it as text.
    async fn unreported(&self, metric: &str, members: &[Member]) -> Result<Option<String>> {
        let Some(member) = members.iter().find(|member| member.started_at.is_some()) else {
            return Ok(None);
        };
        let k = member.k;
        // A member whose trainer writes the metric as text has an event that says so.
        let events = self.store.events(member.run, 0).await?;
        if let Some(said) =
            events.iter().rev().find_map(|e| crate::engine::reconciler::not_a_number_of(&e.message, metric))
        {
            return Ok(Some(format!("no member has reported {metric} as a number yet (member {k}: {said})")));
        }
        let names = self.run_metric_names(member.run).await?;
        let reports = match names.len() {
            0 => "no metric yet".to_string(),
            n if n > 8 => format!("{}, … ({n} metrics)", names[..8].join(", ")),
            _ => names.join(", "),
        };
        Ok(Some(format!("no member has reported {metric} yet (member {k} reports {reports})")))
    }

    /// Stops the sweep `prefix` names: its pending members are cancelled, its started ones
    /// stopped (each through the normal stop, with its event), and the sweep marked stopped so
    /// none of its members starts again; the runs waiting for it fail, in the stop's own
    /// transaction. Stopping twice is not an error.
    pub async fn stop_sweep(&self, prefix: &str) -> Result<SweepSummary> {
        let sweep = self.resolve_sweep(prefix).await?;
        let mut stopped = false;
        for from in [SweepState::Live, SweepState::Target] {
            stopped |=
                self.store.move_sweep(sweep.id, from, SweepState::Stopped, Some(STOP_REQUESTED)).await?;
        }
        if stopped {
            // The runs its stop failed have notices to post, even when no member was left to stop.
            self.wake().await;
        }
        for (_, run) in self.store.sweep_member_runs(sweep.id).await? {
            if run.state.is_terminal() {
                continue;
            }
            match self.stop_run(&run.id.to_string()).await {
                Ok(_) | Err(ServiceError::AlreadyEnded { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        let sweep = self.store.sweep(sweep.id).await?.unwrap_or(sweep);
        Ok(SweepSummary::from(&sweep))
    }
}

/// Best first by the goal; members without a reading after them; ties by k.
fn ranked(a: &MemberStatus, b: &MemberStatus, goal: Option<Goal>) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let by_value = match (a.best, b.best) {
        (Some(x), Some(y)) => match goal {
            Some(Goal::Maximize) => y.partial_cmp(&x).unwrap_or(Ordering::Equal),
            _ => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        },
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    by_value.then(a.k.cmp(&b.k))
}
