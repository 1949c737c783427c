//! Wake-ups: a CLI that wrote to the store pokes the daemon's unix socket, so new work and stop
//! requests are seen within milliseconds; the daemon's periodic scan only covers lost pokes.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

/// Pokes the daemon if one listens at `socket`; returns whether one did. A missing daemon is
/// not an error: the work waits in the store for the next one.
pub fn notify(socket: &Path) -> bool {
    UnixDatagram::unbound().and_then(|sock| sock.send_to(b"w", socket)).is_ok()
}

/// Binds the daemon's socket (replacing a stale one: only the lock holder gets here).
pub fn listen(socket: &Path) -> io::Result<tokio::net::UnixDatagram> {
    match std::fs::remove_file(socket) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    tokio::net::UnixDatagram::bind(socket)
}
