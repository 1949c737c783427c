//! `--preemption` (the figures bench): a daemon `--pool gpu=0 --preempt`, one preemptible run
//! holding the unit (it checkpoints at each attempt's start and ignores SIGTERM, so every stop
//! takes its whole `stop_grace`), and N cycles of an urgent priority-10 run that takes the unit
//! and exits at once, after which the victim resumes. Per preemption: the urgent run's latency
//! from its `pending` event to its `starting` event against the victim's `stop_grace`, and the
//! work the run says it redoes against the time from its last checkpoint to the decision (the
//! store's timestamps throughout). A sampler reads the runs every ~20 ms for a unit held by two
//! live runs. Then the same workload on a daemon without `--preempt`: nothing is preempted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use uuid::Uuid;

use super::supervisor::{BenchResult, Daemon, Percentiles};
use lachesis::model::{Run, RunPage, RunState};
use lachesis::service::Service;
use lachesis::settings::Settings;

/// The victim's `stop_grace`: short, so that many cycles fit in a couple of minutes.
const GRACE_MS: i64 = 200;
/// The longest any one wait may take before the bench gives up.
const PATIENCE: Duration = Duration::from_secs(60);
/// How often the sampler reads the runs.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);
/// Urgent runs queued behind the victim on the daemon without `--preempt`.
const OFF_URGENT_MAX: usize = 20;

#[derive(Debug, Default, Serialize)]
pub struct PreemptionReport {
    pub cycles: usize,
    pub stop_grace_ms: i64,
    pub preemptions: i64,
    /// The urgent run's `pending` → `starting`, minus the victim's stop_grace (goal: ≤ 1,000 ms).
    pub latency_over_grace_ms: Percentiles,
    /// The work each preemption says it redoes minus the time from the victim's last
    /// checkpoint to the decision: the time the victim took to stop (goal: ≤ stop_grace + a
    /// little, never negative).
    pub work_redone_minus_since_checkpoint_ms: Percentiles,
    /// The smallest of those differences (negative would mean work counted short).
    pub work_redone_difference_min_ms: f64,
    /// The largest |work redone − the time from the last checkpoint to the victim's requeue
    /// (its stages gone)|: what the count misses or adds once the stop is included.
    pub work_redone_vs_requeue_max_ms: f64,
    pub samples: u64,
    /// Samples in which a unit was held by two live runs (must be 0).
    pub violations: u64,
    /// Samples taken while the victim was stopping: the window in which a unit could be given
    /// away too early.
    pub samples_during_stop: u64,
    /// Urgent runs queued behind the victim on a daemon without `--preempt`.
    pub off_urgent_runs: usize,
    /// Preemptions there (must be 0).
    pub off_preemptions: i64,
}

/// A scratch home with the victim's and the urgent run's workflows.
struct Home {
    _dir: tempfile::TempDir,
    path: PathBuf,
    exe: PathBuf,
}

impl Home {
    fn new(exe: &Path) -> BenchResult<Home> {
        let dir = tempfile::Builder::new().prefix("lachesis-bench").tempdir()?;
        let path = dir.path().to_path_buf();
        std::fs::create_dir_all(path.join("workflows"))?;
        // Each attempt checkpoints once (one step past where it resumed), then ignores
        // SIGTERM until it is killed at the end of its grace.
        let script = path.join("trainer.sh");
        std::fs::write(
            &script,
            r#"d="$1"; s=$(( ${LACHESIS_RESUME_STEP:-0} + 1 ))
printf '{"batch": %d, "state_path": "tinker://x/weights/%d"}\n' "$s" "$s" >> "$d/checkpoints.jsonl"
trap '' TERM; exec sleep 600
"#,
        )?;
        std::fs::write(
            path.join("workflows/low.yaml"),
            format!(
                r#"name: low
preemptible: true
min_runtime: 0s
max_preemptions: 100000
stop_grace: {GRACE_MS}ms
needs: {{gpu: 1}}
stages:
  - name: trainer
    argv: [sh, "{script}", "{{run_dir}}"]
completion: {{stages: [trainer]}}
checkpoints:
  jsonl: {{file: "{{run_dir}}/checkpoints.jsonl", step: /batch, path: /state_path}}
"#,
                script = script.display()
            ),
        )?;
        std::fs::write(
            path.join("workflows/urgent.yaml"),
            "name: urgent\nneeds: {gpu: 1}\nstages:\n  - {name: eval, argv: ['true']}\ncompletion: {stages: [eval]}\n",
        )?;
        std::fs::write(
            path.join("workflows/probe.yaml"),
            "name: probe\nstages:\n  - {name: main, argv: [sleep, '600']}\n",
        )?;
        Ok(Home { _dir: dir, path, exe: exe.to_path_buf() })
    }

