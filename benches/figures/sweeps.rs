//! `--sweeps` (the figures bench): early termination as it happens, and the leaderboard of a
//! big sweep.
//!
//! Live: a daemon `--max-parallel N` runs a grid sweep of N members (`max_live: N`) of a
//! stand-in trainer (bash, no fork per reading) that writes `{"step", "loss", "wrote_at"}` rows
//! to its metrics file. Even members write three readings of 0.1 at once; odd ones two of 5.0,
//! then, once the bench says go, their third at their own slot 100 ms apart: the reading that
//! makes each of them condemnable by hyperband (`min_iter: 3`), timestamped by the trainer as
//! it writes it. Per stop: that timestamp to the member's `stopped` event (and to its stop
//! decision, the `stopping` event), from the store's timestamps. The daemon's peak RSS
//! (VmHWM) is read once every round has ended.
//!
//! Status: a sweep of M members written through `sweep start`, then moved and filled by the
//! service's fixtures (a third completed, a third early-terminated, a third running, each with
//! R readings of its metric); `sweep status ID --json` and the table, each timed as a whole
//! process, over repeated calls.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use uuid::Uuid;

use super::supervisor::{BenchResult, Daemon, Percentiles, status_mb};
use lachesis::model::{MetricReading, RunState, RunTrigger, now_millis};
use lachesis::service::Service;
use lachesis::settings::Settings;

/// The longest any one wait may take before the bench gives up.
const PATIENCE: Duration = Duration::from_secs(120);
/// Calls of `sweep status` timed, each way.
const STATUS_CALLS: usize = 30;

#[derive(Clone, Debug)]
pub struct SweepsOptions {
    /// Members of the live sweep (all live at once).
    pub live_members: usize,
    /// Live sweeps run one after the other (each gives live_members / 2 stops).
    pub rounds: usize,
    /// Members of the sweep whose status is timed.
    pub status_members: usize,
    /// Readings of the metric per member of that sweep.
    pub readings_per_member: usize,
}

#[derive(Debug, Default, Serialize)]
pub struct SweepsReport {
    pub live_members: usize,
    pub rounds: usize,
    pub stops: usize,
    /// The condemning reading written by the trainer → the member `stopped` (goal: p99 < 1 s).
    pub reading_to_stopped_ms: Percentiles,
    /// The same reading → the stop decided (the member `stopping`, its reason and event).
    pub reading_to_decision_ms: Percentiles,
    /// The daemon's peak RSS (VmHWM) over the live rounds (goal: < 64 MB).
    pub daemon_peak_rss_mb: f64,
    pub status_members: usize,
    pub readings_per_member: usize,
    /// `sweep status ID --json`, whole process (goal: < 100 ms).
    pub status_json_ms: Percentiles,
    /// `sweep status ID` (the table), whole process.
    pub status_table_ms: Percentiles,
}

/// The stand-in trainer: `trainer.sh RUN_DIR MEMBER GO_FILE`. Bash's `read -t` on a FIFO of
/// its own is its sleep and `$EPOCHREALTIME` its clock, so writing a reading forks nothing.
const TRAINER: &str = r#"d="$1"; k="$2"; go="$3"; f="$d/metrics.jsonl"
mkfifo "$d/nap" && exec 9<>"$d/nap"
nap() { read -t "$1" -u 9 _; }
put() { local t=${EPOCHREALTIME/./}; printf '{"step": %d, "loss": %s, "wrote_at": "%s"}\n' "$1" "$2" "${t:0:-3}" >> "$f"; }
if (( k % 2 == 0 )); then
  put 1 0.1; put 2 0.1; put 3 0.1
else
  put 1 5.0; put 2 5.0
  until [ -e "$go" ]; do nap 0.02; done
  j=$(( k / 2 ))
  nap "$(( j / 10 )).$(( j % 10 ))"
  put 3 5.0
