//! Running a stage as a Slurm batch job: `sbatch` submits it, `scontrol show job` (then `sacct`)
//! says how it is doing, `scancel` stops it. Only the command-line tools are used, so any
//! cluster a login shell can use works, with no REST daemon or library to match.
//!
//! What this relies on was checked against Slurm 22.05 (tests/slurm/README.md has the details):
//! - `scancel JOB` sends SIGTERM to the batch step's main process only, and SIGKILL to every
//!   process of the job `KillWait` seconds later. So the batch script `exec`s the stage, or,
//!   when output is masked, stays as the parent and forwards signals to it.
//! - Once the main process exits, whatever it left behind is killed.
//! - `scontrol show job` keeps an ended job for `MinJobAge` seconds, then says "Invalid job id
//!   specified"; after that only `sacct` knows the job (the accounting database, or the
//!   job-completion file with `sacct -c` where there is no database).
//! - The job-completion record of a cancelled or timed-out job is written before the job's
//!   processes exit, so it says `ExitCode=0:0` whatever they did.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::model::Exit;
use crate::workflow::{SlurmOptions, StagePlan};

mod records;
mod script;

use records::SACCT_FORMAT;
pub use records::{JobRecord, decode_wait_status, parse_sacct, parse_scontrol};
pub use script::{BatchScript, batch_script};

/// A Slurm job id. Serialized as a plain number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SlurmJobId(pub u64);

impl fmt::Display for SlurmJobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("'{0}' is not a Slurm job id")]
pub struct BadJobId(String);

impl FromStr for SlurmJobId {
    type Err = BadJobId;

    /// Takes `123`, or `123;cluster` as `sbatch --parsable` prints on a federated cluster.
    fn from_str(text: &str) -> Result<SlurmJobId, BadJobId> {
        let id = text.trim().split(';').next().unwrap_or_default();
        match id.parse::<u64>() {
            Ok(n) if n > 0 && id.bytes().all(|b| b.is_ascii_digit()) => Ok(SlurmJobId(n)),
            _ => Err(BadJobId(text.chars().take(40).collect())),
        }
    }
}

/// Where a job is, as far as lachesis cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Waiting for resources, a begin time, or a requeue.
    Pending,
    /// Running, or still tearing down (COMPLETING): its processes may still be about.
    Running,
    /// Over. `state` is Slurm's word for it (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...), worth
    /// showing: a stage that hit its time limit ends with SIGTERM like one that was cancelled.
    Ended { exit: Exit, state: String },
    /// Cancelled before it ran, or unknown to both scontrol and sacct.
    Vanished(String),
}