    fn cli(&self) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.env("LACHESIS_HOME", &self.path)
            .env_remove("LACHESIS_DATABASE_URL")
            .env_remove("LACHESIS_WORKFLOWS")
            .env_remove("LACHESIS_WEBHOOKS");
        cmd
    }

    /// `run start ARGS` through the CLI, as a user submits: the new run's id.
    fn submit(&self, args: &[&str]) -> BenchResult<Uuid> {
        let out = self.cli().args(["run", "start"]).args(args).stdin(Stdio::null()).output()?;
        if !out.status.success() {
            return Err(format!(
                "run start {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
        Ok(Uuid::parse_str(String::from_utf8_lossy(&out.stdout).trim())?)
    }

    async fn daemon(&self, preempt: bool) -> BenchResult<Daemon> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.path.join("daemon.log"))?;
        let mut args = vec!["daemon", "--pool", "gpu=0"];
        if preempt {
            args.push("--preempt");
        }
        let daemon = Daemon(
            self.cli()
                .env("LACHESIS_LOG", "warn")
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()?,
        );
        // Started once it published its pools (a submission needing units is checked against them).
        let path = self.path.clone();
        wait("the daemon to publish its pools", || {
            let path = path.clone();
            async move { Ok(lachesis::node_pools::published(&path).ok().filter(|p| !p.is_empty()).map(|_| ())) }
        })
        .await
        .map_err(|err| format!("{err}; the daemon's log:\n{}", self.log()))?;
        Ok(daemon)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path.join("daemon.log")).unwrap_or_default()
    }
}

/// Polls `check` every 5 ms until it yields a value, for at most PATIENCE.
async fn wait<T, F, Fut>(what: &str, mut check: F) -> BenchResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = BenchResult<Option<T>>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn run_of(service: &Service, id: Uuid) -> BenchResult<Run> {
    Ok(service.run(id).await?.ok_or_else(|| format!("run {id} is gone"))?)
}

/// Waits until `id` is running with `checkpoints` checkpoints recorded.
async fn running_with(service: &Service, id: Uuid, checkpoints: usize) -> BenchResult<()> {
    wait("the victim to run and checkpoint", || async move {
        let run = run_of(service, id).await?;
        if run.state.is_terminal() {
            return Err(format!("the victim ended {}: {:?}", run.state, run.reason).into());
        }
        Ok((run.state == RunState::Running && service.run_checkpoints_of(id).await?.len() >= checkpoints)
            .then_some(()))
    })
    .await
}

