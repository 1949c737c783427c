//! One integration test binary (as pueue does): helpers in `support`, one module per area.

mod atropos;
mod checkpoints;
mod cli;
mod dashboard;
mod docs;
mod environ;
mod faults;
mod full_disk;
mod fuzz;
mod handoff;
mod holds;
mod hostile;
mod http;
mod inference_tests;
mod logs;
mod mcp;
mod nodes;
mod progress;
mod retention;
mod schedules;
mod slurm;
mod supervisor;
mod support;
mod systemd;
mod time_limits;
mod wandb;
