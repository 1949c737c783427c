//! What the engine drives and reads, beneath it and above the nouns: workflows (their files,
//! templates and plans), launching stages, inference tests, environments, W&B, webhooks, this
//! node's pools, the settings of a home and the daemon's counters.

pub mod environments;
pub mod inference;
pub mod launch;
pub mod node_pools;
pub mod settings;
pub mod telemetry;
pub mod wandb;
pub mod webhooks;
pub mod workflow;