fi
while :; do nap 60; done
"#;

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
        let script = path.join("trainer.sh");
        std::fs::write(&script, TRAINER)?;
        std::fs::write(
            path.join("workflows/stand.yaml"),
            format!(
                r#"name: stand
vars: {{member: "0", go: "go"}}
stages:
  - name: trainer
    argv: [bash, "{script}", "{{run_dir}}", "{{member}}", "{{go}}"]
metrics:
  jsonl: {{file: metrics.jsonl, step: /step}}
stop_grace: 5s
"#,
                script = script.display()
            ),
        )?;
        Ok(Home { _dir: dir, path, exe: exe.to_path_buf() })
    }

    fn cli(&self) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.env("LACHESIS_HOME", &self.path)
            .env_remove("LACHESIS_DATABASE_URL")
            .env_remove("LACHESIS_WORKFLOWS")
            .env_remove("LACHESIS_WEBHOOKS")
            .env_remove("WANDB_API_KEY");
        cmd
    }

    fn cli_ok(&self, args: &[&str]) -> BenchResult<String> {
        let out = self.cli().args(args).stdin(Stdio::null()).output()?;
        if !out.status.success() {
            return Err(format!("{}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()).into());
        }
        Ok(String::from_utf8(out.stdout)?)
    }

    /// `sweep start` of a grid of `members` over `stand`: the sweep's id and its members.
    fn start_sweep(&self, name: &str, members: usize, go: &Path) -> BenchResult<(Uuid, Vec<Uuid>)> {
        let file = self.path.join(format!("{name}.yaml"));
        std::fs::write(
            &file,
            format!(
                "method: grid\nworkflow: stand\nmax_live: {members}\nmetric: {{name: loss, goal: minimize}}\n\
                 early_terminate: {{type: hyperband, min_iter: 3, eta: 3}}\nparameters:\n  \
                 member: {{min: 0, max: {}}}\n  go: {{value: '{}'}}\n",
                members - 1,
                go.display()
            ),
        )?;
        let out: serde_json::Value =
            serde_json::from_str(&self.cli_ok(&["sweep", "start", &file.to_string_lossy(), "--json"])?)?;
        let id = Uuid::parse_str(out["id"].as_str().ok_or("no sweep id")?)?;
        let members = out["members"]
            .as_array()
            .ok_or("no members")?
            .iter()
            .map(|m| Ok(Uuid::parse_str(m.as_str().ok_or("a member is no id")?)?))
            .collect::<BenchResult<Vec<Uuid>>>()?;
        Ok((id, members))
    }

    fn daemon(&self, parallel: usize) -> BenchResult<Daemon> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.path.join("daemon.log"))?;
        let daemon = Daemon(
            self.cli()
                .env("LACHESIS_LOG", "warn")
                .args(["daemon", "--max-parallel", &parallel.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()?,
        );
        super::supervisor::wait_for_socket(&self.path)?;
        Ok(daemon)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path.join("daemon.log")).unwrap_or_default()
    }
}

