//! lachesis: a restart-safe supervisor and queue for reinforcement-learning training runs on
//! the Atropos + Tinker stack. See DESIGN in the README for the concepts.

pub mod api;
pub mod cron;
pub mod daemon;
pub mod doctor;
pub mod envfile;
pub mod environments;
pub mod http_client;
pub mod inference;
pub mod launch;
pub mod logs;
pub mod mcp;
pub mod metric_poller;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod pyjson;
pub mod reconciler;
pub mod secrets;
pub mod service;
pub mod settings;
pub mod store;
pub mod wake;
pub mod wandb;
pub mod workflow;
pub mod yaml;
