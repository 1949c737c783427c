//! Which database a store runs on, and what that lets lachesis do.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded default: one file, one daemon on one machine.
    Sqlite,
    /// A server several daemons (nodes) can share.
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// Several daemons can share the queue (nodes, labels, leases, wake-ups across machines).
    pub fn supports_nodes(self) -> bool {
        self == Backend::Postgres
    }

    /// Claims can lock the rows they read and skip the ones others hold (`FOR UPDATE SKIP LOCKED`).
    pub fn locks_rows(self) -> bool {
        self == Backend::Postgres
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
