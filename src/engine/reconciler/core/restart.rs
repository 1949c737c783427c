//! Restart repair's decisions for a stage the store says is live, from what the shell found of
//! it while no daemon was watching (its start and exit files, its shim's and process's
//! liveness): re-attach to its shim, record the exit its file holds, look again for a trace
//! that may still come, or record it vanished, saying why. The recorded shim, alive with its
//! recorded identity, outranks any exit file beside it.

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

/// What restart repair found of a stage recorded as live, on its first look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// Its shim's identity was in the store (recorded before the daemon stopped).
    pub recorded: bool,
    /// Its shim's pid, recorded or read from its start file now.
    pub shim: Option<i32>,
    /// Its stage process's pid, likewise.
    pub process: Option<i32>,
    /// Its shim is alive with that identity, and watched.
    pub shim_alive: bool,
    pub file: ExitFile,
    /// A valid exit file holds an exit status (the stage ran), not a start failure.
    pub file_ran: bool,
    /// How many more looks it gets while it shows no trace.
    pub looks_left: u32,
}

/// What restart repair does with such a stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repair {
    /// No trace yet (no identity, no exit file): its shim may be waiting out a full disk to
    /// write them. Looked at again in a while, with `looks_left` looks left after it.
    LookAgain { looks_left: u32 },
    /// Watch its shim; `ignored`: the note for an exit file beside it, which is not its own.
    Reattach { ignored: bool },
    /// Record the end its exit file holds, like an exit seen live; `clear_leftovers`: its
    /// shim's half-written files go first.
    RecordExit { clear_leftovers: bool },
    /// Its shim is gone without a status that could be read: its leftovers cleared, the file
    /// is read once more (it may have landed meanwhile), and, still none, `vanished` says why.
    ReadAgain,
    /// It never ran: the daemon stopped while starting it.
    NeverRan,
}

/// A stage's repair, and the event of its start when the store never recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub repair: Repair,
    pub started: Option<String>,
}

/// The repair of a stage recorded as live, from what was found of it.
pub fn repair(found: &Found) -> Decision {
    let repair = match (found.shim, weigh(found.shim_alive && found.shim.is_some(), found.file)) {
        (None, Verdict::TrustFile) => Repair::RecordExit { clear_leftovers: false },
        (None, _) if found.looks_left > 0 => Repair::LookAgain { looks_left: found.looks_left - 1 },
        (None, _) => Repair::NeverRan,
        (Some(_), Verdict::Reattach) => Repair::Reattach { ignored: found.file != ExitFile::Absent },
        (Some(_), Verdict::TrustFile) => Repair::RecordExit { clear_leftovers: true },
        (Some(_), Verdict::Unreadable | Verdict::NoStatus) => Repair::ReadAgain,
    };
    // Its start was never recorded (the daemon stopped, or the disk was full): what the shim
    // left tells it now, so the record of events is complete.
    let started = match (&repair, found.process, found.shim) {
        (Repair::LookAgain { .. }, ..) => None,
        _ if found.recorded => None,
        (_, Some(pid), _) => Some(format!("started (pid {pid}), as found at restart")),
        (_, None, Some(shim)) => Some(format!("started (shim pid {shim}), as found at restart")),
        (Repair::RecordExit { .. }, None, None) if found.file_ran => {
            Some("started (its exit file, found at restart, shows it ran)".to_string())
        }
        _ => None,
    };
    Decision { repair, started }
}

/// Why a stage never ran (`Repair::NeverRan`).
pub const NEVER_RAN: &str = "the daemon stopped while starting it, and it never ran";

/// The note for an exit file found beside a live shim (`Repair::Reattach { ignored: true }`).
pub fn ignored_note(exit_file: &str, shim: i32) -> String {
    format!(
        "ignored {exit_file} found at restart: its shim (pid {shim}) still runs, so the stage has not \
         ended; re-attached to it"
    )
}

/// What was found of a stage whose shim is gone and left no status (`Repair::ReadAgain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gone {
    pub shim: i32,
    /// Its stage process, alive with its recorded identity: an orphan of its shim.
    pub orphan: Option<i32>,
    /// The shim's pid belongs to another process now.
    pub shim_reused: bool,
    /// The status files' filesystem is below its reserve.
    pub disk_low: bool,
}

/// The vanished stage's end: whether its orphaned process group is killed (it is ours: its
/// identity matches), and why it ended.
pub fn vanished(gone: &Gone) -> (Option<i32>, String) {
    let why = match gone {
        Gone { orphan: Some(pid), .. } => {
            format!("its shim vanished; killed the orphaned process group {pid}")
        }
        Gone { shim_reused: true, shim, .. } => {
            format!("process vanished while the daemon was down (pid {shim} now belongs to another process)")
        }
        Gone { disk_low: true, .. } => {
            "could not record the exit: disk full (its shim ended before space returned)".to_string()
        }
        Gone { .. } => "process vanished while the daemon was down, leaving no exit status".to_string(),
    };
    (gone.orphan, why)
}

