//! `--claims` (the figures bench): how fast several nodes claim runs from one PostgreSQL queue, and
//! what contention adds to a claim. Each claimer is what a daemon is to the store: a node
//! registration of its own and a connection pool of its own, claiming one run per call with
//! `FOR UPDATE SKIP LOCKED`, until the queue is empty.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;
use sqlx::Connection;
use uuid::Uuid;

use super::supervisor::{BenchResult, Percentiles};
use lachesis::model::{Run, RunParams, Stage};
use lachesis::service::Service;
use lachesis::settings::Settings;
use lachesis::workflow::Workflow;

#[derive(Debug, Serialize)]
pub struct ClaimRound {
    pub claimers: usize,
    pub runs: usize,
    pub runs_per_s: f64,
    /// One claim call (lease check, locked read, update, event, commit).
    pub claim_ms: Percentiles,
    /// Runs claimed twice (must be 0).
    pub duplicates: usize,
    /// Pending runs left waiting for a dependency that is never met (with --with-deps).
    pub waiting: usize,
}

#[derive(Debug, Serialize)]
pub struct ClaimReport {
    pub rounds: Vec<ClaimRound>,
}

/// Runs a round per entry of `claimers`, each on a fresh database made on the server of
/// `admin_url` and dropped afterwards.
pub async fn claims(
    admin_url: &str,
    runs: usize,
    claimers: &[usize],
    with_deps: bool,
    with_pools: bool,
    progress: &dyn Fn(&str),
) -> BenchResult<ClaimReport> {
    let mut rounds = Vec::new();
    for &n in claimers {
        let name = format!("lachesis_bench_{}", Uuid::new_v4().simple());
        let mut admin = sqlx::postgres::PgConnection::connect(admin_url).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut admin).await?;
        let base = admin_url.rsplit_once('/').map_or(admin_url, |(base, _)| base);
        let url = format!("{base}/{name}");
        let round = round(&url, runs, n, with_deps, with_pools, progress).await;
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
            .execute(&mut admin)
            .await?;
        let round = round?;
        progress(&format!(
            "{n} claimer(s): {:.0} runs/s, claim p50 {:.2} ms p99 {:.2} ms",
            round.runs_per_s, round.claim_ms.p50, round.claim_ms.p99
        ));
        rounds.push(round);
    }
    Ok(ClaimReport { rounds })
}

async fn round(
    url: &str,
    runs: usize,
    claimers: usize,
    with_deps: bool,
    with_pools: bool,
    progress: &dyn Fn(&str),
) -> BenchResult<ClaimRound> {
    // Each claimer opens a service of its own (its own connection pool) on the scratch database;
    // the home only has to exist.
    let home = tempfile::Builder::new().prefix("lachesis-bench").tempdir()?;
    let settings = Settings::new(Some(home.path().to_path_buf()), Some(url.to_string()));
    let service = Service::open(settings.clone()).await?;
    progress(&format!("{claimers} claimer(s): queueing {runs} runs"));
    let spec = Workflow::parse(
        std::path::Path::new("bench.yaml"),
        "name: bench\nstages:\n  - {name: api, argv: ['true']}\n  - {name: trainer, argv: ['true']}\n",
    )?;
    let mut queued: Vec<(Run, Vec<Stage>)> = (0..runs).map(|_| pending_run(&spec)).collect();
    if with_pools {
        // Every run asks for one of four GPUs, as a sweep on one box does.
        let needs = lachesis::model::Needs::from_pairs([("gpu".to_string(), 1)])?;
        for (run, _) in &mut queued {
            run.params.needs = needs.clone();
        }
    }
    let mut waiting = 0;
    if with_deps {
        // Half the queue waits for a held run (never claimed, so never met); the other half's
        // dependency (on a cancelled run, `any`) was met as it was written.
        let (blocker, blocker_stages) = pending_run(&spec);
        let blocker = Run { held_at: Some(lachesis::model::now_millis()), ..blocker };
        let (done, done_stages) = pending_run(&spec);
        service
            .insert_runs_as_given(&[(blocker.clone(), blocker_stages), (done.clone(), done_stages)])
            .await?;
        service.stop_run(&done.id.to_string()).await?;
        let with_edges: Vec<_> = queued
            .into_iter()
            .enumerate()
            .map(|(i, (run, stages))| {
                let after = match i % 2 {
                    0 => (blocker.id, lachesis::model::When::Ok),
                    _ => (done.id, lachesis::model::When::Any),
                };
                (run, stages, vec![after])
            })
            .collect();
        waiting = with_edges.len().div_ceil(2);
        service.insert_waiting_runs_as_given(&with_edges).await?;
    } else {
        service.insert_runs_as_given(&queued).await?;
    }
    let mut tasks = Vec::new();
    let started = Instant::now();
    for n in 0..claimers {
        let settings = settings.clone();
        tasks.push(tokio::spawn(async move { claim_until_empty(settings, n, with_pools).await }));
    }
    let mut latencies = Vec::new();
    let mut seen = HashSet::new();
    let mut duplicates = 0;
    for task in tasks {
        let (ids, times) = task.await??;
        latencies.extend(times);
        duplicates += ids.into_iter().filter(|id| !seen.insert(*id)).count();
    }
    let elapsed = started.elapsed().as_secs_f64();
    Ok(ClaimRound {
        claimers,
        runs: seen.len(),
        runs_per_s: seen.len() as f64 / elapsed,
        claim_ms: Percentiles::of(latencies),
        duplicates,
        waiting,
    })
}

/// One daemon's worth of claiming: its own pool and lease, one run per call.
async fn claim_until_empty(
    settings: Settings,
    n: usize,
    with_pools: bool,
) -> Result<(Vec<Uuid>, Vec<f64>), String> {
    let service = Service::open(settings).await.map_err(|e| e.to_string())?;
    let mut claimer = service.claimer(&format!("bench-{n}")).await.map_err(|e| e.to_string())?;
    if with_pools {
        let gpus: lachesis::model::pool::PoolSpec = "gpu=0,1,2,3".parse().map_err(|e| format!("{e}"))?;
        claimer = claimer
            .with_pools(lachesis::model::Pools::from_specs(&[gpus], None).map_err(|e| format!("{e}"))?);
    }
    let (mut ids, mut times) = (Vec::new(), Vec::new());
    loop {
        let started = Instant::now();
        match claimer.claim_one().await.map_err(|e| e.to_string())? {
            Some(id) => {
                times.push(started.elapsed().as_secs_f64() * 1000.0);
                ids.push(id);
            }
            None => return Ok((ids, times)),
        }
    }
}

fn pending_run(spec: &Workflow) -> (Run, Vec<Stage>) {
    let id = Uuid::new_v4();
    let run =
        Run::queued(id, spec.clone(), PathBuf::from(format!("/bench/runs/{id}")), 0, RunParams::default());
    let stages = run.pending_stages();
    (run, stages)
}
