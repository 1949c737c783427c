//! Preemption's writes (issue 33): the decision, which moves the victim to `stopping` naming
//! the run it stops for (and tells that run), and the victim's return to the queue once its
//! stages are gone (or, on a stop request meanwhile, its staying stopped). Each is one
//! transaction, conditional on the version it was read at, so a daemon killed between any two
//! of them finds either the decision whole or nothing of it, and a victim is requeued exactly
//! once.

use async_trait::async_trait;
use uuid::Uuid;

use super::Result;
use super::events::{EventRow, insert_events};
use super::moves::Moved;
use super::rows::json;
use super::sql::SqlStore;
use crate::model::{EventKind, Millis, Run, RunParams, RunState, RunTrigger};

#[async_trait]
pub trait PreemptionStore: Send + Sync {
    /// Moves the running `victim` to `stopping` with `params` (which name the urgent run) and
    /// `reason`, and writes `note` on the urgent run, in one transaction.
    async fn preempt(
        &self,
        victim: &Run,
        params: &RunParams,
        reason: &str,
        urgent: Uuid,
        note: &str,
    ) -> Result<Run>;

    /// Queues a preempted run whose stages are all gone again: its next attempt, not charged to
    /// its retry policy, its preemptions counted and `lost` ms of work added to what they lost;
    /// `params` say what it resumes from, as `note` does.
    async fn requeue_preempted(
        &self,
        run: &Run,
        reason: &str,
        params: &RunParams,
        note: &str,
        lost: Millis,
    ) -> Result<Run>;

    /// A stop request for a run stopping to be queued again (for a preemption, or a pbt
    /// exploit): it ends stopped instead (its params no longer say why it would queue again),
    /// with a note saying so.
    async fn keep_stopped(&self, run: &Run) -> Result<Run>;
}

#[async_trait]
impl PreemptionStore for SqlStore {
    async fn preempt(
        &self,
        victim: &Run,
        params: &RunParams,
        reason: &str,
        urgent: Uuid,
        note: &str,
    ) -> Result<Run> {
        let moved =
            Moved::new(victim, RunTrigger::Stop, RunState::Stopping, Some(reason), Some(params), None);
        let mut tx = self.pool().begin().await?;
        let Some(event) = self.move_run(&mut tx, victim, &moved).await? else {
            // Given up first: on SQLite the transaction holds the one connection.
            drop(tx);
            return Err(self.conflict_or_fenced(victim).await);
        };
        insert_events(&mut tx, victim.id, &[event]).await?;
        let told = EventRow { kind: EventKind::Note, states: None, stage: None, message: note.into() };
        insert_events(&mut tx, urgent, &[told]).await?;
        tx.commit().await?;
        Ok(moved.run)
    }

    async fn requeue_preempted(
        &self,
        run: &Run,
        reason: &str,
        params: &RunParams,
        note: &str,
        lost: Millis,
    ) -> Result<Run> {
        let now = crate::model::now_millis();
        self.requeue_with(run, RunTrigger::Preempted, reason, now, Some((params, note)), Some(lost)).await
    }

    async fn keep_stopped(&self, run: &Run) -> Result<Run> {
        let after = if run.preempted_by().is_some() { "its preemption" } else { "its pbt exploit" };
        let mut params = run.params.clone();
        params.preempted_by = None;
        params.preempted_at = None;
        params.exploit_interval = None;
        let now = crate::model::now_millis();
        let reason = "stop requested";
        let mut tx = self.pool().begin().await?;
        let updated = sqlx::query(
            "UPDATE runs SET version = version + 1, updated_at = $1, reason = $2, params = $3 \
             WHERE id = $4 AND state = 'stopping' AND version = $5 AND (CAST($6 AS BIGINT) IS NULL OR fence = $6)",
        )
        .bind(now)
        .bind(reason)
        .bind(json(&params))
        .bind(run.id.to_string())
        .bind(run.version)
        .bind(self.fence())
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() == 0 {
            drop(tx);
            return Err(self.conflict_or_fenced(run).await);
        }
        let message = format!("stop requested: it ends stopped rather than queued again after {after}");
        let note = EventRow { kind: EventKind::Note, states: None, stage: None, message: message.into() };
        insert_events(&mut tx, run.id, &[note]).await?;
        tx.commit().await?;
        Ok(Run {
            version: run.version + 1,
            updated_at: now,
            reason: Some(reason.into()),
            params,
            ..run.clone()
        })
    }
}
