//! The big-log figures: a live stage whose log is 10 GB (a sparse file with real lines at its
//! end), read through every surface (results, HTTP logs, the dashboard's run page, `run logs
//! --tail`) while short runs start and end; the daemon's peak RSS; and exit detection of the
//! short runs with and without the reads going on.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use lachesis::model::RunState;
use lachesis::service::{RunRequest, Service};
use lachesis::settings::Settings;

use super::supervisor::{BenchResult, Daemon, Percentiles};

const TOKEN: &str = "lachesis-bench-logs-token";

#[derive(Debug, Default, Serialize)]
pub struct LogsReport {
    pub log_bytes: u64,
    pub rounds: usize,
    /// Per surface, each read of the big log's run.
    pub results_ms: Percentiles,
    pub http_logs_ms: Percentiles,
    pub dashboard_run_ms: Percentiles,
    /// A whole `lachesis run logs ID --tail 200` process.
    pub cli_tail_ms: Percentiles,
    /// The daemon's peak RSS (VmHWM) over the whole bench.
    pub daemon_peak_rss_mb: f64,
    /// Stage exit to a client seeing the run ended, for runs of `true`.
    pub exit_detection_ms: Percentiles,
    pub exit_detection_while_reading_ms: Percentiles,
}

struct Lab {
    _dir: tempfile::TempDir,
    home: PathBuf,
    exe: PathBuf,
    _daemon: Daemon,
    service: Service,
}

fn peak_rss_mb(pid: u32) -> f64 {
    super::supervisor::status_mb(pid, "VmHWM:")
}

