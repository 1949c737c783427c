//! `lachesis daemon`: the supervisor process (`supervise`), the log it keeps (`log`), the record
//! of the running one in its home (`record`), and starting it detached, stopping it and asking
//! after it (`control`).

pub mod control;
pub mod log;
pub mod record;
mod supervise;

pub use supervise::{DaemonError, DaemonOptions, hostname, run};
