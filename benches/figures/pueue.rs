//! `--pueue PATH` (the figures bench): the throughput figure once more through pueue, a well-known
//! local task queue, in the same bench run: figures of two tools compare only when measured
//! on one machine at one moment (these VMs' speed moves by a third within a day). Only the
//! bench uses it, and only when asked; nothing else needs pueue.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::supervisor::{BenchResult, submit_in_loops};

/// The same figure as lachesis's throughput: `runs` tasks of `true` added one command at a
/// time from `submitters` loops, `parallel` running at once, first add to last end.
#[derive(Debug, Default, Serialize)]
pub struct PueueReport {
    /// What `pueue --version` printed.
    pub version: String,
    pub runs: usize,
    pub submitters: usize,
    pub runs_per_s: f64,
    pub add_ms_per_run: f64,
}

/// The `pueued` beside the `client`; an error unless both are files.
pub fn daemon_beside(client: &Path) -> BenchResult<PathBuf> {
    let pueued = client.with_file_name("pueued");
    if !client.is_file() || !pueued.is_file() {
        return Err(format!(
            "--pueue {}: expected the pueue client there and pueued beside it",
            lachesis::text::one_line(&client.to_string_lossy())
        )
        .into());
    }
    Ok(pueued)
}

/// A pueue daemon in a scratch directory, killed when dropped.
struct Pueue {
    client: PathBuf,
    config: PathBuf,
    daemon: Child,
    _scratch: tempfile::TempDir,
}

impl Pueue {
    /// Starts `pueued` (found beside the `client`) and waits until it answers.
    fn start(client: &Path, parallel: usize) -> BenchResult<Pueue> {
        let pueued = daemon_beside(client)?;
        let scratch = tempfile::Builder::new().prefix("lachesis-bench-pueue").tempdir()?;
        let (data, runtime) = (scratch.path().join("data"), scratch.path().join("run"));
        std::fs::create_dir_all(&data)?;
        std::fs::create_dir_all(&runtime)?;
        let config = scratch.path().join("pueue.yml");
        // JSON is YAML: the paths are quoted whatever they hold.
        let yaml = serde_json::json!({
            "shared": { "pueue_directory": data, "runtime_directory": runtime, "use_unix_socket": true },
        });
        std::fs::write(&config, yaml.to_string())?;
        let daemon = Command::new(&pueued)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let pueue = Pueue { client: client.to_path_buf(), config, daemon, _scratch: scratch };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !pueue.command().arg("status").output().is_ok_and(|out| out.status.success()) {
            if Instant::now() > deadline {
                return Err("pueued did not answer within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        pueue.succeed(&["parallel", &parallel.to_string()])?;
        Ok(pueue)
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.client);
        cmd.arg("--config").arg(&self.config).stdin(Stdio::null());
        cmd
    }

    /// Runs a client command; its output when it succeeds.
    fn succeed(&self, args: &[&str]) -> BenchResult<Vec<u8>> {
        let out = self.command().args(args).output()?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("no message");
            return Err(format!("pueue {}: {first}", args.join(" ")).into());
        }
        Ok(out.stdout)
    }

    /// The tasks' end times (milliseconds since the epoch) once all `runs` have ended.
    fn ends_when_done(&self, runs: usize, limit: Duration) -> BenchResult<Vec<i64>> {
        let deadline = Instant::now() + limit;
        loop {
            let status: serde_json::Value = serde_json::from_slice(&self.succeed(&["status", "--json"])?)?;
            let ends = task_ends(&status)?;
            if ends.len() >= runs {
                return Ok(ends);
            }
            if Instant::now() > deadline {
                return Err(format!("pueue finished {} of {runs} tasks in {limit:?}", ends.len()).into());
            }
            // The end times come from the tasks: polling slowly costs no accuracy, only less
            // CPU taken from pueued.
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Pueue {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// End times of the finished tasks in a `pueue status --json`; a task that failed is an error,
/// since the figure counts runs of `true` that succeeded.
fn task_ends(status: &serde_json::Value) -> BenchResult<Vec<i64>> {
    let tasks = status["tasks"].as_object().ok_or("pueue status --json has no tasks")?;
    let mut ends = Vec::new();
    for (id, task) in tasks {
        let Some(done) = task["status"].get("Done") else { continue };
        if done["result"] != "Success" {
            return Err(format!("pueue task {id} did not succeed: {}", done["result"]).into());
        }
        let end = done["end"].as_str().ok_or("a finished pueue task has no end time")?;
        ends.push(chrono::DateTime::parse_from_rfc3339(end)?.timestamp_millis());
    }
    Ok(ends)
}

/// The throughput figure through pueue at `client`, as the figures bench measures its own.
pub fn throughput(
    client: &Path,
    runs: usize,
    parallel: usize,
    submitters: usize,
    progress: &dyn Fn(&str),
) -> BenchResult<PueueReport> {
    let pueue = Pueue::start(client, parallel)?;
    let version = String::from_utf8_lossy(&pueue.succeed(&["--version"])?).trim().to_string();
    progress(&format!(
        "the same through {version}: {runs} adds ({submitters} adding at once), {parallel} running at once"
    ));
    let first_add = lachesis::model::now_millis();
    let begun = Instant::now();
    submit_in_loops(runs, submitters, &|| {
        pueue.succeed(&["add", "--", "true"]).map(drop).map_err(|e| e.to_string())
    })?;
    let add_ms_per_run = begun.elapsed().as_secs_f64() * 1000.0 / runs.max(1) as f64;
    let ends = pueue.ends_when_done(runs, Duration::from_secs(1800))?;
    let last_end = ends.into_iter().max().unwrap_or(first_add);
    Ok(PueueReport {
        version,
        runs,
        submitters,
        runs_per_s: runs as f64 / ((last_end - first_add).max(1) as f64 / 1000.0),
        add_ms_per_run,
    })
}