/// The sampler: reads every run (one read, a consistent view) each SAMPLE_EVERY until `done`;
/// counts samples, samples with a unit held by two live runs, and samples while a run stopped.
async fn sample(service: Service, limit: i64, done: Arc<AtomicBool>) -> Result<(u64, u64, u64), String> {
    let (mut samples, mut violations, mut stopping) = (0, 0, 0);
    while !done.load(Ordering::Relaxed) {
        let runs =
            service.runs_page(&RunPage { limit, ..Default::default() }).await.map_err(|e| e.to_string())?;
        let live = |s: RunState| matches!(s, RunState::Starting | RunState::Running | RunState::Stopping);
        let mut held: Vec<&String> = runs
            .iter()
            .filter(|r| live(r.state))
            .flat_map(|r| r.units.values().flatten().map(|u| u as &String))
            .collect();
        let n = held.len();
        held.sort_unstable();
        held.dedup();
        violations += u64::from(held.len() < n);
        stopping += u64::from(runs.iter().any(|r| r.state == RunState::Stopping));
        samples += 1;
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    Ok((samples, violations, stopping))
}

pub async fn run(exe: &Path, cycles: usize, say: &dyn Fn(&str)) -> BenchResult<PreemptionReport> {
    let mut report = PreemptionReport { cycles, stop_grace_ms: GRACE_MS, ..Default::default() };
    let home = Home::new(exe)?;
    let service = Service::open(Settings::new(Some(home.path.clone()), None)).await?;
    let daemon = home.daemon(true).await?;
    let victim = home.submit(&["--workflow", "low"])?;
    running_with(&service, victim, 1).await?;

    let done = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(sample(service.clone(), cycles as i64 + 16, done.clone()));
    let (mut latency, mut urgent_ids, mut work) = (Vec::new(), Vec::new(), Vec::new());
    for cycle in 0..cycles {
        let before = run_of(&service, victim).await?.preempted_work;
        let urgent = home.submit(&["--workflow", "urgent", "--priority", "10"])?;
        let ended = wait("the urgent run to end", || async {
            let run = run_of(&service, urgent).await?;
            Ok(run.state.is_terminal().then_some(run))
        })
        .await?;
        if ended.state != RunState::Completed {
            return Err(format!("urgent run {urgent} ended {}: {:?}", ended.state, ended.reason).into());
        }
        let (_, events) = service.run_events(&urgent.to_string()).await?;
        let at = |state: RunState| events.iter().find(|e| e.to_state == Some(state)).map(|e| e.at);
        let claimable = events.first().map(|e| e.at).ok_or("no events")?;
        let pending = at(RunState::Pending).unwrap_or(claimable);
        let starting = at(RunState::Starting).ok_or("the urgent run has no starting event")?;
        latency.push((starting - pending - GRACE_MS) as f64);
        urgent_ids.push(urgent);
        // The victim resumes on the unit the urgent run gave back.
        running_with(&service, victim, cycle + 2).await?;
        work.push(run_of(&service, victim).await?.preempted_work - before);
        if (cycle + 1) % 50 == 0 || cycle + 1 == cycles {
            say(&format!("{} of {cycles} preemptions", cycle + 1));
        }
    }
    done.store(true, Ordering::Relaxed);
    let (samples, violations, stopping) = sampler.await??;
    let back = run_of(&service, victim).await?;
    report.preemptions = back.preemptions;
    if back.preemptions != cycles as i64 {
        return Err(format!("{} preemptions over {cycles} cycles", back.preemptions).into());
    }

    // Per decision: the work the run counted against the time since its last checkpoint.
    let (_, events) = service.run_events(&victim.to_string()).await?;
    let decisions: Vec<i64> =
        events.iter().filter(|e| e.message.starts_with("stop: preempted by")).map(|e| e.at).collect();
    let checkpoints = service.run_checkpoints_of(victim).await?;
    let mut differences = Vec::new();
    for (decided, redone) in decisions.iter().zip(&work) {
        let last =
            checkpoints.iter().filter(|c| c.at <= *decided).map(|c| c.at).max().ok_or("no checkpoint")?;
        differences.push((redone - (decided - last)) as f64);
    }
    report.work_redone_difference_min_ms = differences.iter().copied().fold(f64::INFINITY, f64::min);
    report.latency_over_grace_ms = Percentiles::of(latency);
    report.work_redone_minus_since_checkpoint_ms = Percentiles::of(differences);
    (report.samples, report.violations, report.samples_during_stop) = (samples, violations, stopping);
    drop(daemon);

    // The same workload without --preempt: the urgent runs wait behind the victim. A probe of
    // their priority, queued after them, starts once a claim pass has looked at each of them.
    let off = Home::new(exe)?;
    let service = Service::open(Settings::new(Some(off.path.clone()), None)).await?;
    let daemon = off.daemon(false).await?;
    let victim = off.submit(&["--workflow", "low"])?;
    running_with(&service, victim, 1).await?;
    report.off_urgent_runs = cycles.min(OFF_URGENT_MAX);
    let mut urgent = Vec::new();
    for _ in 0..report.off_urgent_runs {
        urgent.push(off.submit(&["--workflow", "urgent", "--priority", "10"])?);
    }
    let probe = off.submit(&["--workflow", "probe", "--priority", "10"])?;
    wait("the probe to start", || async {
        Ok(matches!(run_of(&service, probe).await?.state, RunState::Running).then_some(()))
    })
    .await?;
    let held = run_of(&service, victim).await?;
    report.off_preemptions = held.preemptions;
    for id in urgent {
        let run = run_of(&service, id).await?;
        report.off_preemptions += run.preemptions;
        if run.state != RunState::Pending {
            return Err(format!("without --preempt, urgent run {id} is {}", run.state).into());
        }
    }
    if held.state != RunState::Running {
        return Err(format!("without --preempt, the victim is {}", held.state).into());
    }
    drop(daemon);
    Ok(report)
}
