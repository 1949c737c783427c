//! lachesis: a restart-safe supervisor and queue for reinforcement-learning training runs on
//! the Atropos + Tinker stack. See DESIGN in the README for the concepts.

pub mod api;
pub mod bench;
pub mod daemon;
pub mod doctor;
pub mod environments;
pub mod http_client;
pub mod jobs;
pub mod launch;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod reconciler;
pub mod redact;
pub mod service;
pub mod settings;
pub mod store;
pub mod transitions;
pub mod wake;
pub mod workflow;
pub mod yaml;
