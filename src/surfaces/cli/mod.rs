//! Command-line definitions and dispatch, one file per command group.

mod checkpoints;
mod command;
mod completions;
mod config;
mod daemon;
mod doctor;
mod env;
pub(crate) mod exit_code;
mod gc;
mod input;
mod mcp;
mod node;
pub(crate) mod output;
mod report;
mod run;
mod schedule;
mod service_install;
mod service_unit;
mod sweep;
mod test;
mod webhooks;
mod workflow;

pub use command::{Cli, CliResult, dispatch, parse};