impl JobState {
    /// Whether the job may still have processes running or still start some.
    pub fn is_live(&self) -> bool {
        matches!(self, JobState::Pending | JobState::Running)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("{0} is not installed (not found on PATH)")]
    NotInstalled(&'static str),
    /// Slurm's tools would retry reading a missing config for 60 s before failing.
    #[error("SLURM_CONF is {}, which does not exist", .0.display())]
    NoConfig(PathBuf),
    #[error("{command} failed: {stderr}")]
    Failed { command: &'static str, stderr: String },
    #[error("{command} gave no answer within {}s", .after.as_secs())]
    Timeout { command: &'static str, after: Duration },
    #[error("cannot run {command}: {source}")]
    Io {
        command: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("unexpected output from {command}: {output:?}")]
    Unexpected { command: &'static str, output: String },
    #[error("cannot submit stage '{stage}': {reason}")]
    BadPlan { stage: String, reason: String },
    #[error("'{0}' is not a signal name or number")]
    BadSignal(String),
    /// A job state this module does not know (a newer Slurm?): better said than guessed.
    #[error("Slurm reports job state {0}, which lachesis does not know")]
    UnknownState(String),
}

impl SlurmError {
    /// Failures that may pass (slurmctld restarting, a slow answer); worth retrying a few times.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            SlurmError::Failed { .. }
                | SlurmError::Timeout { .. }
                | SlurmError::Io { .. }
                | SlurmError::Unexpected { .. }
        )
    }
}

/// What a Slurm command printed, once it exited 0.
struct Output {
    stdout: String,
    stderr: String,
}

/// The Slurm cluster the commands talk to. `Slurm::default()` is whatever the environment
/// says (`SLURM_CONF`, else Slurm's own default); tests name a config file instead of touching
/// the process environment.
#[derive(Clone, Debug)]
pub struct Slurm {
    conf: Option<PathBuf>,
    timeout: Duration,
}

impl Default for Slurm {
    fn default() -> Slurm {
        Slurm { conf: None, timeout: Duration::from_secs(30) }
    }
}

/// How many failed queries in a row `wait_ended` puts up with.
const WAIT_TOLERATED_FAILURES: u32 = 5;

impl Slurm {
    /// Talks to the cluster that `conf` (a slurm.conf) describes.
    pub fn with_config(conf: impl Into<PathBuf>) -> Slurm {
        Slurm { conf: Some(conf.into()), ..Slurm::default() }
    }

    /// How long one command may take (30 s by default; slurmctld down makes them hang).
    pub fn with_timeout(self, timeout: Duration) -> Slurm {
        Slurm { timeout, ..self }
    }

    /// Submits `plan` as a batch job named `job_name`, with stdout and stderr appended to the
    /// stage log, and the stage's env on top of ours (`--export=ALL`).
    pub async fn submit(
        &self,
        plan: &StagePlan,
        options: &SlurmOptions,
        job_name: &str,
        mask_exe: Option<&Path>,
    ) -> Result<SlurmJobId, SlurmError> {
        let bad = |reason: String| SlurmError::BadPlan { stage: plan.name.clone(), reason };
        if plan.argv.is_empty() {
            return Err(bad("empty argv".into()));
        }
        let mut texts = plan.argv.iter().chain(plan.environ.keys()).chain(plan.environ.values());
        let bad_name = |k: &String| k.is_empty() || k.contains('=');
        if texts.any(|t| t.contains('\0')) || plan.environ.keys().any(bad_name) {
            return Err(bad("argv or env holds a NUL byte or a bad variable name".into()));
        }
        let (Some(log), Some(cwd)) = (plan.log_path.to_str(), plan.cwd.to_str()) else {
            return Err(bad("the log path and working directory must be UTF-8".into()));
        };
        if let Some(dir) = plan.log_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| bad(format!("cannot create {}: {e}", dir.display())))?;
        }
        let script = batch_script(plan, mask_exe);
        // `%` starts a pattern (%j, %x) in Slurm's file names; `%%` is a literal one.
        let log = log.replace('%', "%%");
        let mut args = vec![
            "--parsable".to_string(),
            format!("--job-name={}", clean_job_name(job_name)),
            format!("--output={log}"),
            format!("--error={log}"),
            "--open-mode=append".to_string(),
            format!("--chdir={cwd}"),
            "--export=ALL".to_string(),
        ];
        args.extend(options.sbatch_args(&plan.name));
        let mut env = crate::environ::for_child(&plan.environ);
        env.extend(script.environ);
        let out = self.run("sbatch", &args, &env, Some(script.text.as_bytes())).await?;
        let line = out.stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
        let job = line
            .parse::<SlurmJobId>()
            .map_err(|_| SlurmError::Unexpected { command: "sbatch", output: clip(&out.stdout) })?;
        tracing::info!(%job, stage = %plan.name, "submitted to Slurm");
        Ok(job)
    }

