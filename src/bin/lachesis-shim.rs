//! `lachesis-shim`: the parent of one stage process, started by the daemon (see
//! `launch::shim`). A separate executable because every stage starts one: this small binary
//! loads in a fraction of the time of the whole CLI.

use std::process::ExitCode;

fn main() -> ExitCode {
    // As `lachesis` itself: what the stage creates is private to this user whatever the umask.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    ExitCode::from(u8::try_from(lachesis::launch::shim::main(std::env::args_os().skip(1))).unwrap_or(1))
}
