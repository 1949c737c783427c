//! What `lachesis` exits with: one code per outcome a script tells apart, and the one place that
//! chooses it for an error. cargo-nextest's `exit_codes.rs` is the model: named constants, a
//! table in the docs, and every code stable once released.

use std::error::Error;
use std::process::ExitCode;

use lachesis::api::client::ClientError;
use lachesis::daemon::control::ControlError;
use lachesis::service::{ErrorKind, ServiceError};

/// Done as asked.
pub const SUCCESS: u8 = 0;
/// A fault of this machine or of lachesis itself (an I/O error, a damaged store, a bug).
pub const INTERNAL: u8 = 1;
/// The command line does not parse (clap's own code, kept; clap exits with it itself).
#[cfg_attr(not(test), allow(dead_code))]
pub const USAGE: u8 = 2;
/// The request was understood and refused: an unknown or ambiguous id, a bad value, a state
/// that does not allow it, a missing credential. Nothing was done.
pub const REFUSED: u8 = 3;
/// What the command waited for or checked ended not ok: a run or test that ended other than
/// completed under `--wait`/`watch`, a `doctor` check that failed; a command on several runs
/// that acted on some and was refused for others.
pub const NOT_OK: u8 = 4;
/// No daemon or store to talk to: no daemon running where one is needed, a store that cannot be
/// opened or reached, a daemon that took a request and did not answer.
pub const UNREACHABLE: u8 = 5;

/// The table as `lachesis --help` prints it, and as the docs show it.
pub const HELP: &str = "Exit codes:
  0  done as asked
  1  a fault of this machine or of lachesis (I/O, a damaged store, a bug)
  2  the command line does not parse
  3  the request was refused (unknown id, bad value, a state that does not allow it); nothing was done
  4  what the command waited for or checked ended not ok (a run or test not completed, a failed doctor check, some of several runs refused)
  5  no daemon or store to talk to";

pub fn code(value: u8) -> ExitCode {
    ExitCode::from(value)
}

/// `SUCCESS` when `ok`, `NOT_OK` otherwise.
pub fn ok_or_not(ok: bool) -> ExitCode {
    code(if ok { SUCCESS } else { NOT_OK })
}

/// The code for an error that reached the binary's edge: the first error in its chain that
/// lachesis knows decides; anything else is internal.
pub fn for_error(err: &(dyn Error + 'static)) -> u8 {
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(err) = err.downcast_ref::<ServiceError>() {
            return if err.is_unreachable() { UNREACHABLE } else { for_kind(err.kind()) };
        }
        if let Some(err) = err.downcast_ref::<ClientError>() {
            return match err {
                ClientError::Refused { status, .. } if (400..500).contains(status) => REFUSED,
                ClientError::Refused { .. } => INTERNAL,
                ClientError::Unanswered(_) => UNREACHABLE,
            };
        }
        if let Some(err) = err.downcast_ref::<ControlError>() {
            return match err {
                ControlError::NotRunning { .. } | ControlError::NoAnswer { .. } => UNREACHABLE,
                ControlError::AlreadyRunning { .. } => REFUSED,
                _ => INTERNAL,
            };
        }
        next = err.source();
    }
    INTERNAL
}

fn for_kind(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::NotFound
        | ErrorKind::Invalid
        | ErrorKind::Ambiguous
        | ErrorKind::Conflict
        | ErrorKind::Forbidden
        | ErrorKind::Unprocessable => REFUSED,
        ErrorKind::StorageFull | ErrorKind::Internal => INTERNAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_lists_each_code_once_in_order() {
        let listed: Vec<u8> = HELP
            .lines()
            .skip(1)
            .map(|line| line.split_whitespace().next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(listed, [SUCCESS, INTERNAL, USAGE, REFUSED, NOT_OK, UNREACHABLE]);
    }

    #[test]
    fn errors_choose_their_code_through_their_chain() {
        let refused = ServiceError::UnknownRun("ab12".into());
        assert_eq!(for_error(&refused), REFUSED);
        let daemon = ClientError::Refused { status: 400, message: "unknown workflow 'x'".into() };
        assert_eq!(for_error(&daemon), REFUSED);
        let broken = ClientError::Refused { status: 500, message: "database is locked".into() };
        assert_eq!(for_error(&broken), INTERNAL);
        let gone = ControlError::NotRunning { home: "/h".into() };
        assert_eq!(for_error(&gone), UNREACHABLE);
        let io: Box<dyn Error> = Box::new(std::io::Error::other("disk"));
        assert_eq!(for_error(io.as_ref()), INTERNAL);
    }
}