    /// Where `job` is: `scontrol show job`, then `sacct` once scontrol has forgotten it.
    pub async fn query(&self, job: SlurmJobId) -> Result<JobState, SlurmError> {
        let args = ["show".to_string(), "job".to_string(), job.to_string()];
        match self.run("scontrol", &args, &BTreeMap::new(), None).await {
            Ok(out) => parse_scontrol(&out.stdout, job)
                .ok_or_else(|| SlurmError::Unexpected { command: "scontrol", output: clip(&out.stdout) })?
                .job_state(),
            Err(SlurmError::Failed { stderr, .. }) if stderr.contains("Invalid job id") => {
                self.query_sacct(job).await
            }
            Err(e) => Err(e),
        }
    }

    /// Where `job` is according to `sacct`: the accounting database, or, on a cluster without
    /// one, the job-completion file (`sacct -c`). Vanished if neither knows the job.
    pub async fn query_sacct(&self, job: SlurmJobId) -> Result<JobState, SlurmError> {
        let args = |completion: bool| {
            let mut args: Vec<String> = if completion { vec!["-c".into()] } else { Vec::new() };
            args.extend(["-X", "--parsable2", "--noheader", SACCT_FORMAT, "-j"].map(String::from));
            args.push(job.to_string());
            args
        };
        let out = match self.run("sacct", &args(false), &BTreeMap::new(), None).await {
            Err(SlurmError::Failed { stderr, .. }) if stderr.contains("accounting storage is disabled") => {
                self.run("sacct", &args(true), &BTreeMap::new(), None).await?
            }
            other => other?,
        };
        match parse_sacct(&out.stdout, job) {
            Some(record) => record.job_state(),
            None => Ok(JobState::Vanished("unknown to scontrol and to sacct".into())),
        }
    }

