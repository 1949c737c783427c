//! `--sweep-pages` (the figures bench): what a big sweep's pages cost. A scratch home with one
//! sweep of N members (1,000 by default), each started and ended through the state table as
//! the daemon would (one in three early-terminated after a third of the readings its siblings
//! make), each with R readings of the sweep's metric (200 by default); then the service reads
//! (the leaderboard, the leaderboard with every member's curve, the list, the report) in
//! process, and the sweep's dashboard page, the list page, `GET /sweeps/{id}` and the report
//! through a daemon's HTTP API: time and size.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::supervisor::{BenchResult, Percentiles};
use lachesis::model::sweep::early_terminated_by;
use lachesis::model::{MetricRow, RunTrigger, now_millis};
use lachesis::service::{RunRequest, Service};
use lachesis::settings::Settings;

const TOKEN: &str = "lachesis-bench-sweeps-token";
/// Samples per figure (the median and the worst are printed).
const SAMPLES: usize = 5;

#[derive(Debug, Serialize)]
pub struct Figure {
    pub what: String,
    pub ms: Percentiles,
    /// The answer's size, for the HTTP figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<usize>,
}

#[derive(Debug, Default, Serialize)]
pub struct SweepsReport {
    pub members: usize,
    pub readings_per_member: usize,
    pub readings: usize,
    /// Points the sweep's chart draws, over all members.
    pub chart_points: usize,
    pub figures: Vec<Figure>,
}

fn figure(what: String, samples: Vec<f64>, bytes: Option<usize>, say: &dyn Fn(&str)) -> Figure {
    let figure = Figure { what, ms: Percentiles::of(samples), bytes };
    let size = bytes.map(|b| format!(", {:.0} KiB", b as f64 / 1024.0)).unwrap_or_default();
    say(&format!("{}: p50 {:.1} ms{size}", figure.what, figure.ms.p50));
    figure
}

pub async fn run(
    exe: &Path,
    members: usize,
    readings: usize,
    say: &dyn Fn(&str),
) -> BenchResult<SweepsReport> {
    let dir = tempfile::Builder::new().prefix("lachesis-bench").tempdir()?;
    let home = dir.path().to_path_buf();
    std::fs::create_dir_all(home.join("workflows"))?;
    std::fs::write(
        home.join("workflows/tune.yaml"),
        "name: tune\nvars: {lr: '0.1'}\nmetrics:\n  jsonl: {file: m.jsonl, step: /step}\nstages:\n  - {name: trainer, argv: ['true', '{lr}']}\n",
    )?;
    let service = Service::open(Settings::new(Some(home.clone()), None)).await?;
    let values: Vec<String> = (0..members).map(|k| format!("{}", 1e-5 * (k + 1) as f64)).collect();
    let file = format!(
        "method: grid\nworkflow: tune\nmetric: {{name: train/loss, goal: minimize}}\n\
         early_terminate: {{type: hyperband, min_iter: 3, eta: 3}}\n\
         parameters:\n  lr: {{values: [{}]}}\n",
        values.join(", ")
    );
    say(&format!("queueing a sweep of {members} members"));
    let started = service.submit_sweep(&file, None, RunRequest::default()).await?;
    let sweep = started.sweep.id;
    let stopped_reason = format!(
        "{}: best train/loss by iteration 3 is worse than the band-3 threshold",
        early_terminated_by(&sweep)
    );
    say(&format!("running them to their end with {readings} readings each"));
    let mut total = 0;
    for (k, id) in started.members.iter().enumerate() {
        let run = service.resolve_run(&id.to_string()).await?;
        let run = service.move_run(&run, RunTrigger::Claim, None).await?;
        let run = service.move_run(&run, RunTrigger::AllStagesUp, None).await?;
        let early = k % 3 == 0;
        let made = if early { readings / 3 } else { readings };
        let rows: Vec<MetricRow> = (0..made)
            .map(|i| MetricRow {
                step: i as i64 + 1,
                loss: Some(1.0 / (1.0 + i as f64 * (1.0 + (k % 17) as f64 / 10.0)) + (i % 7) as f64 * 1e-3),
                recorded_at: now_millis(),
                ..MetricRow::default()
            })
            .collect();
        service.put_metric_rows_as_given(*id, &rows).await?;
        total += made;
        if early {
            let run = service.move_run(&run, RunTrigger::Stop, Some(&stopped_reason)).await?;
            service.move_run(&run, RunTrigger::AllStagesGone, Some(&stopped_reason)).await?;
        } else {
            service.move_run(&run, RunTrigger::Complete, Some("stage 'trainer' finished")).await?;
        }
    }
    let mut report =
        SweepsReport { members, readings_per_member: readings, readings: total, ..Default::default() };

    let id = sweep.to_string();
    let mut timed = Vec::new();
    for _ in 0..SAMPLES {
        let at = Instant::now();
        let status = service.sweep_status(&id).await?;
        timed.push(at.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(status.leaderboard.len(), members);
    }
    report.figures.push(figure("Service::sweep_status (the leaderboard)".into(), timed, None, say));
    let mut timed = Vec::new();
    for _ in 0..SAMPLES {
        let at = Instant::now();
        let curves = service.sweep_curves(&id).await?;
        timed.push(at.elapsed().as_secs_f64() * 1000.0);
        report.chart_points = curves.curves().map(|(_, c)| c.points.len()).sum();
    }
    report.figures.push(figure(
        "Service::sweep_curves (the leaderboard and every curve)".into(),
        timed,
        None,
        say,
    ));
    let mut timed = Vec::new();
    for _ in 0..SAMPLES {
        let at = Instant::now();
        let night = service.report(Duration::from_secs(12 * 3600)).await?;
        timed.push(at.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(night.sweeps.len(), 1);
    }
    report.figures.push(figure(
        format!("Service::report (with the sweep and its {members} runs)"),
        timed,
        None,
        say,
    ));

    let (daemon, base, http) = super::supervisor::listening_daemon(exe, &home, TOKEN, &[]).await?;
    for page in [
        format!("/ui/sweeps/{id}"),
        "/ui/sweeps".into(),
        format!("/sweeps/{id}"),
        "/report".into(),
        "/ui/report".into(),
    ] {
        let mut samples = Vec::new();
        let mut bytes = 0;
        for _ in 0..SAMPLES {
            let at = Instant::now();
            let answer = http.get(format!("{base}{page}")).bearer_auth(TOKEN).send().await?;
            let status = answer.status();
            let body = answer.bytes().await?;
            if !status.is_success() {
                return Err(format!("GET {page}: {status}").into());
            }
            samples.push(at.elapsed().as_secs_f64() * 1000.0);
            bytes = body.len();
        }
        report.figures.push(figure(format!("GET {page}"), samples, Some(bytes), say));
    }
    drop(daemon);
    Ok(report)
}
