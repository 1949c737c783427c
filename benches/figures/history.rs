//! `--history` (the figures bench): the cost of everyday commands and of an idle daemon with an empty
//! store, then with a long history of finished runs (inserted straight through the store, in
//! batches), on SQLite and, when a server is given, on PostgreSQL.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::Connection;
use uuid::Uuid;

use super::supervisor::{BenchResult, Daemon, Percentiles, rss_mb, wait_for_socket};
use lachesis::model::{EventKind, ProcessState, Run, RunParams, RunState, Stage};
use lachesis::service::Service;
use lachesis::settings::Settings;
use lachesis::workflow::Workflow;

/// Commands timed per figure (the median is reported).
const SAMPLES: usize = 30;
/// Exits timed per store state: a p99 needs more samples than a median.
const EXIT_SAMPLES: usize = 100;
/// Finished runs per insert transaction while filling.
const FILL_BATCH: usize = 1000;

/// One set of figures for one store state.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Figures {
    pub finished_runs: usize,
    /// `run start` wall time (exec to exit), ms.
    pub start_ms: Percentiles,
    /// CPU time of one `run start` (user + system), ms, median.
    pub start_cpu_ms: f64,
    /// `run status <8-char prefix>` wall time, ms.
    pub status_prefix_ms: Percentiles,
    pub status_cpu_ms: f64,
    /// `run list` (first page: 50 rows) wall time, ms.
    pub list_ms: Percentiles,
    pub list_cpu_ms: f64,
    /// Stage exit to state committed, ms.
    pub exit_detection_ms: Percentiles,
    /// Runs of `true` drained by the daemon (claim, start, finish) per second.
    pub claim_runs_per_s: f64,
    /// Daemon CPU while idle, percent of one core.
    pub idle_cpu_percent: f64,
    pub idle_rss_mb: f64,
}

#[derive(Debug, Serialize)]
pub struct BackendReport {
    pub backend: &'static str,
    pub empty: Figures,
    pub full: Figures,
}

#[derive(Debug, Serialize)]
pub struct HistoryReport {
    pub backends: Vec<BackendReport>,
}

/// A scratch home (its store SQLite, or a scratch PostgreSQL database) with a daemon.
struct Lab {
    _dir: tempfile::TempDir,
    home: PathBuf,
    exe: PathBuf,
    database_url: Option<String>,
    daemon: Option<Daemon>,
    service: Service,
}

impl Lab {
    async fn new(exe: &Path, database_url: Option<String>) -> BenchResult<Lab> {
        let dir = tempfile::Builder::new().prefix("lachesis-bench").tempdir()?;
        let home = dir.path().to_path_buf();
        std::fs::create_dir_all(home.join("workflows"))?;
        std::fs::write(
            home.join("workflows/one.yaml"),
            "name: one\nstages:\n  - {name: main, argv: [\"true\"]}\n",
        )?;
        let service = Service::open(Settings::new(Some(home.clone()), database_url.clone())).await?;
        Ok(Lab { _dir: dir, home, exe: exe.to_path_buf(), database_url, daemon: None, service })
    }