    /// Stops `job`: plain `scancel`, i.e. SIGTERM to the stage, then SIGKILL to all the job's
    /// processes after the cluster's `KillWait` (see `kill_wait`); a pending job is just
    /// dropped. `Some(signal)` sends that signal to a running stage without cancelling it,
    /// except KILL, which Slurm treats as a plain cancel (TERM, then KILL after KillWait).
    /// A job that has already ended is not an error.
    pub async fn cancel(&self, job: SlurmJobId, signal: Option<&str>) -> Result<(), SlurmError> {
        let mut args = Vec::new();
        if let Some(signal) = signal {
            let name = signal.trim_start_matches("SIG").to_ascii_uppercase();
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(SlurmError::BadSignal(signal.chars().take(40).collect()));
            }
            if name != "KILL" && name != "9" {
                // --batch: the job's main process (the stage, or the shell that forwards to it).
                // --state=RUNNING: scancel --signal retries ~100 s on a pending job.
                args.extend(["--batch".to_string(), format!("--signal={name}"), "--state=RUNNING".into()]);
            }
        }
        args.push(job.to_string());
        let gone = |stderr: &str| {
            stderr.contains("Invalid job id") || stderr.contains("already completing or completed")
        };
        match self.run("scancel", &args, &BTreeMap::new(), None).await {
            // Plain scancel exits 0 even when it reports an error.
            Ok(out) if out.stderr.contains("error") && !gone(&out.stderr) => {
                Err(SlurmError::Failed { command: "scancel", stderr: clip(out.stderr.trim()) })
            }
            Ok(_) => Ok(()),
            Err(SlurmError::Failed { stderr, .. }) if gone(&stderr) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Polls `query` every `poll` until the job has ended or vanished, and returns that state.
    /// Up to five failed queries in a row are put up with (slurmctld restarting).
    pub async fn wait_ended(&self, job: SlurmJobId, poll: Duration) -> Result<JobState, SlurmError> {
        let mut failures = 0;
        loop {
            match self.query(job).await {
                Ok(state) if state.is_live() => failures = 0,
                Ok(state) => return Ok(state),
                Err(e) if e.is_transient() && failures < WAIT_TOLERATED_FAILURES => {
                    failures += 1;
                    tracing::warn!(%job, error = %e, "cannot query Slurm job; retrying");
                }
                Err(e) => return Err(e),
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// The cluster's `KillWait`: how long after scancel's SIGTERM Slurm sends SIGKILL.
    pub async fn kill_wait(&self) -> Result<Duration, SlurmError> {
        let args = ["show".to_string(), "config".to_string()];
        let out = self.run("scontrol", &args, &BTreeMap::new(), None).await?;
        out.stdout
            .lines()
            .find_map(|line| {
                let (key, value) = line.split_once('=')?;
                (key.trim() == "KillWait").then(|| value.split_whitespace().next()?.parse().ok())?
            })
            .map(Duration::from_secs)
            .ok_or_else(|| SlurmError::Unexpected { command: "scontrol", output: "no KillWait".into() })
    }

    /// Runs a Slurm command to the end (or the timeout), with `env` added to ours.
    async fn run(
        &self,
        command: &'static str,
        args: &[String],
        env: &BTreeMap<String, String>,
        stdin: Option<&[u8]>,
    ) -> Result<Output, SlurmError> {
        let conf = self.conf.clone().or_else(|| std::env::var_os("SLURM_CONF").map(PathBuf::from));
        if let Some(conf) = conf.filter(|c| !c.exists()) {
            return Err(SlurmError::NoConfig(conf));
        }
        let mut cmd = Command::new(command);
        cmd.args(args)
            .envs(env)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(conf) = &self.conf {
            cmd.env("SLURM_CONF", conf);
        }
        tracing::debug!(command, ?args, "running");
        let mut child = cmd.spawn().map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => SlurmError::NotInstalled(command),
            _ => SlurmError::Io { command, source },
        })?;
        let input = child.stdin.take();
        let feed = async move {
            if let (Some(mut pipe), Some(bytes)) = (input, stdin) {
                pipe.write_all(bytes).await?;
                pipe.shutdown().await?;
            }
            Ok::<(), io::Error>(())
        };
        let ran = tokio::time::timeout(self.timeout, async { tokio::join!(feed, child.wait_with_output()) });
        let (fed, output) = ran.await.map_err(|_| SlurmError::Timeout { command, after: self.timeout })?;
        let output = output.map_err(|source| SlurmError::Io { command, source })?;
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if !output.status.success() {
            let stderr = match stderr.trim() {
                "" => format!("exit status {}", output.status),
                text => clip(text),
            };
            return Err(SlurmError::Failed { command, stderr });
        }
        fed.map_err(|source| SlurmError::Io { command, source })?;
        Ok(Output { stdout: String::from_utf8_lossy(&output.stdout).into_owned(), stderr })
    }
}

/// Job names show in squeue and parse_scontrol reads past them: no spaces, no odd characters.
fn clean_job_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .take(100)
        .map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' })
        .collect();
    if clean.is_empty() { "lachesis".into() } else { clean }
}

/// Long command output cut down for an error message (the end is where the reason is).
fn clip(text: &str) -> String {
    const MAX: usize = 500;
    let text = text.trim();
    match text.char_indices().rev().nth(MAX) {
        Some((at, _)) => format!("…{}", &text[at..]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::script::quote;
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

    #[test]
    fn job_ids() {
        assert_eq!("123\n".parse::<SlurmJobId>().unwrap(), SlurmJobId(123));
        assert_eq!("123;cluster".parse::<SlurmJobId>().unwrap(), SlurmJobId(123));
        for bad in ["", "0", "-1", "+5", "12a", "abc", "99999999999999999999999"] {
            assert!(bad.parse::<SlurmJobId>().is_err(), "{bad}");
        }
        assert_eq!(serde_json::to_string(&SlurmJobId(42)).unwrap(), "42");
        assert_eq!(serde_json::from_str::<SlurmJobId>("42").unwrap(), SlurmJobId(42));
    }

    #[test]
    fn options_become_sbatch_args_with_stage_options_last() {
        let yaml = "partition: gpu\ntime_limit: '4:00:00'\nsbatch_options: [--gres=gpu:1]\nstage_options: {trainer: [--mem=64G]}\n";
        let options: SlurmOptions = serde_yaml::from_str(yaml).unwrap();
        assert_eq!(
            options.sbatch_args("trainer"),
            ["--partition=gpu", "--time=4:00:00", "--gres=gpu:1", "--mem=64G"]
        );
        assert_eq!(options.sbatch_args("env"), ["--partition=gpu", "--time=4:00:00", "--gres=gpu:1"]);
        assert!(serde_yaml::from_str::<SlurmOptions>("partitions: gpu\n").is_err());
    }

    fn plan(argv: &[&str]) -> StagePlan {
        StagePlan {
            name: "trainer".into(),
            argv: argv.iter().map(|a| a.to_string()).collect(),
            cwd: PathBuf::from("/runs/r 1"),
            environ: BTreeMap::new(),
            log_path: PathBuf::from("/runs/r 1/trainer.log"),
            start_delay: None,
            probe: None,
            start_timeout: Duration::from_secs(60),
            log_limits: Default::default(),
        }
    }

    /// Runs `script` with bash (not through Slurm) and returns what it printed.
    fn run_bash(script: &BatchScript, cwd: &Path) -> std::process::Output {
        let text = script.text.replace(&quote("/runs/r 1"), &quote(&cwd.to_string_lossy()));
        std::process::Command::new("bash").arg("-c").arg(text).envs(&script.environ).output().unwrap()
    }

    #[test]
    fn the_script_execs_the_stage_with_every_argument_intact() {
        let awkward =
            ["printf", "<%s>\\n", "two words", "it's", "\"dq\"", "$HOME", "`id`", "a\nb", "", "-n", "*"];
        let script = batch_script(&plan(&awkward), None);
        assert!(script.text.starts_with("#!/bin/bash\n"));
        assert!(
            script.text.contains("\ncd -- '/runs/r 1' || exit 126\nexec -- 'printf' "),
            "{}",
            script.text
        );
        assert!(script.environ.is_empty());
        let dir = tempfile::tempdir().unwrap();
        let out = run_bash(&script, dir.path());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "<two words>\n<it's>\n<\"dq\">\n<$HOME>\n<`id`>\n<a\nb>\n<>\n<-n>\n<*>\n"
        );
    }

    #[test]
    fn secrets_in_argv_travel_in_the_environment_not_in_the_script() {
        let mut p = plan(&[
            "train",
            "--api_key",
            "sk-flag-secret",
            "--token=tok-0123456789",
            "--url=http://x?k=tnkr-envsecret",
            "plain",
        ]);
        p.environ.insert("TINKER_API_KEY".into(), "tnkr-envsecret".into());
        let script = batch_script(&p, None);
        for secret in ["sk-flag-secret", "tok-0123456789", "tnkr-envsecret"] {
            assert!(!script.text.contains(secret), "{secret} in:\n{}", script.text);
        }
        assert!(script.text.contains(
            "exec -- 'train' '--api_key' \"$LACHESIS_SECRET_ARG_2\" '--token='\"$LACHESIS_SECRET_ARG_3\" \"$LACHESIS_SECRET_ARG_4\" 'plain'\n"
        ), "{}", script.text);
        assert_eq!(script.environ["LACHESIS_SECRET_ARG_2"], "sk-flag-secret");
        assert_eq!(script.environ["LACHESIS_SECRET_ARG_3"], "tok-0123456789");
        assert_eq!(script.environ["LACHESIS_SECRET_ARG_4"], "--url=http://x?k=tnkr-envsecret");
        // The stage still gets the real values.
        let mut echo = p.clone();
        echo.argv[0] = "echo".into();
        let script = batch_script(&echo, None);
        let dir = tempfile::tempdir().unwrap();
        let out = run_bash(&script, dir.path());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "--api_key sk-flag-secret --token=tok-0123456789 --url=http://x?k=tnkr-envsecret plain\n"
        );
    }

    /// A stand-in for `lachesis redact` (which lives in the CLI): sed replacing one secret.
    fn fake_mask_exe(dir: &Path, secret: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let exe = dir.join("fake-lachesis");
        std::fs::write(
            &exe,
            format!("#!/bin/sh\n[ \"$1\" = redact ] || exit 9\nexec sed -u 's/{secret}/***/g'\n"),
        )
        .unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        exe
    }

    #[test]
    fn the_masked_script_filters_output_and_exits_as_the_stage_did() {
        let dir = tempfile::tempdir().unwrap();
        let exe = fake_mask_exe(dir.path(), "sekrit-value-1");
        let mut p = plan(&["sh", "-c", "echo out $0; echo err sekrit-value-1 >&2; exit 7", "sekrit-value-1"]);
        p.environ.insert("WANDB_API_KEY".into(), "sekrit-value-1".into());
        let script = batch_script(&p, Some(&exe));
        assert!(!script.text.contains("sekrit-value-1"));
        assert!(script.text.contains(&format!("lachesis_mask_exe='{}'\n", exe.display())));
        assert!(
            script.text.contains(
                "exec > >(trap '' TERM INT HUP USR1 USR2; exec \"$lachesis_mask_exe\" redact) 2>&1\n"
            )
        );
        assert!(
            script.text.contains("\n'sh' '-c' \"$LACHESIS_SECRET_ARG_2\" \"$LACHESIS_SECRET_ARG_3\" &\n"),
            "{}",
            script.text
        );
        let out = run_bash(&script, dir.path());
        assert_eq!(out.status.code(), Some(7));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "out ***\nerr ***\n");

        // Killed by a signal: the shell dies of the same one.
        let killed = batch_script(&plan(&["sh", "-c", "kill -TERM $$"]), Some(&exe));
        let out = run_bash(&killed, dir.path());
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(15));

