//! What can go wrong talking to W&B, each kind apart: the caller retries the transient ones on
//! its next poll and reports the others as a broken setup.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum WandbError {
    #[error("invalid W&B client settings: {detail}")]
    Config { detail: String },
    #[error("W&B rejected the API key (HTTP {code}); check WANDB_API_KEY")]
    Unauthorized { code: u16 },
    #[error("W&B did not answer within {after:?}")]
    Timeout { after: Duration },
    #[error("cannot reach W&B: {detail}")]
    Unreachable { detail: String },
    #[error("W&B answered with GraphQL errors: {}", messages.join("; "))]
    GraphQl { messages: Vec<String> },
    #[error("cannot decode W&B's answer: {detail}")]
    Decode { detail: String },
    #[error("W&B answered HTTP {code}")]
    Status { code: u16 },
    #[error("W&B names no default entity for this API key; set WANDB_ENTITY")]
    NoEntity,
    #[error("W&B has no run {run} in project {project}")]
    NoRun { project: String, run: String },
}

impl WandbError {
    /// Whether asking again later could give a different answer (the caller then falls back to
    /// the stored snapshot and retries on its next poll rather than reporting a broken setup).
    pub fn is_transient(&self) -> bool {
        match self {
            WandbError::Timeout { .. } | WandbError::Unreachable { .. } => true,
            WandbError::Status { code } => *code >= 500 || *code == 429 || *code == 408,
            _ => false,
        }
    }
}

/// An answer this client cannot read.
pub(super) fn decode(detail: &str) -> WandbError {
    WandbError::Decode { detail: detail.to_string() }
}
