//! Events: the append-only record of what happened to a run or an inference test.

use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Millis, RunState, UnknownState};

/// An append-only record of something that happened to a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Event {
    pub id: i64,
    pub run_id: Uuid,
    pub at: Millis,
    pub kind: EventKind,
    pub from_state: Option<RunState>,
    pub to_state: Option<RunState>,
    pub stage: Option<String>,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// The run moved between states.
    State,
    /// A stage started, came up, exited, was signalled or was lost.
    Stage,
    /// Anything else worth keeping (daemon restarts, repairs).
    Note,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::State => "state",
            EventKind::Stage => "stage",
            EventKind::Note => "note",
        }
    }
}

impl FromStr for EventKind {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "state" => Ok(EventKind::State),
            "stage" => Ok(EventKind::Stage),
            "note" => Ok(EventKind::Note),
            other => Err(UnknownState::new("event", other, ["state", "stage", "note"])),
        }
    }
}

/// An event about to be written.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub kind: EventKind,
    pub stage: Option<String>,
    pub message: String,
}

impl NewEvent {
    pub fn stage(stage: &str, message: impl Into<String>) -> Self {
        NewEvent { kind: EventKind::Stage, stage: Some(stage.to_string()), message: message.into() }
    }

    pub fn note(message: impl Into<String>) -> Self {
        NewEvent { kind: EventKind::Note, stage: None, message: message.into() }
    }
}
