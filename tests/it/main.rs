//! One integration test binary (as pueue does): helpers in `support`, one module per area.

mod atropos;
mod cli;
mod dashboard;
mod docs;
mod envfile;
mod faults;
mod full_disk;
mod fuzz;
mod handoff;
mod hostile;
mod http;
mod inference_tests;
mod mcp;
mod nodes;
mod progress;
mod retention;
mod schedules;
mod slurm;
mod supervisor;
mod support;
mod wandb;
