//! The surfaces: what people and agents touch. The HTTP API with its dashboard (`api`), the MCP
//! server (`mcp`), the daemon and its control (`daemon`) and the checks of a machine (`doctor`)
//! render what `engine::service` returns; the CLI (`cli/`, beside them) is the binary's.

pub mod api;
pub mod daemon;
pub mod doctor;
pub mod mcp;
