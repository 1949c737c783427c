//! The HTTP handlers, a file per noun; `routes.rs` lists them in its table (and keeps the
//! health check and run start itself).

pub mod answer;
pub mod daemon;
pub mod environments;
pub mod inference_tests;
pub mod openapi;
pub mod report;
pub mod runs;
pub mod schedules;
pub mod sweeps;
pub mod webhooks;
