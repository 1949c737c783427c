//! Rows to model values and back: runs, stages, events and the process record stages and tasks
//! share, with the JSON and exit-status columns they are stored in.

use std::path::PathBuf;

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Result, StoreError};
use uuid::Uuid;

use crate::model::{Event, Exit, ProcessIdentity, ProcessRecord, Run, RunState, Stage};

pub(super) fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

pub(super) fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("store values serialize")
}

pub(super) fn from_json<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| corrupt(format!("{what}: {e}")))
}

pub(super) fn run_from_row(row: &AnyRow) -> Result<Run> {
    let id: String = row.try_get("id")?;
    let state: String = row.try_get("state")?;
    let spec: String = row.try_get("spec")?;
    let params: String = row.try_get("params")?;
    Ok(Run {
        id: Uuid::parse_str(&id).map_err(|e| corrupt(format!("run id {id}: {e}")))?,
        workflow: row.try_get("workflow")?,
        env_name: row.try_get("env_name")?,
        state: state.parse().map_err(corrupt)?,
        version: row.try_get("version")?,
        priority: row.try_get("priority")?,
        attempt: row.try_get("attempt")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        reason: row.try_get("reason")?,
        run_dir: PathBuf::from(row.try_get::<String, _>("run_dir")?),
        spec: from_json(&spec, "workflow snapshot")?,
        params: from_json(&params, "run params")?,
        node: row.try_get("node")?,
        fence: row.try_get("fence")?,
        not_before: row.try_get("not_before")?,
        held_at: row.try_get("held_at")?,
        deps_open: row.try_get("deps_open")?,
        preemptions: row.try_get("preemptions")?,
        preempted_work: row.try_get("preempted_work_ms")?,
    })
}

/// A process identity stored as JSON in `column`.
fn identity(row: &AnyRow, column: &str) -> Result<Option<ProcessIdentity>> {
    row.try_get::<Option<String>, _>(column)?.map(|text| from_json(&text, column)).transpose()
}

/// An exit status stored as `exit_code` or `exit_signal`.
fn exit_from_row(row: &AnyRow) -> Result<Option<Exit>> {
    Ok(match (row.try_get::<Option<i64>, _>("exit_code")?, row.try_get::<Option<i64>, _>("exit_signal")?) {
        (Some(code), _) => Some(Exit::Code(code as i32)),
        (None, Some(signal)) => Some(Exit::Signal(signal as i32)),
        (None, None) => None,
    })
}

/// The `(exit_code, exit_signal)` columns of an exit status.
pub(super) fn exit_columns(exit: Option<Exit>) -> (Option<i64>, Option<i64>) {
    match exit {
        Some(Exit::Code(code)) => (Some(code as i64), None),
        Some(Exit::Signal(signal)) => (None, Some(signal as i64)),
        None => (None, None),
    }
}

/// The process-record columns a stage row and a task row share.
pub(super) fn record_from_row(row: &AnyRow) -> Result<ProcessRecord> {
    let state: String = row.try_get("state")?;
    Ok(ProcessRecord {
        state: state.parse().map_err(corrupt)?,
        shim: identity(row, "shim")?,
        process: identity(row, "process")?,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        exit: exit_from_row(row)?,
    })
}

pub(super) fn stage_from_row(row: &AnyRow) -> Result<Stage> {
    let run_id: String = row.try_get("run_id")?;
    Ok(Stage {
        run_id: Uuid::parse_str(&run_id).map_err(corrupt)?,
        idx: row.try_get("idx")?,
        name: row.try_get("name")?,
        record: record_from_row(row)?,
        ready_at: row.try_get("ready_at")?,
        log_path: PathBuf::from(row.try_get::<String, _>("log_path")?),
        slurm_job: row.try_get::<Option<i64>, _>("slurm_job")?.map(|job| job as u64),
    })
}

pub(super) fn event_from_row(row: &AnyRow) -> Result<Event> {
    let run_id: String = row.try_get("run_id")?;
    let kind: String = row.try_get("kind")?;
    let state = |column: &str| -> Result<Option<RunState>> {
        row.try_get::<Option<String>, _>(column)?.map(|s| s.parse().map_err(corrupt)).transpose()
    };
    Ok(Event {
        id: row.try_get("id")?,
        run_id: Uuid::parse_str(&run_id).map_err(corrupt)?,
        at: row.try_get("at")?,
        kind: kind.parse().map_err(corrupt)?,
        from_state: state("from_state")?,
        to_state: state("to_state")?,
        stage: row.try_get("stage")?,
        message: row.try_get("message")?,
    })
}
