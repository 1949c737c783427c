//! `--queue` (the figures bench): what a deep queue costs. A scratch home with N pending runs of a
//! one-stage workflow (inserted as given) and two sleepers holding a daemon's `--max-parallel 2`;
//! then every dashboard page, `run status` of the deepest pending run, `run list`, `report`, `GET /runs`,
//! and the daemon's RSS and peak RSS.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Serialize;
use uuid::Uuid;

use super::supervisor::{BenchResult, Percentiles, rss_mb, status_mb};
use lachesis::model::{Run, RunParams, RunState, Stage};
use lachesis::service::{RunRequest, Service};
use lachesis::settings::Settings;
use lachesis::workflow::Workflow;

const TOKEN: &str = "lachesis-bench-queue-token";
/// Samples per figure (the median and the worst are printed).
const SAMPLES: usize = 5;
/// Runs written per transaction while filling the queue.
const BATCH: usize = 5_000;

#[derive(Debug, Serialize)]
pub struct Figure {
    pub what: String,
    pub ms: Percentiles,
}

#[derive(Debug, Default, Serialize)]
pub struct QueueReport {
    pub pending: usize,
    pub figures: Vec<Figure>,
    pub daemon_rss_mb: f64,
    pub daemon_peak_rss_mb: f64,
}

pub async fn run(exe: &Path, pending: usize, say: &dyn Fn(&str)) -> BenchResult<QueueReport> {
    let dir = tempfile::Builder::new().prefix("lachesis-bench").tempdir()?;
    let home = dir.path().to_path_buf();
    std::fs::create_dir_all(home.join("workflows"))?;
    std::fs::write(
        home.join("workflows/sleeper.yaml"),
        "name: sleeper\nstop_grace: 1s\nstages:\n  - {name: main, argv: [sleep, \"600\"]}\n",
    )?;
    let service = Service::open(Settings::new(Some(home.clone()), None)).await?;
    // The two sleepers go first (higher priority): they hold both slots, the rest waits.
    for _ in 0..2 {
        let request =
            RunRequest { workflow: Some("sleeper".into()), priority: Some(1), ..Default::default() };
        service.submit_run(request).await?;
    }
    say(&format!("queueing {pending} pending runs"));
    let spec =
        Workflow::parse(Path::new("one.yaml"), "name: one\nstages:\n  - {name: main, argv: ['true']}\n")?;
    let mut deepest = None;
    for start in (0..pending).step_by(BATCH) {
        let batch: Vec<(Run, Vec<Stage>)> =
            (start..pending.min(start + BATCH)).map(|_| pending_run(&spec, &home)).collect();
        deepest = batch.last().map(|(run, _)| run.id);
        service.insert_runs_as_given(&batch).await?;
    }
    let deepest = deepest.ok_or("no pending runs")?;

    let (daemon, base, http) = super::supervisor::listening_daemon(
        exe,
        &home,
        TOKEN,
        &["--max-parallel", "2", "--stop-grace", "1s"],
    )
    .await?;
    let pid = daemon.0.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Measured once both slots are taken, as a queue stands overnight.
    while service.live_run_counts().await?.get(RunState::Running) < 2 {
        if Instant::now() > deadline {
            return Err("the sleepers did not start".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut report = QueueReport { pending, ..QueueReport::default() };
    let pages = [
        "/ui/runs".to_string(),
        "/ui/runs?state=pending".into(),
        "/ui/runs?state=pending&page=50".into(),
        format!("/ui/runs/{deepest}"),
        "/ui/tests".into(),
        "/ui/schedules".into(),
        "/ui/nodes".into(),
        "/ui/report".into(),
        "/report".into(),
        "/runs?limit=100".into(),
        format!("/runs/{deepest}"),
    ];
    for page in pages {
        let mut samples = Vec::new();
        for _ in 0..SAMPLES {
            samples.push(super::timed_get(&http, TOKEN, &format!("{base}{page}")).await?);
        }
        let figure = Figure { what: format!("GET {page}"), ms: Percentiles::of(samples) };
        say(&format!("{}: p50 {:.1} ms", figure.what, figure.ms.p50));
        report.figures.push(figure);
    }
    let deepest = deepest.to_string();
    let commands: [&[&str]; 4] =
        [&["run", "status", &deepest], &["run", "list"], &["run", "list", "--state", "pending"], &["report"]];
    for args in commands {
        let mut samples = Vec::new();
        for _ in 0..SAMPLES {
            let started = Instant::now();
            let out = super::supervisor::cli_with_token(exe, &home, TOKEN)
                .args(args)
                .stdin(Stdio::null())
                .output()?;
            if !out.status.success() {
                return Err(
                    format!("{}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()).into()
                );
            }
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        let figure = Figure { what: format!("lachesis {}", args.join(" ")), ms: Percentiles::of(samples) };
        say(&format!("{}: p50 {:.1} ms", figure.what, figure.ms.p50));
        report.figures.push(figure);
    }
    report.daemon_rss_mb = rss_mb(pid);
    report.daemon_peak_rss_mb = status_mb(pid, "VmHWM:");
    drop(daemon);
    Ok(report)
}

fn pending_run(spec: &Workflow, home: &Path) -> (Run, Vec<Stage>) {
    let id = Uuid::new_v4();
    let run_dir: PathBuf = home.join("runs").join(id.to_string());
    let run = Run::queued(id, spec.clone(), run_dir, 0, RunParams::default());
    let stages = run.pending_stages();
    (run, stages)
}
