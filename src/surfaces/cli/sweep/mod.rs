//! `lachesis sweep …`: one file per subcommand (`command` lists them and dispatches).

mod command;
mod list;
mod resume;
mod start;
mod status;
mod stop;

pub use command::{SweepCommand, run};
