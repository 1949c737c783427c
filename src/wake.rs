//! Wake-ups: a CLI that wrote to the store pokes the daemon's unix socket, so new work and stop
//! requests are seen within milliseconds; the daemon's periodic scan only covers lost pokes.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

/// What a poke tells the daemon, in its one byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Poke {
    /// Something it supervises may have changed (a stop request): it rescans the store.
    Changed,
    /// New work was queued: it only looks at the queue, which is all a submission needs.
    Queued,
    /// Only asks whether a daemon listens: it does nothing.
    Probe,
}

impl Poke {
    fn byte(self) -> u8 {
        match self {
            Poke::Changed => b'w',
            Poke::Queued => b'q',
            Poke::Probe => b'p',
        }
    }

    /// The poke a datagram carries; anything unknown is a change, the safe reading.
    pub fn read(datagram: &[u8]) -> Poke {
        match datagram {
            b"q" => Poke::Queued,
            b"p" => Poke::Probe,
            _ => Poke::Changed,
        }
    }
}

/// Pokes the daemon if one listens at `socket`; returns whether one did. A missing daemon is
/// not an error: the work waits in the store for the next one.
pub fn poke(socket: &Path, poke: Poke) -> bool {
    UnixDatagram::unbound().and_then(|sock| sock.send_to(&[poke.byte()], socket)).is_ok()
}

/// Binds the daemon's socket (replacing a stale one: only the lock holder gets here).
pub fn listen(socket: &Path) -> io::Result<tokio::net::UnixDatagram> {
    match std::fs::remove_file(socket) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    tokio::net::UnixDatagram::bind(socket)
}

#[cfg(test)]
mod tests {
    use super::Poke;

    #[test]
    fn each_poke_reads_back_and_anything_else_is_a_change() {
        for poke in [Poke::Changed, Poke::Queued, Poke::Probe] {
            assert_eq!(Poke::read(&[poke.byte()]), poke);
        }
        assert_eq!(Poke::read(b""), Poke::Changed);
        assert_eq!(Poke::read(b"qq"), Poke::Changed);
    }
}
