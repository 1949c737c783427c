//! The part of lachesis that owns run state: the service (every operation a surface offers),
//! the reconciler (the daemon's one loop) and the store beneath them both; beside the service,
//! the daemon's tasks that act through it (the metric poller, the report poster, the sweep
//! decider).

pub mod metric_poller;
pub mod reconciler;
pub mod report_poster;
pub mod service;
mod store;
pub mod sweep_decider;
