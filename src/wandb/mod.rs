//! Weights & Biases: the client that reads a run's summary and history (`client.rs`), and what
//! lachesis keeps of them (`snapshot.rs`).

mod client;
mod snapshot;

pub use client::{DEFAULT_BASE, RunRef, WandbClient, WandbError, run_url};
pub use snapshot::{HISTORY_KEYS, MAX_NAMED_KEYS, MAX_OTHER_KEYS, Snapshot, age_text, snapshot_from};