/// Polls `check` every 20 ms until it yields a value, for at most PATIENCE.
async fn wait<T, F, Fut>(what: &str, home: &Home, mut check: F) -> BenchResult<T>
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
            return Err(format!("timed out waiting for {what}; the daemon's log:\n{}", home.log()).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many runs are in `state` (a count, no rows parsed: polling it costs the daemon little).
async fn count(service: &Service, state: RunState) -> BenchResult<usize> {
    let counts = service.run_counts().await?;
    Ok(counts.get(state) as usize)
}

/// When the trainer of `run_dir` wrote its reading of `step`, in ms since the epoch.
fn written_at(run_dir: &Path, step: i64) -> BenchResult<i64> {
    let text = std::fs::read_to_string(run_dir.join("metrics.jsonl"))?;
    for line in text.lines() {
        let row: serde_json::Value = serde_json::from_str(line)?;
        if row["step"].as_i64() == Some(step) {
            return Ok(row["wrote_at"].as_str().ok_or("no wrote_at")?.parse()?);
        }
    }
    Err(format!("{}: no reading of step {step}", run_dir.display()).into())
}

/// One live round: the sweep's losers' (reading → decision, reading → stopped) in ms.
async fn live_round(
    home: &Home,
    service: &Service,
    round: usize,
    members: usize,
    say: &dyn Fn(&str),
) -> BenchResult<Vec<(f64, f64)>> {
    let go = home.path.join(format!("go-{round}"));
    let (sweep, ids) = home.start_sweep(&format!("live-{round}"), members, &go)?;
    wait("every member to run", home, || async {
        Ok((count(service, RunState::Running).await? >= members).then_some(()))
    })
    .await?;
    // Every winner has its three readings and every loser its first two before any loser's
    // third is written: the third is then what condemns it.
    wait("the first readings", home, || async {
        for (k, id) in ids.iter().enumerate() {
            let want = if k % 2 == 0 { 3 } else { 2 };
            if service.run_metric_series(*id, "loss").await?.len() < want {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await?;
    say(&format!("round {}: {members} members running; the losers write their third reading", round + 1));
    std::fs::write(&go, "")?;
    let losers: Vec<Uuid> = ids.iter().skip(1).step_by(2).copied().collect();
    wait("every loser to be stopped", home, || async {
        for id in &losers {
            let run = service.run(*id).await?.ok_or("a member is gone")?;
            if run.state != RunState::Stopped {
                if run.state.is_terminal() {
                    return Err(format!("loser {id} ended {}: {:?}", run.state, run.reason).into());
                }
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await?;
    let mut samples = Vec::new();
    for (k, id) in ids.iter().enumerate() {
        let run = service.run(*id).await?.ok_or("a member is gone")?;
        if k % 2 == 0 {
            if run.state != RunState::Running {
                return Err(format!("winner {k} is {}: {:?}", run.state, run.reason).into());
            }
            continue;
        }
        if !run.reason.as_deref().is_some_and(|r| r.starts_with("early-terminated")) {
            return Err(format!("loser {k} stopped for another reason: {:?}", run.reason).into());
        }
        let wrote = written_at(&run.run_dir, 3)?;
        let (_, events) = service.run_events(&id.to_string()).await?;
        let at = |state: RunState| events.iter().find(|e| e.to_state == Some(state)).map(|e| e.at);
        let decided = at(RunState::Stopping).ok_or("no stopping event")?;
        let stopped = at(RunState::Stopped).ok_or("no stopped event")?;
        samples.push(((decided - wrote) as f64, (stopped - wrote) as f64));
    }
    home.cli_ok(&["sweep", "stop", &sweep.to_string()])?;
    wait("the winners to stop", home, || async {
        Ok((count(service, RunState::Running).await? + count(service, RunState::Stopping).await? == 0)
            .then_some(()))
    })
    .await?;
    Ok(samples)
}

/// A sweep of `members` members written as a user would, then moved and filled by fixtures.
async fn big_sweep(home: &Home, service: &Service, members: usize, readings: usize) -> BenchResult<Uuid> {
    let (sweep, ids) = home.start_sweep("big", members, &home.path.join("never"))?;
    let at = now_millis();
    let short = &sweep.to_string()[..8];
    for (k, id) in ids.iter().enumerate() {
        let run = service.run(*id).await?.ok_or("a member is gone")?;
        let run = service.move_run(&run, RunTrigger::Claim, None).await?;
        let run = service.move_run(&run, RunTrigger::AllStagesUp, None).await?;
        match k % 3 {
            0 => {
                service.move_run(&run, RunTrigger::Complete, Some("completed")).await?;
            }
            1 => {
                let reason = format!(
                    "early-terminated by sweep {short}: loss 0.9 at iteration 3 is worse than the band-3 threshold 0.5"
                );
                let run = service.move_run(&run, RunTrigger::Stop, Some(&reason)).await?;
                service.move_run(&run, RunTrigger::AllStagesGone, Some(&reason)).await?;
            }
            _ => {}
        }
        let series: Vec<MetricReading> = (0..readings)
            .filter_map(|step| {
                let value = 1.0 / (1.0 + step as f64) + (k % 97) as f64 * 0.001;
                MetricReading::new("loss", step as i64, value)
            })
            .collect();
        service.put_metric_values_as_given(*id, 1, &series, at).await?;
    }
    Ok(sweep)
}

/// `lachesis ARGS` timed as a whole process, `calls` times: ms per call.
fn timed(home: &Home, args: &[&str], calls: usize) -> BenchResult<Vec<f64>> {
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let out = home.cli().args(args).stdin(Stdio::null()).stdout(Stdio::piped()).output()?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        if !out.status.success() {
            return Err(format!("{}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()).into());
        }
    }
    Ok(samples)
}

pub async fn run(exe: &Path, options: &SweepsOptions, say: &dyn Fn(&str)) -> BenchResult<SweepsReport> {
    let mut report = SweepsReport {
        live_members: options.live_members,
        rounds: options.rounds,
        status_members: options.status_members,
        readings_per_member: options.readings_per_member,
        ..Default::default()
    };

    let mut samples = Vec::new();
    if options.rounds > 0 {
        let home = Home::new(exe)?;
        let service = Service::open(Settings::new(Some(home.path.clone()), None)).await?;
        let daemon = home.daemon(options.live_members)?;
        for round in 0..options.rounds {
            samples.extend(live_round(&home, &service, round, options.live_members, say).await?);
        }
        report.daemon_peak_rss_mb = status_mb(daemon.0.id(), "VmHWM:");
    }
    report.stops = samples.len();
    report.reading_to_decision_ms = Percentiles::of(samples.iter().map(|s| s.0).collect());
    report.reading_to_stopped_ms = Percentiles::of(samples.iter().map(|s| s.1).collect());

    let home = Home::new(exe)?;
    let service = Service::open(Settings::new(Some(home.path.clone()), None)).await?;
    say(&format!(
        "writing a sweep of {} members with {} readings each",
        options.status_members, options.readings_per_member
    ));
    let sweep = big_sweep(&home, &service, options.status_members, options.readings_per_member).await?;
    let id = sweep.to_string();
    // The fixtures' writes are in the WAL: a store someone reads has long been checkpointed
    // (a daemon does it every 250 ms), so reads go to the database file, not through the WAL.
    {
        use sqlx::Connection;
        let url = format!("sqlite://{}", home.path.join("lachesis.db").display());
        let mut conn = sqlx::sqlite::SqliteConnection::connect(&url).await?;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&mut conn).await?;
        conn.close().await?;
    }
    // Once, untimed: the first read warms the page cache as any earlier command would have.
    home.cli_ok(&["sweep", "status", &id, "--json"])?;
    report.status_json_ms = Percentiles::of(timed(&home, &["sweep", "status", &id, "--json"], STATUS_CALLS)?);
    report.status_table_ms = Percentiles::of(timed(&home, &["sweep", "status", &id], STATUS_CALLS)?);
    Ok(report)
}