impl Lab {
    async fn start(exe: &Path) -> BenchResult<(Lab, u32, String)> {
        let dir = tempfile::Builder::new().prefix("lachesis-bench").tempdir()?;
        let home = dir.path().to_path_buf();
        std::fs::create_dir_all(home.join("workflows"))?;
        std::fs::write(
            home.join("workflows/big.yaml"),
            "name: big\nstop_grace: 2s\nstages:\n  - {name: trainer, argv: [sh, -c, \"echo started; exec sleep 3600\"]}\n",
        )?;
        std::fs::write(
            home.join("workflows/one.yaml"),
            "name: one\nstages:\n  - {name: main, argv: [\"true\"]}\n",
        )?;
        let service = Service::open(Settings::new(Some(home.clone()), None)).await?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(home.join("daemon.log"))?;
        let child = Command::new(exe)
            .env("LACHESIS_HOME", &home)
            .env("LACHESIS_API_TOKEN", TOKEN)
            .env_remove("LACHESIS_DATABASE_URL")
            .env_remove("LACHESIS_WORKFLOWS")
            .env("LACHESIS_LOG", "warn")
            .args(["daemon", "--max-parallel", "8", "--stop-grace", "2s", "--listen", &addr])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        let pid = child.id();
        let lab = Lab { _dir: dir, home, exe: exe.to_path_buf(), _daemon: Daemon(child), service };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(&addr).is_err() {
            if Instant::now() > deadline {
                return Err("the daemon did not start".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok((lab, pid, format!("http://{addr}")))
    }

    async fn submit(&self, workflow: &str) -> BenchResult<uuid::Uuid> {
        let request = RunRequest { workflow: Some(workflow.into()), ..RunRequest::default() };
        Ok(self.service.submit_run(request).await?.id)
    }
}

/// Stage exit (as its shim saw it) to a client seeing the run ended, for `n` runs of `true`.
/// (A run's recorded end is its exit's time, so it is when a client sees it that shows a daemon
/// too busy to notice.) Polled every 2 ms.
async fn exit_detection(
    service: &Service,
    submit: impl AsyncFn() -> BenchResult<uuid::Uuid>,
    n: usize,
) -> BenchResult<Percentiles> {
    let mut samples = Vec::new();
    for _ in 0..n {
        let id = submit().await?.to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = service.run_status(&id).await?;
            if status.run.state.is_terminal() {
                let seen = lachesis::model::now_millis();
                let exit_at = status.stages[0].record.ended_at.unwrap_or(seen);
                samples.push((seen - exit_at) as f64);
                break;
            }
            if Instant::now() > deadline {
                return Err("a run of `true` did not end".into());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    Ok(Percentiles::of(samples))
}

pub async fn run(exe: &Path, log_bytes: u64, exits: usize, say: &dyn Fn(&str)) -> BenchResult<LogsReport> {
    let (lab, pid, base) = Lab::start(exe).await?;
    let mut report = LogsReport { log_bytes, ..LogsReport::default() };

    let id = lab.submit("big").await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while lab.service.run_status(&id.to_string()).await?.run.state != RunState::Running {
        if Instant::now() > deadline {
            return Err("the big-log run did not start".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log_path = lab.service.run_status(&id.to_string()).await?.stages[0].log_path.clone();
    say(&format!(
        "growing {} to {} (sparse)",
        log_path.display(),
        lachesis::launch::space::human_bytes(log_bytes)
    ));
    {
        let mut log = std::fs::OpenOptions::new().append(true).open(&log_path)?;
        log.set_len(log_bytes)?;
        for step in 0..1000 {
            writeln!(log, "Step {step}/1000 loss 0.{step:04} reward 0.5")?;
        }
        writeln!(log, "saved weights tinker://bench/final")?;
    }

    say(&format!("exit detection alone ({exits} runs of `true`)"));
    report.exit_detection_ms = exit_detection(&lab.service, async || lab.submit("one").await, exits).await?;

    say("reads of the big log through every surface, while the runs of `true` go on");
    let http = lachesis::http_client::builder().no_proxy().build()?;
    let run_id = id.to_string();
    let exits_done = std::sync::atomic::AtomicBool::new(false);
    let reads = async {
        let (mut results, mut logs, mut page, mut cli) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // At least 20 rounds, and on until the exits are timed.
        while results.len() < 20 || !exits_done.load(std::sync::atomic::Ordering::Relaxed) {
            results.push(super::timed_get(&http, TOKEN, &format!("{base}/runs/{run_id}/results")).await?);
            logs.push(super::timed_get(&http, TOKEN, &format!("{base}/runs/{run_id}/logs")).await?);
            page.push(super::timed_get(&http, TOKEN, &format!("{base}/ui/runs/{run_id}")).await?);
            let start = Instant::now();
            let out = tokio::process::Command::new(&lab.exe)
                .env("LACHESIS_HOME", &lab.home)
                .env_remove("LACHESIS_DATABASE_URL")
                .args(["run", "logs", &run_id, "--tail", "200"])
                .stdin(Stdio::null())
                .output()
                .await?;
            if !out.status.success() || out.stdout.is_empty() {
                return Err(format!("run logs --tail: {}", String::from_utf8_lossy(&out.stderr)).into());
            }
            cli.push(start.elapsed().as_secs_f64() * 1000.0);
        }
        BenchResult::Ok((results, logs, page, cli))
    };
    let exited = async {
        let timed = exit_detection(&lab.service, async || lab.submit("one").await, exits).await;
        exits_done.store(true, std::sync::atomic::Ordering::Relaxed);
        timed
    };
    let (read, exited) = tokio::join!(reads, exited);
    let (results, logs, page, cli) = read?;
    report.rounds = results.len();
    report.results_ms = Percentiles::of(results);
    report.http_logs_ms = Percentiles::of(logs);
    report.dashboard_run_ms = Percentiles::of(page);
    report.cli_tail_ms = Percentiles::of(cli);
    report.exit_detection_while_reading_ms = exited?;
    report.daemon_peak_rss_mb = peak_rss_mb(pid);
    // Its stage must not outlive the bench: stopped while the daemon is still there.
    lab.service.stop_run(&run_id).await?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while !lab.service.run_status(&run_id).await?.run.state.is_terminal() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(report)
}
