//! How a run moves: the next state computed from the transition table, then written only if
//! the run is still in the state, version and fence it was read at, with its state event.

use uuid::Uuid;

use super::events::{EventRow, insert_events};
use super::outbox::insert_notification;
use super::rows::json;
use super::sql::SqlStore;
use super::{Result, Store};
use crate::model::run::{self as transitions, RunTrigger};
use crate::model::{EventKind, Millis, Run, RunParams, RunState, now_millis};
use crate::webhooks::Payload;

/// Marks a run's live-looking stages lost: their node is gone and nobody can watch them.
pub(super) async fn lose_live_stages(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    run: Uuid,
    now: Millis,
) -> Result<()> {
    sqlx::query(concat!(
        "UPDATE stages SET state = 'lost', ended_at = $1 WHERE run_id = $2 AND state IN (",
        live_process_states!(),
        ")"
    ))
    .bind(now)
    .bind(run.to_string())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A run's row after a move, computed before the write: what `move_run` writes and returns.
pub(super) struct Moved {
    pub(super) run: Run,
    pub(super) trigger: RunTrigger,
    pub(super) from: RunState,
}

impl Moved {
    /// `run` moved by `event` to `to` (not `pending`: that is a requeue), at `now`.
    pub(super) fn new(
        run: &Run,
        trigger: RunTrigger,
        to: RunState,
        reason: Option<&str>,
        params: Option<&RunParams>,
        ends_at: Option<Millis>,
    ) -> Moved {
        let now = now_millis();
        let started_at = if to == RunState::Starting { Some(now) } else { run.started_at };
        let ended_at = if to.is_terminal() { Some(ends_at.unwrap_or(now)) } else { run.ended_at };
        Moved {
            run: Run {
                state: to,
                version: run.version + 1,
                updated_at: now,
                started_at,
                ended_at,
                reason: reason.map(str::to_string).or_else(|| run.reason.clone()),
                params: params.unwrap_or(&run.params).clone(),
                // A lost node's claim ends here: nothing it writes later may land.
                fence: if trigger == RunTrigger::NodeLost { None } else { run.fence },
                ..run.clone()
            },
            trigger,
            from: run.state,
        }
    }
}

impl SqlStore {
    /// `transition`, with a terminal state's `ended_at` given (an exit's time) rather than now.
    pub(super) async fn transition_ending_at(
        &self,
        run: &Run,
        trigger: RunTrigger,
        reason: Option<&str>,
        params: Option<&RunParams>,
        ends_at: Option<Millis>,
    ) -> Result<Run> {
        let to = transitions::next(run.state, trigger)?;
        if to == RunState::Pending {
            return self.requeue(run, trigger, reason.unwrap_or(trigger.as_str()), now_millis()).await;
        }
        let moved = Moved::new(run, trigger, to, reason, params, ends_at);
        let mut tx = self.pool().begin().await?;
        let Some(event) = self.move_run(&mut tx, run, &moved).await? else {
            // Given up first: on SQLite the transaction holds the one connection.
            drop(tx);
            return Err(self.conflict_or_fenced(run).await);
        };
        insert_events(&mut tx, run.id, &[event]).await?;
        tx.commit().await?;
        Ok(moved.run)
    }

    /// Writes `moved` over `run` in `tx` if the run is still in the state and version it was
    /// read at (and holds this store's fence), and returns its state event for the caller to
    /// write with the others of the transaction. None if it was not.
    pub(super) async fn move_run(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        run: &Run,
        moved: &Moved,
    ) -> Result<Option<EventRow<'static>>> {
        let next = &moved.run;
        // The update comes first, so SQLite takes its write lock before reading anything. A hold
        // belongs to a pending run: it goes when the run leaves the queue.
        let updated = sqlx::query(
            "UPDATE runs SET state = $1, version = version + 1, updated_at = $2, started_at = $3, ended_at = $4, \
             reason = $5, params = $6, fence = CASE WHEN $7 = 1 THEN NULL ELSE fence END, \
             held_at = CASE WHEN $1 = 'pending' THEN held_at ELSE NULL END WHERE id = $8 AND state = $9 AND version = $10 \
             AND (CAST($11 AS BIGINT) IS NULL OR fence = $11)",
        )
        .bind(next.state.as_str())
        .bind(next.updated_at)
        .bind(next.started_at)
        .bind(next.ended_at)
        .bind(next.reason.as_deref())
        .bind(json(&next.params))
        .bind(i64::from(moved.trigger == RunTrigger::NodeLost))
        .bind(run.id.to_string())
        .bind(run.state.as_str())
        .bind(run.version)
        .bind(self.fence())
        .execute(&mut **tx)
        .await?;
        if updated.rows_affected() == 0 {
            return Ok(None);
        }
        if moved.trigger == RunTrigger::NodeLost {
            lose_live_stages(tx, run.id, next.updated_at).await?;
        }
        if next.state.is_terminal() {
            // The runs waiting for this one learn its end in the same commit.
            super::dependencies::settle_dependents(tx, self.backend(), run.id, next.state).await?;
        }
        // Its webhooks learn it from the same commit: a crash after it delays the post, never loses it.
        if let Some(note) = Payload::of_run(next) {
            insert_notification(tx, &run.id.to_string(), &note, None).await?;
        }
        let to = next.state;
        let message = match &next.reason {
            Some(reason) if to != RunState::Starting && to != RunState::Running => {
                format!("{}: {reason}", moved.trigger)
            }
            _ => moved.trigger.to_string(),
        };
        Ok(Some(EventRow {
            kind: EventKind::State,
            states: Some((moved.from, to)),
            stage: None,
            message: message.into(),
        }))
    }
}
