//! The supervisor's figures, measured with a real daemon in a scratch home:
//! exit-detection latency, recovery after SIGKILL, queue throughput through the CLI, idle RSS.
//! It prints figures; it passes or fails nothing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use lachesis::model::RunQuery;
use lachesis::model::{EventKind, RunState};
use lachesis::service::Service;
use lachesis::settings::Settings;

/// A daemon the bench started: killed and reaped when dropped, so a figure that fails half-way
/// leaves no process behind.
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `lachesis` on the scratch home `home`, with `token` as its API token, nothing of the
/// caller's store or workflows.
pub fn cli_with_token(exe: &Path, home: &Path, token: &str) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env("LACHESIS_HOME", home)
        .env("LACHESIS_API_TOKEN", token)
        .env_remove("LACHESIS_DATABASE_URL")
        .env_remove("LACHESIS_WORKFLOWS");
    cmd
}

/// A daemon on `home` with `args`, serving HTTP on a free local port with `token`, its log in
/// `home/daemon.log`; returned once it answers `/health`, with its base URL and a client.
pub async fn listening_daemon(
    exe: &Path,
    home: &Path,
    token: &str,
    args: &[&str],
) -> BenchResult<(Daemon, String, reqwest::Client)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr = format!("127.0.0.1:{port}");
    let log = std::fs::OpenOptions::new().create(true).append(true).open(home.join("daemon.log"))?;
    let daemon = Daemon(
        cli_with_token(exe, home, token)
            .env("LACHESIS_LOG", "warn")
            .arg("daemon")
            .args(args)
            .args(["--listen", &addr])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?,
    );
    let base = format!("http://{addr}");
    let http = lachesis::http_client::builder().no_proxy().build()?;
    wait_healthy(&http, &base, token, home).await?;
    Ok((daemon, base, http))
}

