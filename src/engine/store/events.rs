//! Writing events: one at a time, or a run's several in as few statements as can carry them.

use uuid::Uuid;

use super::Result;
use crate::model::{EventKind, NewEvent, RunState, now_millis};

const INSERT_EVENT: &str = "INSERT INTO events (run_id, at, kind, from_state, to_state, stage, message) VALUES ($1, $2, $3, $4, $5, $6, $7)";

pub(super) async fn insert_event<'c, E>(
    executor: E,
    run_id: Uuid,
    kind: EventKind,
    states: Option<(RunState, RunState)>,
    stage: Option<&str>,
    message: &str,
) -> Result<()>
where
    E: sqlx::Executor<'c, Database = sqlx::Any>,
{
    sqlx::query(INSERT_EVENT)
        .bind(run_id.to_string())
        .bind(now_millis())
        .bind(kind.as_str())
        .bind(states.map(|s| s.0.as_str()))
        .bind(states.map(|s| s.1.as_str()))
        .bind(stage)
        .bind(message)
        .execute(executor)
        .await?;
    Ok(())
}

/// One event of a batch `insert_events` writes.
pub(super) struct EventRow<'a> {
    pub(super) kind: EventKind,
    pub(super) states: Option<(RunState, RunState)>,
    pub(super) stage: Option<&'a str>,
    pub(super) message: std::borrow::Cow<'a, str>,
}

impl<'a> From<&'a NewEvent> for EventRow<'a> {
    fn from(event: &'a NewEvent) -> Self {
        EventRow {
            kind: event.kind,
            states: None,
            stage: event.stage.as_deref(),
            message: (&event.message).into(),
        }
    }
}

/// `INSERT_EVENTS[n - 1]` writes n events of one run (`$1`) at one time (`$2`).
const INSERT_EVENTS: [&str; 3] = [
    INSERT_EVENT,
    "INSERT INTO events (run_id, at, kind, from_state, to_state, stage, message) VALUES ($1, $2, $3, $4, $5, $6, $7), \
     ($1, $2, $8, $9, $10, $11, $12)",
    "INSERT INTO events (run_id, at, kind, from_state, to_state, stage, message) VALUES ($1, $2, $3, $4, $5, $6, $7), \
     ($1, $2, $8, $9, $10, $11, $12), ($1, $2, $13, $14, $15, $16, $17)",
];

/// Writes a run's events in order, up to three in one statement: on SQLite every statement is a
/// round trip to sqlx's worker thread, and a stage's start or end writes two or three at once.
pub(super) async fn insert_events(
    conn: &mut sqlx::AnyConnection,
    run_id: Uuid,
    rows: &[EventRow<'_>],
) -> Result<()> {
    let at = now_millis();
    for chunk in rows.chunks(INSERT_EVENTS.len()) {
        let mut query = sqlx::query(INSERT_EVENTS[chunk.len() - 1]).bind(run_id.to_string()).bind(at);
        for row in chunk {
            query = query
                .bind(row.kind.as_str())
                .bind(row.states.map(|s| s.0.as_str()))
                .bind(row.states.map(|s| s.1.as_str()))
                .bind(row.stage)
                .bind(&*row.message);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}
