//! `sweep resume`: a sweep its stop ended goes on. The move back to live, the members it re-runs
//! (the pure `model::sweep::reruns` of what it read) marked and its event are one transaction,
//! committed before anything is queued; then each marked member is queued again as its next
//! attempt (from its last resumable checkpoint), only while its run is at the version the
//! decision read and its mark stands (a stop since clears the marks in its own transaction, so a
//! stop and a re-run never both land), so a process killed between the two is repaired by the daemon's next sweep
//! pass (`rerun_marked`) and no member is queued twice. A grid's or random sweep's members not
//! run yet are among the re-runs (its stop cancelled them); a bayes sweep, live again, gets new
//! members up to its `run_cap` from the decider, as slots open.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::ending::{STOP_REQUESTED, SweepEnd};
use super::views::SweepSummary;
use crate::engine::service::{Result, Service, ServiceError};
use crate::engine::store::StoreError;
use crate::model::sweep::{RerunCause, SweepState, rerun_reason, reruns, retries_left};
use crate::model::{NextAttempt, RunState, Start, next_start};
use crate::workflow::checkpoints::params_for;

impl Service {
    /// Resumes the sweep named by `prefix`: live again, the members its stop ended and those
    /// that failed with attempts left queued again. Refused, saying why, for a sweep that is
    /// live or ended by its target, its run_cap or its members' end.
    pub async fn resume_sweep(&self, prefix: &str) -> Result<SweepSummary> {
        let mut sweep = self.resolve_sweep(prefix).await?;
        // Twice at most: a stopped sweep may end (stopped → done) between the read and the move.
        for _ in 0..2 {
            let from = match (sweep.state, SweepEnd::of(&sweep)) {
                (SweepState::Stopped, _) => SweepState::Stopped,
                (SweepState::Done, Some(SweepEnd::StoppedByUser)) if sweep.winner.is_none() => {
                    SweepState::Done
                }
                (SweepState::Live, _) => {
                    return Err(ServiceError::SweepNotResumable {
                        id: sweep.short_id(),
                        why: "it is live (only a stopped sweep resumes)".into(),
                    });
                }
                (_, end) => {
                    let end = end.map_or_else(|| sweep.state.to_string(), |end| end.to_string());
                    return Err(ServiceError::SweepNotResumable {
                        id: sweep.short_id(),
                        why: format!("it ended by itself ({end}); only a stopped sweep resumes"),
                    });
                }
            };
            // Stopped after it reached its target: its end was its target's, whatever came after.
            if let Some(reached) = self
                .store
                .sweep_events(sweep.id)
                .await?
                .into_iter()
                .find(|event| event.to == SweepState::Target)
            {
                return Err(ServiceError::SweepNotResumable {
                    id: sweep.short_id(),
                    why: format!("it reached its target before its stop ({})", reached.message),
                });
            }
            let members = self.store.sweep_members(sweep.id).await?;
            // Which failed members' runs allow another attempt: their retry policies, in their specs.
            let retrying: BTreeSet<u64> = self
                .store
                .sweep_member_runs(sweep.id)
                .await?
                .iter()
                .filter(|(_, run)| retries_left(run))
                .map(|(k, _)| *k)
                .collect();
            let chosen = reruns(&members, &retrying);
            let ks: Vec<String> = chosen.iter().map(|r| r.k.to_string()).collect();
            let message = match ks.is_empty() {
                true => "resumed: no member to re-run".to_string(),
                false => format!("resumed: members {} re-run", ks.join(", ")),
            };
            if self.store.resume_sweep(sweep.id, from, STOP_REQUESTED, &chosen, &message).await? {
                tracing::info!(sweep = %sweep.short_id(), "{message}");
                crate::failpoint::Failpoint::SweepResumed.hit();
                self.rerun_marked(Some(sweep.id)).await?;
                // A bayes sweep live again gets its next members from the daemon's decider.
                self.wake_queued().await;
                let sweep = self.store.sweep(sweep.id).await?.unwrap_or(sweep);
                return Ok(SweepSummary::from(&sweep));
            }
            sweep = self.resolve_sweep(&sweep.id.to_string()).await?;
        }
        Err(ServiceError::SweepNotResumable {
            id: sweep.short_id(),
            why: format!("it is {} and moving", sweep.state),
        })
    }

    /// Queues again each member a resume marked (of `sweep`, or of every sweep), as its next
    /// attempt, while its run is still at the version the resume read; then drops the mark.
    /// How many were queued.
    pub(super) async fn rerun_marked(&self, sweep: Option<Uuid>) -> Result<usize> {
        let marks = self.store.marked_reruns(sweep).await?;
        let mut states: BTreeMap<Uuid, Option<SweepState>> = BTreeMap::new();
        let mut queued = 0;
        for mark in marks {
            let state = match states.get(&mark.sweep) {
                Some(state) => *state,
                None => {
                    let state = self.store.sweep(mark.sweep).await?.map(|s| s.state);
                    states.insert(mark.sweep, state);
                    state
                }
            };
            let run = self.store.run(mark.run).await?;
            let cause = match run.as_ref().map(|run| (run.state, run.version)) {
                Some((RunState::Stopped, version)) if version == mark.version => Some(RerunCause::SweepStop),
                Some((RunState::Failed, version)) if version == mark.version => Some(RerunCause::RetriesLeft),
                _ => None,
            };
            if let (Some(run), Some(cause), Some(SweepState::Live)) = (run, cause, state) {
                let checkpoints = self.run_checkpoints_of(run.id).await?;
                let start = next_start(NextAttempt::Resume { from: None }, &checkpoints)
                    .unwrap_or(Start::Scratch("no checkpoint yet"));
                let params = params_for(&run.params, &start);
                let note = start.describe(run.attempt + 1);
                let reason = rerun_reason(cause, &mark.sweep);
                match self.store.requeue_rerun(&run, &reason, &params, &note).await {
                    Ok(_) => {
                        queued += 1;
                        continue;
                    }
                    // It moved since it was read, or a stop took its mark meanwhile: its re-run
                    // was made, or is no longer owed.
                    Err(StoreError::Conflict { .. }) => {}
                    Err(err) => return Err(err.into()),
                }
            }
            self.store.clear_rerun(mark.run, mark.version).await?;
        }
        if queued > 0 {
            self.wake_queued().await;
        }
        Ok(queued)
    }
}