/// Waits for a daemon at `base` to answer `/health` with `token`, for 30 s at most; after that,
/// the error carries its log (`daemon.log` in `home`).
async fn wait_healthy(http: &reqwest::Client, base: &str, token: &str, home: &Path) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !http
        .get(format!("{base}/health"))
        .bearer_auth(token)
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(home.join("daemon.log")).unwrap_or_default();
            return Err(format!("the daemon did not start; its log:\n{log}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Runs of `true` queued through the CLI for the throughput figure.
    pub runs: usize,
    /// Runs allowed at once during the throughput figure.
    pub parallel: usize,
    /// Live runs when the daemon is killed, for the recovery figure.
    pub live: usize,
    /// Stage exits timed for the latency figure.
    pub exits: usize,
    /// CLI processes submitting at once during the throughput figure.
    pub submitters: usize,
    /// A pueue client (with pueued beside it): the throughput figure through it too.
    pub pueue: Option<PathBuf>,
}

#[derive(Debug, Default, Serialize)]
pub struct BenchReport {
    pub exit_detection_ms: Percentiles,
    pub recovery_ms: f64,
    pub recovered_runs: usize,
    pub throughput_runs_per_s: f64,
    pub throughput_runs: usize,
    pub submitters: usize,
    /// From the first claim to the last completion while the CLI submits.
    pub daemon_runs_per_s: f64,
    /// The daemon draining the same number of runs queued before it started.
    pub drain_runs_per_s: f64,
    pub submit_ms_per_run: f64,
    pub idle_rss_mb: f64,
    /// The throughput figure through pueue, when asked for (`--pueue`).
    pub pueue: Option<super::pueue::PueueReport>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Percentiles {
    pub samples: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub(crate) fn of(mut samples: Vec<f64>) -> Percentiles {
        samples.sort_by(f64::total_cmp);
        let at =
            |q: f64| samples.get(((samples.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
        Percentiles { samples: samples.len(), p50: at(0.5), p90: at(0.9), p99: at(0.99), max: at(1.0) }
    }
}

pub(crate) type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// A scratch home with a daemon of its own.
struct Lab {
    home: PathBuf,
    exe: PathBuf,
    daemon: Option<Child>,
    service: Service,
}

impl Lab {
    /// A new home inside `scratch`. Homes are removed together when the bench ends: deleting
    /// thousands of run files between figures would tax the next figure's file creations (ext4
    /// skips recently freed inodes, at a quarter of the CPU of a drain measured right after).
    async fn new(exe: &Path, scratch: &tempfile::TempDir) -> BenchResult<Lab> {
        let home = tempfile::Builder::new().prefix("lab").tempdir_in(scratch.path())?.keep();
        std::fs::create_dir_all(home.join("workflows"))?;
        std::fs::write(
            home.join("workflows/one.yaml"),
            "name: one\nstages:\n  - {name: main, argv: [\"true\"]}\n",
        )?;
        std::fs::write(
            home.join("workflows/sleeper.yaml"),
            "name: sleeper\nstop_grace: 2s\nstages:\n  - {name: main, argv: [sleep, \"600\"]}\n",
        )?;
        let service = Service::open(Settings::new(Some(home.clone()), None)).await?;
        Ok(Lab { home, exe: exe.to_path_buf(), daemon: None, service })
    }

    fn cli(&self) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.env("LACHESIS_HOME", &self.home)
            .env_remove("LACHESIS_DATABASE_URL")
            .env_remove("LACHESIS_WORKFLOWS");
        cmd
    }

    fn start_daemon(&mut self, parallel: usize) -> BenchResult<()> {
        let child = self
            .cli()
            .args(["daemon", "--max-parallel", &parallel.to_string(), "--stop-grace", "2s"])
            .env("LACHESIS_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(self.home.join("daemon.log"))?)
            .spawn()?;
        self.daemon = Some(child);
        Ok(())
    }

    fn kill_daemon(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn submit(&self, workflow: &str) -> BenchResult<()> {
        let out = self.cli().args(["run", "start", "--workflow", workflow]).stdin(Stdio::null()).output()?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string().into());
        }
        Ok(())
    }

    /// A cheap count (no rows parsed), so polling it doesn't eat the CPU being measured.
    async fn count(&self, state: RunState) -> BenchResult<usize> {
        let counts = self.service.run_counts().await?;
        Ok(counts.get(state) as usize)
    }

    async fn wait_count(&self, state: RunState, n: usize, limit: Duration) -> BenchResult<Instant> {
        let deadline = Instant::now() + limit;
        loop {
            if self.count(state).await? >= n {
                return Ok(Instant::now());
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.home.join("daemon.log")).unwrap_or_default();
                return Err(format!("timed out waiting for {n} {state} runs; daemon log:\n{log}").into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.kill_daemon();
    }
}

pub async fn run(exe: &Path, options: &BenchOptions, progress: &dyn Fn(&str)) -> BenchResult<BenchReport> {
    let mut report = BenchReport::default();
    let scratch = tempfile::Builder::new().prefix("lachesis-bench").tempdir()?;

    // Idle RSS and exit detection: one daemon, runs of `true` one at a time.
    {
        let mut lab = Lab::new(exe, &scratch).await?;
        lab.start_daemon(8)?;
        wait_for_socket(&lab.home)?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        report.idle_rss_mb = lab.daemon.as_ref().map_or(0.0, |d| rss_mb(d.id()));
        progress(&format!("idle RSS {:.1} MB; timing {} stage exits", report.idle_rss_mb, options.exits));
        for i in 0..options.exits {
            lab.submit("one")?;
            lab.wait_count(RunState::Completed, i + 1, Duration::from_secs(30)).await?;
        }
        let mut samples = Vec::new();
        for run in lab.service.runs(&RunQuery::default()).await? {
            let stages = lab.service.run_status(&run.id.to_string()).await?.stages;
            let events = lab.service.events_after(run.id, 0).await?;
            let exited =
                events.iter().find(|e| e.kind == EventKind::Stage && e.message.starts_with("exited"));
            if let (Some(ended), Some(event)) = (stages[0].record.ended_at, exited) {
                samples.push((event.at - ended) as f64);
            }
        }
        report.exit_detection_ms = Percentiles::of(samples);
    }

    // Recovery: SIGKILL the daemon with `live` runs up, time the next daemon re-attaching all.
    {
        let mut lab = Lab::new(exe, &scratch).await?;
        progress(&format!("starting {} live runs", options.live));
        for _ in 0..options.live {
            lab.submit("sleeper")?;
        }
        lab.start_daemon(options.live)?;
        lab.wait_count(RunState::Running, options.live, Duration::from_secs(120)).await?;
        lab.kill_daemon();
        let begun = Instant::now();
        lab.start_daemon(options.live)?;
        let deadline = begun + Duration::from_secs(60);
        let runs = lab.service.runs(&RunQuery { state: Some(RunState::Running), limit: None }).await?;
        let mut pending: Vec<_> = runs.iter().map(|r| r.id).collect();
        while !pending.is_empty() {
            let mut still = Vec::new();
            for id in pending {
                let events = lab.service.events_after(id, 0).await?;
                if !events.iter().any(|e| e.message.starts_with("re-attached")) {
                    still.push(id);
                }
            }
            pending = still;
            if Instant::now() > deadline {
                return Err(format!("{} runs not re-attached after 60 s", pending.len()).into());
            }
            if !pending.is_empty() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        report.recovery_ms = begun.elapsed().as_secs_f64() * 1000.0;
        report.recovered_runs = runs.len();
        progress(&format!("re-attached {} runs in {:.0} ms; stopping them", runs.len(), report.recovery_ms));
        for run in &runs {
            lab.service.stop_run(&run.id.to_string()).await?;
        }
        lab.wait_count(RunState::Stopped, runs.len(), Duration::from_secs(60)).await?;
    }

    // Throughput: `runs` submissions through the CLI, `parallel` at once, until the last ends.
    let submitters = options.submitters.max(1);
    {
        let mut lab = Lab::new(exe, &scratch).await?;
        lab.start_daemon(options.parallel)?;
        wait_for_socket(&lab.home)?;
        progress(&format!(
            "queueing {} runs through the CLI ({submitters} submitting at once), {} running at once",
            options.runs, options.parallel
        ));
        let begun = Instant::now();
        submit_in_loops(options.runs, submitters, &|| lab.submit("one").map_err(|e| e.to_string()))?;
        report.submit_ms_per_run = begun.elapsed().as_secs_f64() * 1000.0 / options.runs as f64;
        let done = lab.wait_count(RunState::Completed, options.runs, Duration::from_secs(600)).await?;
        let failed = lab.count(RunState::Failed).await?;
        if failed > 0 {
            return Err(format!("{failed} runs failed during the throughput figure").into());
        }
        report.throughput_runs = options.runs;
        report.submitters = submitters;
        report.throughput_runs_per_s = options.runs as f64 / (done - begun).as_secs_f64();
        let runs = lab.service.runs(&RunQuery::default()).await?;
        let first = runs.iter().filter_map(|r| r.started_at).min().unwrap_or(0);
        let last = runs.iter().filter_map(|r| r.ended_at).max().unwrap_or(0);
        report.daemon_runs_per_s = options.runs as f64 / ((last - first).max(1) as f64 / 1000.0);
    }

    // The daemon alone: the same runs queued first (no CLI competing for the CPU), then drained.
    {
        let mut lab = Lab::new(exe, &scratch).await?;
        progress(&format!("queueing {} runs, then timing the daemon draining them", options.runs));
        for _ in 0..options.runs {
            lab.submit("one")?;
        }
        lab.start_daemon(options.parallel)?;
        lab.wait_count(RunState::Completed, options.runs, Duration::from_secs(600)).await?;
        let runs = lab.service.runs(&RunQuery::default()).await?;
        let first = runs.iter().filter_map(|r| r.started_at).min().unwrap_or(0);
        let last = runs.iter().filter_map(|r| r.ended_at).max().unwrap_or(0);
        report.drain_runs_per_s = options.runs as f64 / ((last - first).max(1) as f64 / 1000.0);
    }

    // Last: removing pueue's scratch directory (a log file per task) would tax the file
    // creations of any figure after it, as the homes' removal would (see `Lab::new`).
    if let Some(client) = &options.pueue {
        let runs = options.runs;
        report.pueue = Some(super::pueue::throughput(client, runs, options.parallel, submitters, progress)?);
    }
    Ok(report)
}

/// Calls `submit_run` `runs` times in all from `submitters` loops at once, each waiting for its
/// last call before the next, as that many shell loops would.
pub(super) fn submit_in_loops(
    runs: usize,
    submitters: usize,
    submit: &(dyn Fn() -> Result<(), String> + Sync),
) -> BenchResult<()> {
    std::thread::scope(|scope| {
        let loops: Vec<_> = (0..submitters)
            .map(|first| scope.spawn(move || (first..runs).step_by(submitters).try_for_each(|_| submit())))
            .collect();
        for each in loops {
            each.join().map_err(|_| "a submitting loop panicked")??;
        }
        Ok(())
    })
}

pub(super) fn wait_for_socket(home: &Path) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    // The API socket too: until it is there, `run start` writes the store itself.
    while !home.join("daemon.sock").exists() || !home.join("api.sock").exists() {
        if Instant::now() > deadline {
            return Err("the daemon did not start".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

pub(super) fn rss_mb(pid: u32) -> f64 {
    status_mb(pid, "VmRSS:")
}

/// A memory figure of /proc/PID/status (`VmRSS:`, `VmHWM:`), in MB; 0 when it cannot be read.
pub(super) fn status_mb(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

#[derive(Debug, Default, Serialize)]
pub struct HttpReport {
    pub rate: u32,
    pub seconds: u64,
    pub requests: usize,
    pub errors: usize,
    pub latency_ms: Percentiles,
    /// Runs started (and stopped) meanwhile.
    pub runs_churned: usize,
}

/// `rate` status requests per second for `seconds` against the HTTP API on loopback, while
/// runs start and stop in the background.
pub async fn http_load(
    exe: &Path,
    rate: u32,
    seconds: u64,
    progress: &dyn Fn(&str),
) -> BenchResult<HttpReport> {
    let scratch = tempfile::Builder::new().prefix("lachesis-bench").tempdir()?;
    let mut lab = Lab::new(exe, &scratch).await?;
    std::fs::write(
        lab.home.join("workflows/churn.yaml"),
        "name: churn\nstop_grace: 1s\nstages:\n  - {name: api, argv: [sleep, \"30\"]}\n  - {name: main, argv: [sleep, \"0.5\"]}\n",
    )?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = lab
        .cli()
        .args(["daemon", "--max-parallel", "8", "--listen", &format!("127.0.0.1:{port}")])
        .env("LACHESIS_LOG", "warn")
        .env_remove("LACHESIS_API_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::OpenOptions::new().create(true).append(true).open(lab.home.join("daemon.log"))?)
        .spawn()?;
    lab.daemon = Some(child);
    let base = format!("http://127.0.0.1:{port}");
    // The bench's scratch daemon makes its API token in the scratch home on first start.
    let token_file = lachesis::api::token_path(&lab.home);
    let deadline = Instant::now() + Duration::from_secs(10);
    let token = loop {
        // Created, then written: wait for the whole token.
        match std::fs::read_to_string(&token_file) {
            Ok(text) if text.ends_with('\n') => break text,
            _ if Instant::now() > deadline => return Err("the HTTP API did not come up".into()),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    let mut auth = reqwest::header::HeaderValue::from_str(&format!("Bearer {}", token.trim()))?;
    auth.set_sensitive(true);
    let headers = reqwest::header::HeaderMap::from_iter([(reqwest::header::AUTHORIZATION, auth)]);
    let http = lachesis::http_client::builder()
        .no_proxy()
        .pool_max_idle_per_host(64)
        .default_headers(headers)
        .build()?;
    while !http.get(format!("{base}/health")).send().await.is_ok_and(|r| r.status().is_success()) {
        if Instant::now() > deadline {
            return Err("the HTTP API did not come up".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let run = lab
        .service
        .submit_run(lachesis::service::RunRequest { workflow: Some("churn".into()), ..Default::default() })
        .await?;
    let target = format!("{base}/runs/{}", run.id);

    // Churn: start a run and stop the previous one, every 200 ms, through the same API.
    let churn_http = http.clone();
    let churn_base = base.clone();
    let churn = tokio::spawn(async move {
        let mut previous: Option<String> = None;
        let mut count = 0;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let body = serde_json::json!({ "workflow": "churn" });
            if let Ok(resp) = churn_http.post(format!("{churn_base}/runs")).json(&body).send().await
                && let Ok(run) = resp.json::<serde_json::Value>().await
            {
                count += 1;
                if let Some(prev) = previous.replace(run["id"].as_str().unwrap_or_default().to_string()) {
                    let _ = churn_http.post(format!("{churn_base}/runs/{prev}/stop")).send().await;
                }
            }
            if count > 10_000 {
                return count;
            }
        }
    });

    progress(&format!("{rate} status requests/s for {seconds} s while runs start and stop"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Option<f64>>();
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1) as f64));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let total = rate as u64 * seconds;
    for _ in 0..total {
        ticker.tick().await;
        let (http, target, tx) = (http.clone(), target.clone(), tx.clone());
        tokio::spawn(async move {
            let begun = Instant::now();
            let ok = http.get(&target).send().await.is_ok_and(|r| r.status().is_success());
            let _ = tx.send(ok.then(|| begun.elapsed().as_secs_f64() * 1000.0));
        });
    }
    drop(tx);
    let mut samples = Vec::new();
    let mut errors = 0;
    while let Some(result) = rx.recv().await {
        match result {
            Some(ms) => samples.push(ms),
            None => errors += 1,
        }
    }
    churn.abort();
    let runs_churned = lab.service.runs(&RunQuery::default()).await?.len();
    Ok(HttpReport {
        rate,
        seconds,
        requests: samples.len() + errors,
        errors,
        latency_ms: Percentiles::of(samples),
        runs_churned,
    })
}
