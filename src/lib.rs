//! lachesis: a restart-safe supervisor and queue for reinforcement-learning training runs on
//! the Atropos + Tinker stack. The concepts are in the README and docs/, how a run flows through these
//! modules in ARCHITECTURE.md.
//!
//! The layers (ARCHITECTURE.md, "Layers"; tests/it/layers.rs holds the code to them), outside
//! in: the surfaces (`api` with its dashboard, `mcp`, `doctor`, `daemon`; the CLI is the binary)
//! render what `engine::service` returns; the engine (service, reconciler, and the store private
//! to them) owns run state; beneath it the workflow schema (`workflow`) and what stands on it
//! (`launch`, `inference`, `environments`, …); then the nouns (`model`); at the ground, helpers
//! that name no noun (`text`, `yaml`, `cron`, `logs`, …).

pub mod api;
pub mod cron;
pub mod daemon;
pub mod doctor;
pub mod engine;
pub mod environ;
pub mod environments;
pub mod failpoint;
pub mod http_client;
pub mod inference;
pub mod launch;
pub mod logs;
pub mod mcp;
pub mod metric_poller;
pub mod model;
pub mod node_pools;
pub mod pyjson;
pub mod report_poster;
pub mod secrets;
pub mod settings;
pub mod sweep_decider;
pub mod telemetry;
pub mod text;
pub mod wake;
pub mod wandb;
pub mod webhooks;
pub mod workflow;
pub mod yaml;

pub use engine::{reconciler, service};
