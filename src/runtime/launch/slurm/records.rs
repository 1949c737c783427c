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

#[cfg(test)]
mod tests {
    use super::*;

    // Real outputs of Slurm 22.05.8 on the test cluster (tests/slurm/cluster.sh).

    /// `sh -c 'echo hi; exit 7'`, ended.
    const SCONTROL_FAILED_7: &str = "JobId=4 JobName=t7
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901756 Nice=0 Account=(null) QOS=(null)
   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=7:0
   RunTime=00:00:01 TimeLimit=UNLIMITED TimeMin=N/A
   SubmitTime=2026-11-22T04:41:01 EligibleTime=2026-11-22T04:41:01
   AccrueTime=2026-11-22T04:41:01
   StartTime=2026-11-22T04:41:01 EndTime=2026-11-22T04:41:02 Deadline=N/A
   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-22T04:41:01 Scheduler=Main
   Partition=debug AllocNode:Sid=localhost:5240
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=n1
   BatchHost=n1
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=1,node=1,billing=1
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0
   Features=(null) DelayBoot=00:00:00
   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)
   Command=/tmp/sx/j7.sh
   WorkDir=/tmp/sx
   StdErr=/tmp/sx/j7.log
   StdIn=/dev/null
   StdOut=/tmp/sx/j7.log
   Power=
   

";

    /// Builds a record like the one above with other state lines (the rest is the same).
    fn scontrol(id: u64, state: &str, exit: &str, nodes: &str) -> String {
        SCONTROL_FAILED_7
            .replace("JobId=4 ", &format!("JobId={id} "))
            .replace("JobState=FAILED Reason=NonZeroExitCode", state)
            .replace("ExitCode=7:0", &format!("ExitCode={exit}"))
            .replace("NodeList=n1\n   BatchHost=n1\n", nodes)
    }

    fn state_of(text: &str, id: u64) -> JobState {
        parse_scontrol(text, SlurmJobId(id)).unwrap().job_state().unwrap()
    }

    fn ended(exit: Exit, state: &str) -> JobState {
        JobState::Ended { exit, state: state.into() }
    }

    #[test]
    fn scontrol_states_seen_on_a_real_cluster() {
        let ran = "NodeList=n1\n   BatchHost=n1\n";
        assert_eq!(state_of(SCONTROL_FAILED_7, 4), ended(Exit::Code(7), "FAILED"));
        let cases = [
            // exec sleep 1000, running
            ("JobState=RUNNING Reason=None", "0:0", ran, JobState::Running),
            // --begin=now+3600
            ("JobState=PENDING Reason=BeginTime", "0:0", "NodeList=\n", JobState::Pending),
            // just after scancel, the stage still exiting
            ("JobState=COMPLETING Reason=None", "0:0", ran, JobState::Running),
            ("JobState=COMPLETED Reason=None", "0:0", ran, ended(Exit::Code(0), "COMPLETED")),
            // scancel of exec sleep 1000: killed by the SIGTERM
            ("JobState=CANCELLED Reason=None", "0:15", ran, ended(Exit::Signal(15), "CANCELLED")),
            // scancel of a stage that traps TERM and exits 0
            ("JobState=CANCELLED Reason=None", "0:0", ran, ended(Exit::Signal(15), "CANCELLED")),
            // scancel of a stage that traps TERM and exits 3
            ("JobState=CANCELLED Reason=None", "3:0", ran, ended(Exit::Code(3), "CANCELLED")),
            // scancel of a pending job
            (
                "JobState=CANCELLED Reason=BeginTime",
                "0:0",
                "NodeList=\n",
                JobState::Vanished("CANCELLED before it ran".into()),
            ),
            // --time=1 with exec sleep 1000; and with a stage that traps TERM and exits 0
            ("JobState=TIMEOUT Reason=TimeLimit", "0:15", ran, ended(Exit::Signal(15), "TIMEOUT")),
            ("JobState=TIMEOUT Reason=TimeLimit", "0:0", ran, ended(Exit::Signal(15), "TIMEOUT")),
            // sh -c 'kill -9 $$'; sh -c 'kill -SEGV $$'; exec /nonexistent/prog
            ("JobState=FAILED Reason=JobLaunchFailure", "0:9", ran, ended(Exit::Signal(9), "FAILED")),
            ("JobState=FAILED Reason=JobLaunchFailure", "0:11", ran, ended(Exit::Signal(11), "FAILED")),
            ("JobState=FAILED Reason=NonZeroExitCode", "127:0", ran, ended(Exit::Code(127), "FAILED")),
            // a stage ignoring SIGTERM, SIGKILLed after KillWait
            ("JobState=CANCELLED Reason=None", "0:9", ran, ended(Exit::Signal(9), "CANCELLED")),
            ("JobState=NODE_FAIL Reason=None", "0:0", ran, ended(Exit::Signal(9), "NODE_FAIL")),
        ];
        for (state, exit, nodes, want) in cases {
            assert_eq!(state_of(&scontrol(21, state, exit, nodes), 21), want, "{state} {exit}");
        }
    }

    #[test]
    fn scontrol_output_that_does_not_fit_gives_none_or_an_error() {
        assert_eq!(parse_scontrol(SCONTROL_FAILED_7, SlurmJobId(40)), None);
        assert_eq!(parse_scontrol("slurm_load_jobs error: Invalid job id specified\n", SlurmJobId(4)), None);
        assert_eq!(parse_scontrol("", SlurmJobId(4)), None);
        assert_eq!(parse_scontrol("JobId=4 JobName=x\n   Reason=None\n", SlurmJobId(4)), None);
        let odd =
            parse_scontrol(&scontrol(4, "JobState=WEIRD Reason=None", "x:y", "NodeList=n1\n"), SlurmJobId(4));
        let odd = odd.unwrap();
        assert_eq!(odd.exit_code, None);
        assert!(matches!(odd.job_state(), Err(SlurmError::UnknownState(s)) if s == "WEIRD"));
        // A job array prints one record per task; the one asked for is read.
        let two = format!(
            "{}{}",
            scontrol(5, "JobState=RUNNING Reason=None", "0:0", "NodeList=n1\n"),
            SCONTROL_FAILED_7
        );
        assert_eq!(state_of(&two, 4), ended(Exit::Code(7), "FAILED"));
        assert_eq!(state_of(&two, 5), JobState::Running);
    }

    /// `sacct -c -X --parsable2 --noheader --format=JobIDRaw,State,ExitCode,NodeList -j ...`
    /// after the jobs above. Note 14 and 5: the completion file has 0:0 where scontrol had
    /// 0:15 and 0:0 (a TERM-trapping stage).
    const SACCT_C: &str = "4|FAILED|7:0|n1
