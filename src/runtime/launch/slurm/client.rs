//! The Slurm cluster, through its command-line tools: `sbatch` submits a stage, `scontrol show
//! job` (then `sacct`) says where a job is, `scancel` stops it.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::records::{SACCT_FORMAT, parse_sacct, parse_scontrol};
use super::script::batch_script;
use super::{JobState, SlurmError, SlurmJobId};
use crate::workflow::{SlurmOptions, StagePlan};

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
    use super::super::script::tests::plan;
    use super::*;

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
