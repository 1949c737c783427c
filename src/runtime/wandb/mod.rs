//! Weights & Biases: the client that reads a run's summary and history (`client.rs`, over
//! `graphql.rs`; a run as it reads one in `run_ref.rs`, what can go wrong in `error.rs`), and what
//! lachesis keeps of them (`snapshot.rs`).

mod client;
mod error;
#[cfg(test)]
mod fake_server;
mod graphql;
mod run_ref;
mod snapshot;

pub use client::{DEFAULT_BASE, WandbClient};
pub use error::WandbError;
pub use run_ref::{RunRef, run_url};
pub use snapshot::{HISTORY_KEYS, MAX_NAMED_KEYS, MAX_OTHER_KEYS, Snapshot, age_text, snapshot_from};
