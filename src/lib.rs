//! lachesis: a restart-safe supervisor and queue for reinforcement-learning training runs on
//! the Atropos + Tinker stack. The concepts are in the README and docs/, how a run flows through these
//! modules in ARCHITECTURE.md.
//!
//! The layers (ARCHITECTURE.md, "Layers"; tests/it/layers.rs holds the code to them), outside
//! in, each a folder: the surfaces (`surfaces/`: `api` with its dashboard, `mcp`, `doctor`,
//! `daemon`, and the binary's CLI) render what `engine::service` returns; the engine (`engine/`:
//! service, reconciler, and the store private to them) owns run state; beneath it the runtime
//! (`runtime/`: the workflow schema and what stands on it, `launch`, `inference`,
//! `environments`, …); then the nouns (`model/`); at the ground, here at the crate's root, helpers
//! that name no noun (`text`, `yaml`, `cron`, `logs`, …). Each layer's modules are re-exported
//! here, so a path names the module (`crate::api`), not its layer.

pub mod engine;
pub mod model;
pub mod runtime;
pub mod surfaces;

pub use engine::{metric_poller, reconciler, report_poster, service, sweep_decider};
pub use runtime::{
    environments, inference, launch, node_pools, settings, telemetry, wandb, webhooks, workflow,
};
pub use surfaces::{api, daemon, doctor, mcp};

// The ground.
pub mod cron;
pub mod environ;
pub mod failpoint;
pub mod http_client;
pub mod logs;
pub mod pyjson;
pub mod secrets;
pub mod text;
pub mod wake;
pub mod yaml;