5|CANCELLED|0:0|n1
8|CANCELLED|0:0|(null)
9|FAILED|0:9|n1
11|FAILED|127:0|n1
14|TIMEOUT|0:0|n1
";

    #[test]
    fn sacct_completion_lines() {
        let state = |id| parse_sacct(SACCT_C, SlurmJobId(id)).unwrap().job_state().unwrap();
        assert_eq!(state(4), ended(Exit::Code(7), "FAILED"));
        assert_eq!(state(5), ended(Exit::Signal(15), "CANCELLED"));
        assert_eq!(state(8), JobState::Vanished("CANCELLED before it ran".into()));
        assert_eq!(state(9), ended(Exit::Signal(9), "FAILED"));
        assert_eq!(state(11), ended(Exit::Code(127), "FAILED"));
        assert_eq!(state(14), ended(Exit::Signal(15), "TIMEOUT"));
        assert_eq!(parse_sacct(SACCT_C, SlurmJobId(1)), None);
        assert_eq!(parse_sacct("", SlurmJobId(4)), None);
        assert_eq!(parse_sacct("4\n4|\n|||\n", SlurmJobId(4)), None);
        // The accounting database's spelling, and a reused id: the last line wins.
        let dbd = "7|CANCELLED by 0|0:15|n1\n7|COMPLETED|0:0|n1\n";
        assert_eq!(parse_sacct(dbd, SlurmJobId(7)).unwrap().state, "COMPLETED");
        let by = parse_sacct("7|CANCELLED by 1000|0:15|None assigned\n", SlurmJobId(7)).unwrap();
        assert_eq!(by.job_state().unwrap(), JobState::Vanished("CANCELLED before it ran".into()));
        // A raw wait status instead of N:S is decoded: 7 << 8 is exit 7, 9 is SIGKILL.
        let raw = "12|FAILED|1792|n1\n13|FAILED|9|n1\n";
        let state = |id| parse_sacct(raw, SlurmJobId(id)).unwrap().job_state().unwrap();
        assert_eq!(state(12), ended(Exit::Code(7), "FAILED"));
        assert_eq!(state(13), ended(Exit::Signal(9), "FAILED"));
    }

    #[test]
    fn wait_statuses() {
        assert_eq!(decode_wait_status(7 << 8), Exit::Code(7));
        assert_eq!(decode_wait_status(0), Exit::Code(0));
        assert_eq!(decode_wait_status(15), Exit::Signal(15));
        assert_eq!(decode_wait_status(9 | 0x80), Exit::Signal(9));
        assert_eq!(decode_wait_status(-1), Exit::Signal(127));
        assert_eq!(decode_wait_status(i64::MAX), Exit::Signal(127));
        assert_eq!(decode_wait_status(i64::MIN), Exit::Code(0));
    }
}
