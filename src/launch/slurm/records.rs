//! What Slurm says about a job: `scontrol show job` and `sacct` records, read into the few
//! fields lachesis needs, and the job state they mean.

use super::{JobState, SlurmError, SlurmJobId};
use crate::model::Exit;

/// One job as scontrol or sacct describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRecord {
    /// Slurm's state word (`RUNNING`, `CANCELLED`, ...), without sacct's `by UID` or `+`.
    pub state: String,
    /// `ExitCode=N:S`: exit code N, or the signal S that ended the batch script.
    pub exit_code: Option<(i32, i32)>,
    /// Whether the job was given nodes (a job cancelled while pending never was).
    pub ran: bool,
}

impl JobRecord {
    /// What the record means for lachesis.
    ///
    /// An ended job whose record says `0:0` but did not complete (the completion record of a
    /// cancelled job always does, see the module docs) counts as ended by SIGTERM, which is what
    /// Slurm sends on cancel, time limit and preemption; one lost with its node, or to the
    /// out-of-memory killer, by SIGKILL; a plain FAILED with no code as code 1.
    pub fn job_state(&self) -> Result<JobState, SlurmError> {
        let state = self.state.as_str();
        let live = match state {
            "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" | "SPECIAL_EXIT" => {
                Some(JobState::Pending)
            }
            "CONFIGURING" | "RUNNING" | "COMPLETING" | "SUSPENDED" | "STOPPED" | "SIGNALING"
            | "STAGE_OUT" | "RESIZING" => Some(JobState::Running),
            _ => None,
        };
        if let Some(live) = live {
            return Ok(live);
        }
        let unrecorded = match state {
            "COMPLETED" => Exit::Code(0),
            "CANCELLED" | "TIMEOUT" | "PREEMPTED" | "DEADLINE" => Exit::Signal(15),
            "NODE_FAIL" | "OUT_OF_MEMORY" => Exit::Signal(9),
            "FAILED" => Exit::Code(1),
            "BOOT_FAIL" | "REVOKED" => return Ok(JobState::Vanished(format!("{state}: it never ran here"))),
            _ => return Err(SlurmError::UnknownState(state.to_string())),
        };
        if !self.ran {
            return Ok(JobState::Vanished(format!("{state} before it ran")));
        }
        let exit = match self.exit_code {
            Some((_, signal)) if signal != 0 => Exit::Signal(signal),
            Some((code, _)) if code != 0 => Exit::Code(code),
            _ => unrecorded,
        };
        Ok(JobState::Ended { exit, state: state.to_string() })
    }
}

/// Reads `scontrol show job ID` (one record per job, `Key=Value` pairs over several lines).
/// Returns None if `job`'s record is not there or has no `JobState`.
pub fn parse_scontrol(text: &str, job: SlurmJobId) -> Option<JobRecord> {
    let wanted = format!("JobId={job}");
    // Records are separated by blank lines; a job array or het job prints several.
    let record = text
        .split("\n\n")
        .find(|record| record.split_whitespace().next().is_some_and(|first| first == wanted))?;
    // First occurrence wins: JobName (user text, before JobState) cannot hold spaces once
    // `submit` has cleaned it, so it cannot smuggle in a `JobState=` token.
    let value = |key: &str| {
        record.split_whitespace().find_map(|token| token.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    };
    let state = base_state(value("JobState")?)?;
    let exit_code = value("ExitCode").and_then(parse_exit_code);
    let ran = value("NodeList").is_some_and(assigned_nodes);
    Some(JobRecord { state, exit_code, ran })
}

/// The fields `query_sacct` asks sacct for, in order.
pub(super) const SACCT_FORMAT: &str = "--format=JobIDRaw,State,ExitCode,NodeList";

/// Reads `sacct --parsable2 --noheader --format=JobIDRaw,State,ExitCode,NodeList`. The last
/// line for `job` wins: a requeued job, or one whose id a reset cluster handed out again, has
/// several.
pub fn parse_sacct(text: &str, job: SlurmJobId) -> Option<JobRecord> {
    let wanted = job.to_string();
    text.lines().rev().find_map(|line| {
        let mut fields = line.trim().split('|');
        if fields.next()? != wanted {
            return None;
        }
        let state = base_state(fields.next()?)?;
        let exit_code = fields.next().and_then(parse_exit_code);
        let ran = fields.next().is_some_and(assigned_nodes);
        Some(JobRecord { state, exit_code, ran })
    })
}

/// `CANCELLED by 0` (sacct), `CANCELLED+` (truncated sacct columns) → `CANCELLED`.
pub(super) fn base_state(text: &str) -> Option<String> {
    let word = text.split_whitespace().next()?.trim_end_matches('+');
    (!word.is_empty() && word.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')).then(|| word.to_string())
}

/// `N:S` (scontrol, sacct), or a bare number, which is a raw wait status (squeue's JSON, and
/// the accounting of some Slurm versions).
pub(super) fn parse_exit_code(text: &str) -> Option<(i32, i32)> {
    let text = text.trim();
    match text.split_once(':') {
        Some((code, signal)) => Some((code.parse().ok()?, signal.parse().ok()?)),
        None => Some(match decode_wait_status(text.parse().ok()?) {
            Exit::Code(code) => (code, 0),
            Exit::Signal(signal) => (0, signal),
        }),
    }
}

pub(super) fn assigned_nodes(list: &str) -> bool {
    !matches!(list.trim(), "" | "(null)" | "None assigned" | "None")
}

/// Decodes a raw wait status (`squeue --json`'s `exit_code`): `>> 8` is the exit code, `& 0x7f`
/// the signal that killed the process.
pub fn decode_wait_status(raw: i64) -> Exit {
    let signal = (raw & 0x7f) as i32;
    if signal != 0 { Exit::Signal(signal) } else { Exit::Code(((raw >> 8) & 0xff) as i32) }
}