        // A mask filter that cannot run: the stage does not start unmasked.
        let missing = batch_script(&plan(&["echo", "unmasked"]), Some(&dir.path().join("nope")));
        let out = run_bash(&missing, dir.path());
        assert_eq!(out.status.code(), Some(127));
        assert!(out.stdout.is_empty());
        assert!(String::from_utf8_lossy(&out.stderr).contains("is not executable"));
    }

    #[test]
    fn job_names_and_error_text_are_cleaned() {
        assert_eq!(clean_job_name("lachesis-r1 trainer\nJobState=X"), "lachesis-r1_trainer_JobState_X");
        assert_eq!(clean_job_name(""), "lachesis");
        assert_eq!(clip("  short \n"), "short");
        let long = "é".repeat(600);
        assert_eq!(clip(&long).chars().count(), 502);
    }

    #[tokio::test]
    async fn missing_config_and_missing_binaries_are_clear_errors() {
        let slurm = Slurm::with_config("/nonexistent/slurm.conf");
        let err = slurm.query(SlurmJobId(1)).await.unwrap_err();
        assert!(matches!(err, SlurmError::NoConfig(_)), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("slurm.conf");
        std::fs::write(&conf, "").unwrap();
        let slurm = Slurm::with_config(&conf);
        let err = slurm.run("lachesis-no-such-slurm-tool", &[], &BTreeMap::new(), None).await;
        assert!(matches!(err, Err(SlurmError::NotInstalled("lachesis-no-such-slurm-tool"))));
        let err = slurm.cancel(SlurmJobId(1), Some("TERM; rm")).await.unwrap_err();
        assert!(matches!(err, SlurmError::BadSignal(_)), "{err}");
        let err = slurm.submit(&plan(&[]), &SlurmOptions::default(), "x", None).await.unwrap_err();
        assert!(matches!(err, SlurmError::BadPlan { .. }), "{err}");
    }
}
