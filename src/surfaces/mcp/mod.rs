//! `lachesis mcp`: the reference's RL tools for agents, over MCP on stdio (rmcp). Every tool
//! calls the service layer and answers JSON text with the reference's keys and types, plus what
//! lachesis knows more under keys of its own (queue position, stage states, events). Errors are
//! answers too (`{"error": …}`), as in the reference, worded to name MCP tools.
//!
//! `tools` is the table agents see (names, descriptions, arguments from `args`); the handlers
//! live by topic: `environments`, `training`, `inference`, `health`, and `sweeps` (tools beyond
//! the reference's: it has no sweeps). `answers` shapes the
//! service's answers into the reference's keys; `server` holds the tools' state and serves them.

mod answers;
mod args;
mod environments;
mod health;
mod inference;
mod server;
mod sweeps;
mod tools;
mod training;

pub use server::{RlTools, serve, status_interval};
