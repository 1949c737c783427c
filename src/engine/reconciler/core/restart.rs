//! Restart repair's weighing of evidence for a stage the store says is live: its recorded
//! shim, alive with its recorded identity, outranks any exit file beside it.

/// What the exit file of a stage recorded as live holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitFile {
    Absent,
    Valid,
    Unreadable,
}

/// Which evidence wins for a stage the store says is live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Watch the shim; any exit file is not its own yet.
    Reattach,
    /// The shim is gone and left its status.
    TrustFile,
    /// The shim is gone; its status file cannot be read (that is what the stage's end says).
    Unreadable,
    /// The shim is gone without a status.
    NoStatus,
}

/// The recorded shim, alive with its recorded identity, outranks any exit file: a shim writes its
/// file just before it exits, so a file beside a live shim was not written by it for this end.
pub fn weigh(shim_alive: bool, file: ExitFile) -> Verdict {
    match (shim_alive, file) {
        (true, _) => Verdict::Reattach,
        (false, ExitFile::Valid) => Verdict::TrustFile,
        (false, ExitFile::Unreadable) => Verdict::Unreadable,
        (false, ExitFile::Absent) => Verdict::NoStatus,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_shim_outranks_any_exit_file() {
        for file in [ExitFile::Absent, ExitFile::Valid, ExitFile::Unreadable] {
            assert_eq!(weigh(true, file), Verdict::Reattach, "{file:?}");
        }
        assert_eq!(weigh(false, ExitFile::Valid), Verdict::TrustFile);
        assert_eq!(weigh(false, ExitFile::Unreadable), Verdict::Unreadable);
        assert_eq!(weigh(false, ExitFile::Absent), Verdict::NoStatus);
    }
}
