//! Progress figures: the daemon's CPU with many runs polled over HTTP against idle, the delay
//! from a stall deadline to the run's `failed` commit, and the log follower's throughput (and
//! exit detection while it follows a log written as fast as a shell can).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use lachesis::model::RunQuery;
use lachesis::model::RunState;
use lachesis::service::{RunRequest, Service};
use lachesis::settings::Settings;

use super::supervisor::{BenchResult, Daemon, Percentiles};

#[derive(Debug, Default, Serialize)]
pub struct ProgressReport {
    pub polled_runs: usize,
    pub poll_every_s: u64,
    pub window_s: u64,
    /// Daemon CPU, percent of one core.
    pub idle_cpu_pct: f64,
    pub polled_cpu_pct: f64,
    /// HTTP progress readings served meanwhile.
    pub readings: u64,
    pub stalled_runs: usize,
    /// From each run's stall deadline to its `failed` commit.
    pub stall_delay_ms: Percentiles,
    /// Lines read and matched by the follower, per second (in-process).
    pub follower_lines_per_s: f64,
    pub follower_lines: usize,
    /// Exit detection of runs of `true`, alone and while a followed log grows as fast as `yes` writes.
    pub exit_detection_ms: Percentiles,
    pub exit_detection_while_following_ms: Percentiles,
}

struct Lab {
    _dir: tempfile::TempDir,
    home: PathBuf,
    exe: PathBuf,
    daemon: Option<Daemon>,
    service: Service,
}

impl Lab {
    async fn new(exe: &Path, workflows: &[(&str, String)]) -> BenchResult<Lab> {
        let dir = tempfile::Builder::new().prefix("lachesis-bench").tempdir()?;
        let home = dir.path().to_path_buf();
        std::fs::create_dir_all(home.join("workflows"))?;
        for (name, text) in workflows {
            std::fs::write(home.join(format!("workflows/{name}.yaml")), text)?;
        }
        let service = Service::open(Settings::new(Some(home.clone()), None)).await?;
        Ok(Lab { _dir: dir, home, exe: exe.to_path_buf(), daemon: None, service })
    }

