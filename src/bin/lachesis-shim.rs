//! `lachesis-shim`: the parent of one stage process, started by the daemon (see
//! `launch::shim`). A separate executable because every stage starts one: this small binary
//! loads in a fraction of the time of the whole CLI. `lachesis-shim --serve` is the daemon's
//! fork server (`launch::forkserver`), which forks these shims ready-made.

use std::process::ExitCode;

use lachesis::launch::{forkserver, shim};

fn main() -> ExitCode {
    // As `lachesis` itself: what the stage creates is private to this user whatever the umask.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let code = if std::env::args_os().nth(1).is_some_and(|arg| arg == forkserver::SERVE_FLAG) {
        forkserver::serve()
    } else {
        shim::main(std::env::args_os().skip(1))
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