    fn cli(&self) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.env("LACHESIS_HOME", &self.home).env_remove("LACHESIS_WORKFLOWS");
        match &self.database_url {
            Some(url) => cmd.env("LACHESIS_DATABASE_URL", url),
            None => cmd.env_remove("LACHESIS_DATABASE_URL"),
        };
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Runs the CLI to the end: (stdout, wall ms, CPU ms).
    fn time(&self, args: &[&str]) -> BenchResult<(String, f64, f64)> {
        let cpu_before = children_cpu_ms();
        let begun = Instant::now();
        let out = self.cli().args(args).output()?;
        let wall = begun.elapsed().as_secs_f64() * 1000.0;
        if !out.status.success() {
            return Err(format!("lachesis {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()).into());
        }
        Ok((String::from_utf8_lossy(&out.stdout).into_owned(), wall, children_cpu_ms() - cpu_before))
    }

    fn start_daemon(&mut self) -> BenchResult<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.home.join("daemon.log"))?;
        let child = self
            .cli()
            .args(["daemon", "--max-parallel", "8", "--stop-grace", "2s"])
            .env("LACHESIS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        self.daemon = Some(Daemon(child));
        wait_for_socket(&self.home)
    }

    fn kill_daemon(&mut self) {
        self.daemon = None;
    }

    async fn count(&self, state: RunState) -> BenchResult<usize> {
        let counts = self.service.run_counts().await?;
        Ok(counts.get(state) as usize)
    }

    /// Waits until no run is queued or in flight. Polls the live states only: counting every
    /// finished run each few milliseconds would load the store being measured (on PostgreSQL,
    /// 50 ms of a core per count at 100,000 runs).
    async fn wait_drained(&self, limit: Duration) -> BenchResult<()> {
        let deadline = Instant::now() + limit;
        while !self.service.live_run_counts().await?.is_empty() {
            if Instant::now() > deadline {
                return Err("timed out waiting for the queued runs to finish".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }

    /// Waits for the queue to drain, then checks that `n` runs have completed in all.
    async fn wait_completed(&self, n: usize, limit: Duration) -> BenchResult<()> {
        self.wait_drained(limit).await?;
        let completed = self.count(RunState::Completed).await?;
        if completed < n {
            return Err(format!("{completed} runs completed, {n} expected: see daemon.log").into());
        }
        Ok(())
    }

    /// Inserts `n` finished runs (two exited stages, a `submitted` event each), `FILL_BATCH` per
    /// transaction, ended a day ago.
    async fn fill(&self, n: usize, progress: &dyn Fn(&str)) -> BenchResult<()> {
        let spec = Workflow::parse(
            Path::new("history.yaml"),
            "name: history\nstages:\n  - {name: api, argv: ['true']}\n  - {name: trainer, argv: ['true']}\n",
        )?;
        let ended = lachesis::model::now_millis() - 86_400_000;
        let mut done = 0;
        while done < n {
            let batch: Vec<(Run, Vec<Stage>)> = (0..FILL_BATCH.min(n - done))
                .map(|_| {
                    let id = Uuid::new_v4();
                    let queued = Run::queued(
                        id,
                        spec.clone(),
                        self.home.join("runs").join(id.to_string()),
                        0,
                        RunParams::default(),
                    );
                    let run = Run {
                        state: RunState::Completed,
                        started_at: Some(ended - 1000),
                        ended_at: Some(ended),
                        ..queued
                    };
                    let mut stages = run.pending_stages();
                    for stage in &mut stages {
                        stage.record.state = ProcessState::Exited;
                    }
                    (run, stages)
                })
                .collect();
            self.service.insert_runs_as_given(&batch).await?;
            done += batch.len();
            if done % 20_000 == 0 {
                progress(&format!("{done} finished runs in the store"));
            }
        }
        Ok(())
    }

    async fn measure(&mut self, finished: usize, progress: &dyn Fn(&str)) -> BenchResult<Figures> {
        let mut figures = Figures { finished_runs: finished, ..Figures::default() };
        // Commands, without a daemon (so it doesn't compete for the CPU).
        let (mut starts, mut cpus, mut ids) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..SAMPLES {
            let (out, wall, cpu) = self.time(&["run", "start", "--workflow", "one"])?;
            starts.push(wall);
            cpus.push(cpu);
            ids.push(out.trim().to_string());
        }
        figures.start_ms = Percentiles::of(starts);
        figures.start_cpu_ms = Percentiles::of(cpus).p50;
        let (mut statuses, mut cpus) = (Vec::new(), Vec::new());
        for id in &ids {
            let (_, wall, cpu) = self.time(&["run", "status", &id[..8]])?;
            statuses.push(wall);
            cpus.push(cpu);
        }
        figures.status_prefix_ms = Percentiles::of(statuses);
        figures.status_cpu_ms = Percentiles::of(cpus).p50;
        let (mut lists, mut cpus) = (Vec::new(), Vec::new());
        for _ in 0..SAMPLES {
            let (_, wall, cpu) = self.time(&["run", "list"])?;
            lists.push(wall);
            cpus.push(cpu);
        }
        figures.list_ms = Percentiles::of(lists);
        figures.list_cpu_ms = Percentiles::of(cpus).p50;

        // Claims: the daemon drains what was queued above plus a sweep.
        let sweep = 200;
        self.time(&["run", "start", "--workflow", "one", "--count", &sweep.to_string()])?;
        let total = SAMPLES + sweep;
        let before = self.count(RunState::Completed).await?;
        let begun = Instant::now();
        self.start_daemon()?;
        self.wait_completed(before + total, Duration::from_secs(300)).await?;
        figures.claim_runs_per_s = total as f64 / begun.elapsed().as_secs_f64();

        // Exit detection: one run at a time.
        let mut samples = Vec::new();
        for i in 0..EXIT_SAMPLES {
            let (out, _, _) = self.time(&["run", "start", "--workflow", "one"])?;
            self.wait_completed(before + total + i + 1, Duration::from_secs(30)).await?;
            let id = Uuid::parse_str(out.trim())?;
            let stages = self.service.run_status(&id.to_string()).await?.stages;
            let events = self.service.events_after(id, 0).await?;
            let exited =
                events.iter().find(|e| e.kind == EventKind::Stage && e.message.starts_with("exited"));
            if let (Some(ended), Some(event)) = (stages[0].record.ended_at, exited) {
                samples.push((event.at - ended) as f64);
            }
        }
        figures.exit_detection_ms = Percentiles::of(samples);

        // Idle: CPU over a few scan intervals, then RSS.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pid = self.daemon.as_ref().map_or(0, |d| d.0.id());
        let (cpu0, t0) = (process_cpu_ms(pid), Instant::now());
        tokio::time::sleep(Duration::from_secs(6)).await;
        figures.idle_cpu_percent =
            (process_cpu_ms(pid) - cpu0) / (t0.elapsed().as_secs_f64() * 1000.0) * 100.0;
        figures.idle_rss_mb = rss_mb(pid);
        self.kill_daemon();
        progress(&format!(
            "{finished} finished: start p50 {:.1} ms ({:.1} ms CPU), status p50 {:.1} ms, list p50 {:.1} ms, exit p99 {:.0} ms, {:.0} runs/s, idle {:.2}% CPU {:.1} MB",
            figures.start_ms.p50,
            figures.start_cpu_ms,
            figures.status_prefix_ms.p50,
            figures.list_ms.p50,
            figures.exit_detection_ms.p99,
            figures.claim_runs_per_s,
            figures.idle_cpu_percent,
            figures.idle_rss_mb
        ));
        Ok(figures)
    }
}

/// CPU (user + system) of waited-for children so far, ms.
fn children_cpu_ms() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

/// CPU (user + system) of a live process so far, ms (clock-tick resolution).
fn process_cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name: utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) * 1000.0 / hz
}

/// Measures an empty store, fills it with `history` finished runs, measures again; on SQLite,
/// and on a scratch database of `postgres` when given.
pub async fn history(
    exe: &Path,
    history: usize,
    postgres: Option<&str>,
    progress: &dyn Fn(&str),
) -> BenchResult<HistoryReport> {
    let mut backends = Vec::new();
    backends.push(one_backend(exe, "sqlite", None, history, progress).await?);
    if let Some(admin_url) = postgres {
        let name = format!("lachesis_bench_{}", Uuid::new_v4().simple());
        let mut admin = sqlx::postgres::PgConnection::connect(admin_url).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut admin).await?;
        let base = admin_url.rsplit_once('/').map_or(admin_url, |(base, _)| base);
        let report = one_backend(exe, "postgres", Some(format!("{base}/{name}")), history, progress).await;
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
            .execute(&mut admin)
            .await?;
        backends.push(report?);
    }
    Ok(HistoryReport { backends })
}

async fn one_backend(
    exe: &Path,
    backend: &'static str,
    url: Option<String>,
    history: usize,
    progress: &dyn Fn(&str),
) -> BenchResult<BackendReport> {
    let mut lab = Lab::new(exe, url).await?;
    progress(&format!("{backend}: measuring an empty store"));
    let empty = lab.measure(0, progress).await?;
    progress(&format!("{backend}: inserting {history} finished runs"));
    let begun = Instant::now();
    lab.fill(history, progress).await?;
    if let Some(url) = &lab.database_url {
        // A store that grew over months has been vacuumed and analysed by autovacuum long
        // before; one filled a moment ago has not, and autovacuum would start on it in the
        // middle of the measurement. Do its work first, as it would have been done.
        let mut conn = sqlx::postgres::PgConnection::connect(url).await?;
        sqlx::query("VACUUM ANALYZE").execute(&mut conn).await?;
    }
    progress(&format!("{backend}: filled in {:.1} s; measuring again", begun.elapsed().as_secs_f64()));
    let full = lab.measure(history, progress).await?;
    Ok(BackendReport { backend, empty, full })
}
