//! `lachesis run …`: one file per subcommand (`command` lists them and dispatches).

mod checkpoints;
mod command;
mod edit;
mod events;
mod flags;
mod hold;
mod list;
mod logs;
mod metrics;
mod release;
mod resume;
mod selection;
mod start;
mod status;
mod stop;
mod watch;

pub use command::{RunCommand, run};
