//! A sweep's end: once every member has ended, the sweep moves to `done` with its winner (the
//! best member by the metric's goal, `model::sweep::winner`) recorded, and the runs waiting for
//! it are settled in the same transaction: met by a winner, failed without one.

use super::MetricSeries;
use crate::engine::service::{Result, Service};
use crate::model::sweep::{SweepRecord, SweepSpec, SweepState, winner};
use uuid::Uuid;

impl Service {
    /// Moves `sweep` (in `from`, every member ended) to `done`, with its winner when it has one
    /// (a stopped sweep records none: its waiting runs failed at its stop). False when the
    /// sweep had moved meanwhile. A daemon is woken when runs waiting for it were settled.
    pub(super) async fn end_sweep(
        &self,
        sweep: &SweepRecord,
        from: SweepState,
        source: &dyn MetricSeries,
    ) -> Result<bool> {
        let (winner, why) = match from {
            SweepState::Stopped => (None, None),
            _ => self.winner_of(sweep, source).await?,
        };
        let settled = self.store.end_sweep(sweep.id, from, winner.as_ref(), why.as_deref()).await?;
        if let Some(winner) = &winner {
            tracing::info!(sweep = %sweep.short_id(), member = winner.k, run = %crate::model::short_id(&winner.run), "sweep done; its winner recorded");
        }
        if settled.is_some_and(|edges| edges > 0) {
            // A run it met is claimable now; one it failed has a notice to post.
            self.wake().await;
        }
        Ok(settled.is_some())
    }

    /// The sweep's winner by its members' series, or why it has none.
    async fn winner_of(
        &self,
        sweep: &SweepRecord,
        source: &dyn MetricSeries,
    ) -> Result<(Option<crate::model::sweep::SweepWinner>, Option<String>)> {
        let metric = match SweepSpec::parse(&sweep.file) {
            Ok(spec) => spec.metric,
            Err(err) => return Ok((None, Some(format!("its file no longer reads: {err}")))),
        };
        let Some(metric) = metric else { return Ok((None, Some("it has no metric".into()))) };
        // Each member's best, summed up where its readings are kept (as the leaderboard's).
        let members = self.store.sweep_members(sweep.id).await?;
        let started: Vec<Uuid> =
            members.iter().filter(|member| member.started()).map(|member| member.run).collect();
        let mut bests = source.members_summaries(sweep.id, &started, &metric.name, metric.goal).await?;
        let values: Vec<(u64, Uuid, Vec<f64>)> = members
            .iter()
            .map(|member| {
                (member.k, member.run, bests.remove(&member.run).map(|s| s.best.value).into_iter().collect())
            })
            .collect();
        Ok(match winner(&metric, &values) {
            Some(winner) => (Some(winner), None),
            None => (None, Some(format!("no member reported {}", metric.name))),
        })
    }
}