/// A stage re-attached: the event it records, and whether its readiness is still to be
/// checked (it was starting, in a starting run).
pub fn reattached(pid: Option<i32>, stage_starting: bool, run_starting: bool) -> (String, bool) {
    let pid = pid.unwrap_or(0);
    (format!("re-attached after a daemon restart (pid {pid})"), stage_starting && run_starting)
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

    fn found(recorded: bool, shim: Option<i32>, shim_alive: bool, file: ExitFile, looks_left: u32) -> Found {
        let process = shim.map(|pid| pid + 1);
        Found { recorded, shim, process, shim_alive, file, file_ran: true, looks_left }
    }

    #[test]
    fn each_combination_of_what_was_found_has_its_repair() {
        use ExitFile::{Absent, Unreadable, Valid};
        use Repair::*;
        let started = Some("started (pid 8), as found at restart");
        // (recorded, shim, shim alive, exit file, looks left) -> repair, start event
        #[rustfmt::skip]
        let table = [
            // The shim recorded and alive: watched, whatever file is beside it.
            (true, Some(7), true, Absent, 0, Reattach { ignored: false }, None),
            (true, Some(7), true, Valid, 0, Reattach { ignored: true }, None),
            (true, Some(7), true, Unreadable, 3, Reattach { ignored: true }, None),
            // Found through its start file only: watched, its start recorded now.
            (false, Some(7), true, Absent, 0, Reattach { ignored: false }, started),
            // The shim gone: its file's status, or a second read, then the reason.
            (true, Some(7), false, Valid, 0, RecordExit { clear_leftovers: true }, None),
            (false, Some(7), false, Valid, 0, RecordExit { clear_leftovers: true }, started),
            (true, Some(7), false, Absent, 5, ReadAgain, None),
            (true, Some(7), false, Unreadable, 0, ReadAgain, None),
            // No identity at all: its exit file, else another look, else it never ran.
            (false, None, false, Valid, 5, RecordExit { clear_leftovers: false },
                Some("started (its exit file, found at restart, shows it ran)")),
            (false, None, false, Absent, 5, LookAgain { looks_left: 4 }, None),
            (false, None, false, Unreadable, 1, LookAgain { looks_left: 0 }, None),
            (false, None, false, Absent, 0, NeverRan, None),
            (false, None, false, Unreadable, 0, NeverRan, None),
        ];
        for (i, (recorded, shim, alive, file, looks, repair_, start)) in table.into_iter().enumerate() {
            let got = repair(&found(recorded, shim, alive, file, looks));
            assert_eq!(got, Decision { repair: repair_, started: start.map(str::to_string) }, "row {i}");
        }
        // A start failure's file (no exit status) does not say it ran.
        let failed = Found { file_ran: false, ..found(false, None, false, Valid, 0) };
        assert_eq!(repair(&failed).started, None);
        // Only the shim known: its pid is the start's.
        let shim_only = Found { process: None, ..found(false, Some(7), true, Absent, 0) };
        assert_eq!(repair(&shim_only).started.as_deref(), Some("started (shim pid 7), as found at restart"));
    }

    #[test]
    fn a_vanished_stage_says_why_and_only_its_own_orphan_is_killed() {
        let gone = |orphan, shim_reused, disk_low| Gone { shim: 7, orphan, shim_reused, disk_low };
        // (orphan, shim reused, disk low) -> killed, why
        let table = [
            (gone(Some(8), true, true), Some(8), "its shim vanished; killed the orphaned process group 8"),
            (
                gone(None, true, true),
                None,
                "process vanished while the daemon was down (pid 7 now belongs to another process)",
            ),
            (
                gone(None, false, true),
                None,
                "could not record the exit: disk full (its shim ended before space returned)",
            ),
            (
                gone(None, false, false),
                None,
                "process vanished while the daemon was down, leaving no exit status",
            ),
        ];
        for (i, (gone, killed, why)) in table.into_iter().enumerate() {
            assert_eq!(vanished(&gone), (killed, why.to_string()), "row {i}");
        }
    }

    #[test]
    fn a_reattached_stage_checks_readiness_only_while_it_and_its_run_start() {
        for (stage, run, check) in
            [(true, true, true), (true, false, false), (false, true, false), (false, false, false)]
        {
            assert_eq!(reattached(Some(9), stage, run).1, check, "stage {stage}, run {run}");
        }
        assert_eq!(reattached(None, false, false).0, "re-attached after a daemon restart (pid 0)");
    }
}