    fn start_daemon(&mut self, parallel: usize) -> BenchResult<u32> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.home.join("daemon.log"))?;
        let child = Command::new(&self.exe)
            .env("LACHESIS_HOME", &self.home)
            .env_remove("LACHESIS_DATABASE_URL")
            .env_remove("LACHESIS_WORKFLOWS")
            .env("LACHESIS_LOG", "warn")
            .args(["daemon", "--max-parallel", &parallel.to_string(), "--stop-grace", "2s"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        let pid = child.id();
        self.daemon = Some(Daemon(child));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.home.join("daemon.sock").exists() {
            if Instant::now() > deadline {
                return Err("the daemon did not start".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(pid)
    }

    async fn submit(&self, workflow: &str) -> BenchResult<uuid::Uuid> {
        let request = RunRequest { workflow: Some(workflow.into()), ..RunRequest::default() };
        Ok(self.service.submit_run(request).await?.id)
    }

    async fn wait_count(&self, state: RunState, n: usize, limit: Duration) -> BenchResult<()> {
        let deadline = Instant::now() + limit;
        loop {
            let counts = self.service.run_counts().await?;
            if counts.get(state) as usize >= n {
                return Ok(());
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.home.join("daemon.log")).unwrap_or_default();
                return Err(format!("timed out waiting for {n} {state} runs; daemon log:\n{log}").into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop_all(&self) -> BenchResult<()> {
        for run in self.service.runs(&RunQuery { state: Some(RunState::Running), limit: None }).await? {
            let _ = self.service.stop_run(&run.id.to_string()).await;
        }
        Ok(())
    }
}

/// The process's user + system CPU time so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = procfs::process::Process::new(pid as i32).and_then(|p| p.stat());
    let ticks = stat.map_or(0, |s| s.utime + s.stime);
    Duration::from_secs_f64(ticks as f64 / procfs::ticks_per_second() as f64)
}

async fn cpu_pct_over(pid: u32, window: Duration) -> f64 {
    let (before, start) = (cpu_time(pid), Instant::now());
    tokio::time::sleep(window).await;
    (cpu_time(pid) - before).as_secs_f64() / start.elapsed().as_secs_f64() * 100.0
}

/// A JSON endpoint like run-api's `/status`, its step rising with each reading.
async fn status_server(readings: Arc<AtomicU64>) -> BenchResult<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let readings = Arc::clone(&readings);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let step = readings.fetch_add(1, Ordering::Relaxed);
                let body = format!("{{\"current_step\": {step}, \"queue_size\": 0}}");
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    Ok(port)
}

pub struct ProgressOptions {
    pub polled_runs: usize,
    pub window: Duration,
    pub stalled_runs: usize,
    pub follower_lines: usize,
    pub exits: usize,
}

pub async fn run(exe: &Path, options: &ProgressOptions, say: &dyn Fn(&str)) -> BenchResult<ProgressReport> {
    let mut report = ProgressReport {
        polled_runs: options.polled_runs,
        poll_every_s: 10,
        window_s: options.window.as_secs(),
        stalled_runs: options.stalled_runs,
        follower_lines: options.follower_lines,
        ..ProgressReport::default()
    };

    // CPU: the same daemon idle, then with every run's progress polled every 10 s.
    {
        let readings = Arc::new(AtomicU64::new(1));
        let port = status_server(Arc::clone(&readings)).await?;
        let polled = format!(
            "name: polled\nstop_grace: 2s\nstages:\n  - {{name: main, argv: [sleep, \"3600\"]}}\nprogress: {{http: \"http://127.0.0.1:{port}/status\", step: /current_step, total: 100000000, every: 10s}}\nstall_timeout: 1h\n"
        );
        let mut lab = Lab::new(exe, &[("polled", polled)]).await?;
        let pid = lab.start_daemon(options.polled_runs + 1)?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        say(&format!("daemon CPU idle over {} s", options.window.as_secs()));
        report.idle_cpu_pct = cpu_pct_over(pid, options.window).await;
        for _ in 0..options.polled_runs {
            lab.submit("polled").await?;
        }
        lab.wait_count(RunState::Running, options.polled_runs, Duration::from_secs(120)).await?;
        // Let the start-up settle (first readings, shims) before measuring.
        tokio::time::sleep(Duration::from_secs(12)).await;
        let before = readings.load(Ordering::Relaxed);
        say(&format!(
            "daemon CPU with {} runs polled every 10 s over {} s",
            options.polled_runs,
            options.window.as_secs()
        ));
        report.polled_cpu_pct = cpu_pct_over(pid, options.window).await;
        report.readings = readings.load(Ordering::Relaxed) - before;
        lab.stop_all().await?;
        lab.wait_count(RunState::Stopped, options.polled_runs, Duration::from_secs(60)).await?;
    }

    // Stall delay: runs that never report a step, all with a 2 s stall timeout.
    {
        let stuck = "name: stuck\nstop_grace: 2s\nstall_timeout: 2s\nstages:\n  - {name: main, argv: [sleep, \"3600\"]}\n";
        let mut lab = Lab::new(exe, &[("stuck", stuck.to_string())]).await?;
        lab.start_daemon(options.stalled_runs + 1)?;
        let mut ids = Vec::new();
        for _ in 0..options.stalled_runs {
            ids.push(lab.submit("stuck").await?);
        }
        say(&format!("{} runs stalling after 2 s", options.stalled_runs));
        lab.wait_count(RunState::Failed, options.stalled_runs, Duration::from_secs(120)).await?;
        let mut delays = Vec::new();
        for id in ids {
            let (run, events) = lab.service.run_events(&id.to_string()).await?;
            let running = events.iter().rev().find(|e| e.to_state == Some(RunState::Running)).map(|e| e.at);
            if let (Some(running), Some(ended)) = (running, run.ended_at) {
                delays.push((ended - (running + 2000)) as f64);
            }
        }
        report.stall_delay_ms = Percentiles::of(delays);
    }

    // The follower alone, in-process: a log of progress and chatter, read and matched.
    {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("trainer.log");
        let mut text = String::with_capacity(options.follower_lines * 40);
        for i in 0..options.follower_lines {
            if i % 10 == 0 {
                text.push_str(&format!("Step {}/{}\n", i / 10, options.follower_lines / 10));
            } else {
                text.push_str(&format!("Loss: 0.{i:06} Reward/mean: 0.5 tokens={i}\n"));
            }
        }
        std::fs::write(&path, text)?;
        let spec: lachesis::workflow::ProgressSpec =
            serde_yaml::from_str(r"{log: {stage: trainer, pattern: 'Step (?P<step>\d+)/(?P<total>\d+)'}}")?;
        let resolved = spec.resolve(&Default::default(), &serde_json::Value::Null, |_| Some(path.clone()))?;
        let mut follower = lachesis::logs::follow::Follower::new(&path);
        let (mut lines, mut last) = (0usize, None);
        let start = Instant::now();
        follower.read_new(|line| {
            lines += 1;
            if let Some(reading) = resolved.read_line(line) {
                last = Some(reading);
            }
        })?;
        report.follower_lines_per_s = lines as f64 / start.elapsed().as_secs_f64();
        say(&format!("follower: {lines} lines, last {last:?}"));
    }

    // Exit detection, alone and while a followed log grows as fast as `yes` can write it.
    {
        let flood = "name: flood\nstop_grace: 2s\nstages:\n  - {name: main, argv: [sh, -c, \"yes 'Step 7/10 loss 0.1' | head -n 20000000; sleep 3600\"]}\nprogress: {log: {stage: main, pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}}\n";
        let one = "name: one\nstages:\n  - {name: main, argv: [\"true\"]}\n";
        let mut lab = Lab::new(exe, &[("flood", flood.to_string()), ("one", one.to_string())]).await?;
        lab.start_daemon(4)?;
        report.exit_detection_ms = exit_detection(&lab, options.exits).await?;
        lab.submit("flood").await?;
        lab.wait_count(RunState::Running, 1, Duration::from_secs(30)).await?;
        say("exit detection while a log floods");
        report.exit_detection_while_following_ms = exit_detection(&lab, options.exits).await?;
        lab.stop_all().await?;
    }
    Ok(report)
}

/// Stage exit (as its shim saw it) to the run's state committed, for `n` runs of `true`.
async fn exit_detection(lab: &Lab, n: usize) -> BenchResult<Percentiles> {
    let mut samples = Vec::new();
    for _ in 0..n {
        let id = lab.submit("one").await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = lab.service.run_status(&id.to_string()).await?;
            if status.run.state.is_terminal() {
                let exit_at = status.stages[0].record.ended_at.unwrap_or_default();
                samples.push((status.run.ended_at.unwrap_or_default() - exit_at) as f64);
                break;
            }
            if Instant::now() > deadline {
                return Err("a run of `true` did not end".into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok(Percentiles::of(samples))
}
