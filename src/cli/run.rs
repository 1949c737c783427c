//! `lachesis run …`: start, list, status, stop, logs, events, metrics.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use lachesis::launch::space::human_bytes;
use lachesis::model::RunQuery;
use lachesis::model::{Event, RunState, Stage, now_millis, short_id};
use lachesis::service::{LogRequest, RunStatus, Service, ServiceError, SubmitRequest};
use lachesis::settings::Settings;

use super::CliResult;
use super::output::{duration, is_tty, print_json, stage_state, table, time};

#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum RunCommand {
    /// Queue a run; prints its id
    Start(StartArgs),
    /// List runs, newest first (pending runs in queue order)
    List {
        #[arg(long)]
        state: Option<RunState>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// Show one run and its stages
    Status {
        /// Run id or a unique prefix of it
        id: String,
        /// Keep showing progress until the run ends
        #[arg(long)]
        watch: bool,
        #[arg(long)]
        json: bool,
    },
    /// Stop a run (a pending one is cancelled)
    Stop {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Keep a pending run out of the queue until `run release`
    Hold {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Put a held run back in the queue, at its place
    Release {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Change a pending run's priority, variables or config fields (checked as at submission)
    Edit {
        id: String,
        #[arg(long, allow_negative_numbers = true)]
        priority: Option<i64>,
        /// Config field (repeatable): --set group_size=16
        #[arg(long = "set", value_name = "FIELD=VALUE")]
        set: Vec<String>,
        /// Workflow variable (repeatable): --var steps=3
        #[arg(long = "var", value_name = "NAME=VALUE")]
        var: Vec<String>,
        /// Units of the daemon's pools (repeatable): --needs gpu=1
        #[arg(long = "needs", value_name = "POOL=COUNT")]
        needs: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Print a run's stage logs: as much as fits in 1 MiB per stage (a note on stderr says
    /// when earlier output is left out), or the last N lines
    Logs {
        id: String,
        /// Only this stage
        #[arg(long)]
        stage: Option<String>,
        /// Only the last N lines of each stage
        #[arg(long, short = 'n', value_name = "N")]
        tail: Option<usize>,
        /// Keep printing as the logs grow (like `tail -f`) until the run ends
        #[arg(long, short)]
        follow: bool,
        /// The text with its place in the file (size, start, end) per stage
        #[arg(long, conflicts_with = "follow")]
        json: bool,
    },
    /// The run's event history
    Events {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Queue a failed or stopped run again as its next attempt, from its last checkpoint
    Resume {
        id: String,
        /// The step of the checkpoint to resume from [default: the last resumable one]
        #[arg(long, value_name = "STEP")]
        from: Option<i64>,
        #[arg(long)]
        json: bool,
    },
    /// The checkpoints the run's trainer wrote, across its attempts
    Checkpoints {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// The run's training-metric history, as the daemon read it from W&B
    Metrics {
        id: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
pub struct StartArgs {
    /// Workflow name [default: the default workflow]
    #[arg(long, short)]
    workflow: Option<String>,
    /// Environment to train (name from `lachesis env list`)
    #[arg(long)]
    env: Option<String>,
    /// Config field for this run (repeatable): --set group_size=16
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    set: Vec<String>,
    /// Workflow variable for this run (repeatable): --var steps=3
    #[arg(long = "var", value_name = "NAME=VALUE")]
    var: Vec<String>,
    /// Higher runs first
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i64,
    /// Fail the run when its step has not moved for this long (e.g. 30m); overrides the
    /// workflow's `stall_timeout`
    #[arg(long, value_name = "DURATION")]
    stall_timeout: Option<lachesis::workflow::Dur>,
    /// Queue it held: not claimed until `lachesis run release ID`
    #[arg(long)]
    hold: bool,
    /// Stop the run as failed when an attempt runs this long (e.g. 10h); overrides the
    /// workflow's `time_limit`
    #[arg(long, value_name = "DURATION")]
    time_limit: Option<lachesis::workflow::Dur>,
    /// Units of the daemon's pools the run takes (repeatable), over the workflow's `needs`:
    /// --needs gpu=2 (its stages see them as CUDA_VISIBLE_DEVICES)
    #[arg(long = "needs", value_name = "POOL=COUNT")]
    needs: Vec<String>,
    /// Wait for the run to end, showing its progress; exit non-zero unless it completed
    #[arg(long, conflicts_with_all = ["count", "from"])]
    wait: bool,
    /// Queue N identical runs in one transaction; prints their ids in order
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    count: Option<u32>,
    /// Queue one run per line of FILE (`-`: stdin), in one transaction: JSON objects with
    /// any of workflow, env, set, vars, priority, needs, after, over the flags given here
    #[arg(long, value_name = "FILE", conflicts_with = "count")]
    from: Option<PathBuf>,
    /// Wait for this run to complete (repeatable; an id or unique prefix, or NAME=ID to use
    /// its values as {after.NAME.*}); the run fails if it fails or is stopped
    #[arg(long, value_name = "[NAME=]ID")]
    after: Vec<String>,
    /// Wait for this run to end, however it ends (repeatable)
    #[arg(long, value_name = "[NAME=]ID")]
    after_any: Vec<String>,
    /// Wait for this run to fail (repeatable): a cleanup or an alert
    #[arg(long, value_name = "[NAME=]ID")]
    after_failed: Vec<String>,
    /// Queue a pipeline: a YAML list of steps (a path, or a name in the workflows'
    /// `pipelines/` directory), in one transaction; prints the run ids in the file's order
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["count", "from", "wait", "workflow", "env", "set", "var", "after", "after_any", "after_failed"]
    )]
    pipeline: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

impl StartArgs {
    /// The run the flags describe (for `--from`, what each line's fields fall back to).
    fn request(&self) -> Result<SubmitRequest, ServiceError> {
        Ok(SubmitRequest {
            workflow: self.workflow.clone(),
            env_name: self.env.clone(),
            vars: assignments("--var", &self.var)?,
            set: assignments("--set", &self.set)?,
            priority: self.priority,
            stall_timeout: self.stall_timeout.map(|d| d.0),
            hold: self.hold,
            time_limit: self.time_limit.map(|d| d.0),
            needs: needs(&self.needs)?,
            after: [
                (&self.after, lachesis::model::When::Ok),
                (&self.after_any, lachesis::model::When::Any),
                (&self.after_failed, lachesis::model::When::Failed),
            ]
            .into_iter()
            .flat_map(|(list, when)| list.iter().map(move |text| after(text, when)))
            .collect(),
        })
    }
}

/// `--after [NAME=]ID`: a run by its id or prefix, named for `{after.NAME.*}` when given.
fn after(text: &str, when: lachesis::model::When) -> lachesis::service::After {
    let (name, run) = match text.split_once('=') {
        Some((name, run)) => (Some(name.trim().to_string()), run.trim()),
        None => (None, text.trim()),
    };
    lachesis::service::After { target: lachesis::service::AfterTarget::Run(run.to_string()), when, name }
}

pub async fn run(settings: Settings, command: RunCommand) -> CliResult {
    // One run, nothing to wait for: the home's daemon can write it with the store it holds.
    if let RunCommand::Start(args @ StartArgs { wait: false, count: None, from: None, pipeline: None, .. }) =
        &command
        && let Some(run) = lachesis::api::client::submit(&settings, &args.request()?).await?
    {
        if args.json {
            print_json(&run)?;
        } else {
            println!("{}", run.id);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let service = Service::open(settings).await?;
    match command {
        RunCommand::Start(args) => {
            let StartArgs { wait, count, json, .. } = args;
            let request = args.request()?;
            if count.is_some() || args.from.is_some() || args.pipeline.is_some() {
                let runs = match (&args.from, &args.pipeline) {
                    (_, Some(file)) => service.submit_pipeline(&pipeline(&service, file)?).await?,
                    (Some(path), None) => service.submit_many(requests_from(path, &request)?).await?,
                    (None, None) => service.submit_many(vec![request; count.unwrap_or(1) as usize]).await?,
                };
                if json {
                    let summaries: Vec<_> = runs.iter().map(lachesis::service::RunSummary::from).collect();
                    print_json(&summaries)?;
                } else {
                    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
                    for run in &runs {
                        writeln!(out, "{}", run.id)?;
                    }
                    out.flush()?;
                }
                return Ok(ExitCode::SUCCESS);
            }
            let run = service.submit(request).await?;
            if json && !wait {
                print_json(&lachesis::service::RunSummary::from(&run))?;
            } else if !json {
                println!("{}", run.id);
            }
            if wait {
                if !lachesis::wake::poke(&service.settings.socket_path(), lachesis::wake::Poke::Probe) {
                    eprintln!(
                        "note: no daemon is running for this store yet; start one with `lachesis daemon`"
                    );
                }
                return follow_progress(&service, &run.id.to_string(), json).await;
            }
        }
        RunCommand::List { state, limit, json } => {
            let runs = service.list(&RunQuery { state, limit: Some(limit) }).await?;
            if json {
                print_json(&runs)?;
            } else if runs.is_empty() {
                println!("no runs");
            } else {
                let mut t = table([
                    "ID", "WORKFLOW", "ENV", "STATE", "STEP", "PRIO", "CREATED", "DURATION", "REASON",
                ]);
                // Several daemons: say where each run is; a retried run, which attempt.
                let nodes = runs.iter().any(|r| r.node.is_some()) && service.backend().supports_nodes();
                for r in &runs {
                    let end = r.ended_at.or(r.started_at.map(|_| now_millis()));
                    let mut state = r.state.to_string();
                    if r.held_at.is_some() {
                        state.push_str(" (held)");
                    }
                    if r.deps_open > 0 && r.state == RunState::Pending {
                        state.push_str(&format!(" (waits for {})", runs_word(r.deps_open)));
                    }
                    if r.attempt > 1 {
                        state.push_str(&format!(" (attempt {})", r.attempt));
                    }
                    if let (true, Some(node)) = (nodes, &r.node) {
                        state.push_str(&format!(" @{node}"));
                    }
                    t.add_row([
                        short_id(&r.id),
                        r.workflow.clone(),
                        r.env_name.clone().unwrap_or_else(|| "-".into()),
                        state,
                        r.progress.as_ref().map_or_else(|| "-".into(), |p| p.short()),
                        r.priority.to_string(),
                        time(Some(r.created_at)),
                        duration(r.started_at, end),
                        r.reason.clone().unwrap_or_default(),
                    ]);
                }
                println!("{t}");
            }
        }
        RunCommand::Status { id, watch, json } => {
            if watch {
                return follow_progress(&service, &id, json).await;
            }
            let status = service.status(&id).await?;
            if json {
                print_json(&status)?;
            } else {
                print_status(&status);
            }
        }
        RunCommand::Stop { id, json } => {
            let run = service.stop(&id).await?;
            if json {
                print_json(&lachesis::service::RunSummary::from(&run))?;
            } else {
                println!("{} {}", run.id, run.state);
            }
        }
        RunCommand::Hold { id, json } => print_summary(&service.hold(&id).await?, json)?,
        RunCommand::Release { id, json } => print_summary(&service.release(&id).await?, json)?,
        RunCommand::Edit { id, priority, set, var, needs: asked, json } => {
            let request = lachesis::service::EditRequest {
                priority,
                vars: assignments("--var", &var)?,
                set: assignments("--set", &set)?,
                needs: needs(&asked)?,
            };
            print_summary(&service.edit(&id, request).await?, json)?;
        }
        RunCommand::Logs { id, stage, tail, follow, json } => {
            return logs(&service, &id, stage.as_deref(), tail, follow, json).await;
        }
        RunCommand::Events { id, json } => {
            let (_, events) = service.events(&id).await?;
            if json {
                print_json(&events)?;
            } else {
                for event in &events {
                    println!("{}", event_line(event));
                }
            }
        }
        RunCommand::Resume { id, from, json } => {
            let run = service.resume(&id, from).await?;
            if json {
                print_json(&lachesis::service::RunSummary::from(&run))?;
            } else {
                println!("{} {} (attempt {})", run.id, run.state, run.attempt);
            }
        }
        RunCommand::Checkpoints { id, json } => {
            let (_, checkpoints) = service.checkpoints(&id).await?;
            if json {
                print_json(&checkpoints)?;
            } else {
                super::checkpoints::print(&checkpoints);
            }
        }
        RunCommand::Metrics { id, json } => {
            let history = service.metric_history(&id).await?;
            if json {
                print_json(&history.rows)?;
            } else {
                print_metric_history(&history.rows);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// "1 run", "3 runs".
fn runs_word(n: i64) -> String {
    if n == 1 { "1 run".into() } else { format!("{n} runs") }
}

/// A run after a hold, release or edit: its id, state and whether it is held.
fn print_summary(run: &lachesis::model::Run, json: bool) -> std::io::Result<()> {
    if json {
        return print_json(&lachesis::service::RunSummary::from(run));
    }
    let held = if run.held_at.is_some() { " (held)" } else { "" };
    println!("{} {}{held} priority {}", run.id, run.state, run.priority);
    Ok(())
}

fn print_metric_history(rows: &[lachesis::model::MetricRow]) {
    if rows.is_empty() {
        println!(
            "no metric history: the daemon reads it from W&B while the run runs, when WANDB_API_KEY is set"
        );
        return;
    }
    let number = |value: Option<f64>| value.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into());
    let mut t = table(["STEP", "REWARD_MEAN", "PERCENT_CORRECT", "EVAL_PERCENT_CORRECT", "LOSS"]);
    for row in rows {
        t.add_row([
            row.step.to_string(),
            number(row.reward_mean),
            number(row.percent_correct),
            number(row.eval_percent_correct),
            number(row.loss),
        ]);
    }
    println!("{t}");
}

fn assignments(flag: &'static str, items: &[String]) -> Result<BTreeMap<String, String>, ServiceError> {
    items
        .iter()
        .map(|item| match item.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
            _ => Err(ServiceError::BadAssignment { what: flag, text: item.clone() }),
        })
        .collect()
}

/// `--needs POOL=COUNT` values; a pool named twice is refused.
fn needs(items: &[String]) -> Result<lachesis::model::Needs, ServiceError> {
    let pairs =
        items.iter().map(|item| lachesis::model::pool::parse_need(item)).collect::<Result<Vec<_>, _>>()?;
    Ok(lachesis::model::Needs::from_pairs(pairs)?)
}

/// The pipeline `--pipeline` names: a file, else `<workflows>/pipelines/NAME.yaml`.
fn pipeline(
    service: &Service,
    file: &std::path::Path,
) -> Result<lachesis::workflow::pipeline::Pipeline, String> {
    let path = match file.exists() || file.components().count() > 1 {
        true => file.to_path_buf(),
        false => {
            let catalog = service.settings.catalog().map_err(|e| e.to_string())?;
            catalog.dir().join("pipelines").join(file).with_extension("yaml")
        }
    };
    let text = super::input::read_text(&path, lachesis::yaml::MAX_BYTES as u64, "--pipeline")?;
    lachesis::workflow::pipeline::Pipeline::parse(&path, &text).map_err(|e| e.to_string())
}

/// One line of `run start --from`: what this run changes over the command line's flags.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RunLine {
    workflow: Option<String>,
    env: Option<String>,
    #[serde(default)]
    set: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    vars: BTreeMap<String, serde_json::Value>,
    priority: Option<i64>,
    #[serde(default)]
    needs: lachesis::model::Needs,
    /// Queued held (`run release` queues it).
    hold: Option<bool>,
    /// Overrides the workflow's `time_limit` (e.g. "10h").
    time_limit: Option<lachesis::workflow::Dur>,
    /// Runs it waits for, over the flags' (`[{"run": ID, "when": "ok|any|failed", "name": …}]`).
    #[serde(default)]
    after: Vec<AfterLine>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AfterLine {
    run: String,
    #[serde(default)]
    when: lachesis::model::When,
    name: Option<String>,
}

/// The requests of a `--from` file (or stdin), one per non-blank line, over `base`.
/// The largest `--from` file read: a sweep of some 100,000 lines.
const MAX_FROM_BYTES: u64 = 64 << 20;

fn requests_from(path: &std::path::Path, base: &SubmitRequest) -> Result<Vec<SubmitRequest>, String> {
    let text = super::input::read_text(path, MAX_FROM_BYTES, "--from")?;
    // Numbers and booleans are passed as their JSON text, the way `--set`/`--var` take them.
    let text_of = |v: serde_json::Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    let mut requests = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let line: RunLine = serde_json::from_str(line)
            .map_err(|e| format!("--from {} line {}: {e}", path.display(), number + 1))?;
        let mut request = base.clone();
        request.workflow = line.workflow.or(request.workflow);
        request.env_name = line.env.or(request.env_name);
        request.priority = line.priority.unwrap_or(request.priority);
        request.hold = line.hold.unwrap_or(request.hold);
        request.time_limit = line.time_limit.map(|d| d.0).or(request.time_limit);
        request.set.extend(line.set.into_iter().map(|(k, v)| (k, text_of(v))));
        request.vars.extend(line.vars.into_iter().map(|(k, v)| (k, text_of(v))));
        request.needs = request.needs.overlaid(&line.needs);
        request.after.extend(line.after.into_iter().map(|a| lachesis::service::After {
            target: lachesis::service::AfterTarget::Run(a.run),
            when: a.when,
            name: a.name,
        }));
        requests.push(request);
    }
    if requests.is_empty() {
        return Err(format!("--from {}: no runs in it (one JSON object per line)", path.display()));
    }
    Ok(requests)
}

fn print_status(status: &RunStatus) {
    let r = &status.run;
    println!("run       {}", r.id);
    println!(
        "workflow  {}{}",
        r.workflow,
        r.env_name.as_ref().map(|e| format!(" (env {e})")).unwrap_or_default()
    );
    println!("state     {}{}", r.state, r.reason.as_ref().map(|e| format!(": {e}")).unwrap_or_default());
    if let Some(at) = r.held_at {
        println!("held      since {} (`lachesis run release {}` queues it)", time(Some(at)), short_id(&r.id));
    }
    match (&status.resumed_from, r.attempt) {
        (Some(from), attempt) => {
            println!("attempt   {attempt}, resumed from step {} ({})", from.step, from.path)
        }
        (None, attempt) if attempt > 1 => println!("attempt   {attempt}"),
        _ => {}
    }
    if let Some(progress) = &r.progress {
        println!("progress  {}", progress.line());
    }
    if let Some(checkpoint) = &status.checkpoint {
        println!("checkpoint {}", super::checkpoints::line(checkpoint));
    }
    if let Some(node) = &r.node {
        println!("node      {node}");
    }
    if !r.needs.is_empty() {
        println!("needs     {}", r.needs);
    }
    for (pool, units) in &r.units {
        println!("units     {pool} {}", if units.is_empty() { "none".into() } else { units.join(",") });
    }
    if let Some(at) = r.time_limit_at {
        let left = std::time::Duration::from_millis((at - now_millis()).max(0) as u64);
        println!("time left {} (time limit)", lachesis::model::progress::span(left));
    }
    if let Some(why) = &status.waiting_for {
        println!("waiting   for {why}");
    }
    for dep in &status.after {
        println!("after     {}: {}", dep.describe(), dep.settled.as_str());
    }
    if let (Some(at), lachesis::model::RunState::Pending) = (r.not_before, r.state) {
        println!("retry at  {}", time(Some(at)));
    }
    println!("created   {}", time(Some(r.created_at)));
    if r.started_at.is_some() {
        println!("started   {}", time(r.started_at));
    }
    if r.ended_at.is_some() {
        println!("ended     {} (after {})", time(r.ended_at), duration(r.started_at, r.ended_at));
    }
    if let (Some(first), Some(since)) = (status.first_started_at, status.since_first_start_ms)
        && r.attempt > 1
    {
        let end = r.ended_at.unwrap_or_else(now_millis);
        println!(
            "attempts  {} since the first started ({}); attempt {} took {}",
            duration(Some(0), Some(since)),
            time(Some(first)),
            r.attempt,
            duration(r.started_at, r.started_at.map(|_| end))
        );
    }
    println!("directory {}", r.run_dir.display());
    for w in &status.wandb_runs {
        let url = w.url.as_ref().map(|u| format!("  {u}")).unwrap_or_default();
        println!("wandb     {} {}{url}", w.stage, w.id);
    }
    let mut t = table(["STAGE", "STATE", "PID", "STARTED", "UP AFTER", "RAN FOR", "LOG"]);
    for s in &status.stages {
        let pid = match (&s.record.process, s.slurm_job) {
            (_, Some(job)) => format!("slurm {job}"),
            (Some(p), None) => p.pid.to_string(),
            (None, None) => "-".into(),
        };
        t.add_row([
            s.name.clone(),
            stage_state(s, r.state.is_terminal()),
            pid,
            time(s.record.started_at),
            duration(s.record.started_at, s.ready_at),
            duration(s.record.started_at, s.record.ended_at.or(s.record.started_at.map(|_| now_millis()))),
            s.log_path.display().to_string(),
        ]);
    }
    println!("{t}");
}

fn event_line(event: &Event) -> String {
    let subject = match (&event.stage, event.from_state, event.to_state) {
        (Some(stage), _, _) => format!("stage {stage}"),
        (None, Some(from), Some(to)) => format!("{from} -> {to}"),
        _ => event.kind.as_str().to_string(),
    };
    format!("{}  {:<22} {}", time(Some(event.at)), subject, event.message)
}

/// True once nothing more will happen to the run.
fn settled(status: &RunStatus) -> bool {
    status.run.state.is_terminal() && !status.stages.iter().any(|s| s.record.state.is_live())
}

/// Prints events as they happen until the run has ended; on a terminal, a live line with each
/// stage's state. Exit status: success only for a completed run.
async fn follow_progress(service: &Service, id: &str, json: bool) -> CliResult {
    let run = service.resolve(id).await?;
    let tty = is_tty() && !json;
    let bar = tty.then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let mut last_event = 0;
    loop {
        let status = service.status(&run.id.to_string()).await?;
        for event in service.events_after(run.id, last_event).await? {
            last_event = event.id;
            if json {
                continue;
            }
            match &bar {
                Some(bar) => bar.println(event_line(&event)),
                None => println!("{}", event_line(&event)),
            }
        }
        if let Some(bar) = &bar {
            if let Some(progress) = &status.run.progress
                && let Some(total) = progress.total
            {
                if bar.length() != Some(total.max(0) as u64) {
                    bar.set_length(total.max(0) as u64);
                    if let Ok(style) =
                        indicatif::ProgressStyle::with_template("{bar:30.cyan/blue} {pos}/{len} {msg}")
                    {
                        bar.set_style(style);
                    }
                }
                bar.set_position(progress.step.max(0) as u64);
            }
            bar.set_message(progress_line(&status.run.state, &status.stages));
        }
        if settled(&status) {
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            if json {
                print_json(&status)?;
            } else {
                print_status(&status);
            }
            let ok = status.run.state == RunState::Completed;
            return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn progress_line(state: &RunState, stages: &[Stage]) -> String {
    let parts: Vec<String> =
        stages.iter().map(|s| format!("{} {}", s.name, stage_state(s, state.is_terminal()))).collect();
    format!("{state}: {}", parts.join(" · "))
}

/// Prints stage logs; with `follow`, keeps reading until the run has ended. Every read is one
/// bounded page from the service, so memory stays flat however big the log.
async fn logs(
    service: &Service,
    id: &str,
    only: Option<&str>,
    tail: Option<usize>,
    follow: bool,
    json: bool,
) -> CliResult {
    // Without --tail: everything one answer holds (a whole log, unless it is big).
    let lines = tail.unwrap_or(lachesis::service::MAX_TAIL_LINES);
    let opening = service.logs(id, only, LogRequest::Tail { lines }).await?;
    if json {
        print_json(&opening)?;
        return Ok(ExitCode::SUCCESS);
    }
    let prefix = opening.len() > 1;
    let mut stages = Vec::with_capacity(opening.len());
    for log in opening {
        let shown = (human_bytes(log.page.end - log.page.start), human_bytes(log.page.size));
        if tail.is_none() && log.page.start > 0 {
            eprintln!(
                "[{}: the last {} of {}; earlier output is left out: use --tail N]",
                log.stage, shown.0, shown.1
            );
        } else if log.page.cut {
            eprintln!("[{}: the last {} of {}, cut at the most one read shows]", log.stage, shown.0, shown.1);
        }
        let mut printed = LogPrinter {
            stage: log.stage,
            file: log.page.file,
            offset: log.page.end,
            pending: String::new(),
        };
        printed.print(&log.page.text, prefix, follow)?;
        stages.push(printed);
    }
    if !follow {
        return Ok(ExitCode::SUCCESS);
    }
    loop {
        let done = settled(&service.status(id).await?);
        for stage in &mut stages {
            // Read to the end (a page at a time), then the rest of a line only once it ended.
            loop {
                let request = LogRequest::Range { offset: stage.offset, limit: lachesis::logs::MAX_ANSWER };
                let Some(log) = service.logs(id, Some(&stage.stage), request).await?.pop() else { break };
                let page = log.page;
                if page.file == 0 {
                    break; // not there (yet, or between a rotation's two renames)
                }
                if stage.file != 0 && page.file != stage.file {
                    // Rotated: the rest of the file we were reading is `<log>.1` now.
                    stage.read_previous(service, id, prefix).await?;
                    (stage.file, stage.offset) = (page.file, 0);
                    continue;
                }
                stage.file = page.file;
                if page.size < stage.offset {
                    stage.offset = 0; // truncated: from its new start
                    continue;
                }
                stage.offset = page.end;
                stage.print(&page.text, prefix, true)?;
                if page.end >= page.size {
                    break;
                }
            }
            if done {
                let rest = std::mem::take(&mut stage.pending);
                stage.print(&rest, prefix, false)?;
            }
        }
        if done {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Where a stage's printed log stands.
struct LogPrinter {
    stage: String,
    /// The file being read (see `LogPage::file`).
    file: u64,
    /// The next byte to read.
    offset: u64,
    /// The start of a line still being written (while following).
    pending: String,
}

impl LogPrinter {
    /// Prints the rest of the file that was live before a rotation, from where we were.
    async fn read_previous(
        &mut self,
        service: &Service,
        id: &str,
        prefix: bool,
    ) -> Result<(), Box<dyn std::error::Error>> {
        loop {
            let request = LogRequest::Previous { offset: self.offset, limit: lachesis::logs::MAX_ANSWER };
            let Some(log) = service.logs(id, Some(&self.stage), request).await?.pop() else { return Ok(()) };
            // Rotated twice since the last look: that file's rest is gone from `.1`.
            if log.page.file != self.file {
                return Ok(());
            }
            self.offset = log.page.end;
            self.print(&log.page.text, prefix, true)?;
            if log.page.end >= log.page.size {
                return Ok(());
            }
        }
    }

    /// Prints `text` line by line; with `whole_lines`, a last line without its newline waits
    /// in `pending` (unless it grew past one answer: then it goes out as it is).
    fn print(&mut self, text: &str, prefix: bool, whole_lines: bool) -> std::io::Result<()> {
        self.pending.push_str(text);
        let end = match self.pending.rfind('\n') {
            Some(end) if whole_lines => end + 1,
            _ if whole_lines && (self.pending.len() as u64) < lachesis::logs::MAX_ANSWER => return Ok(()),
            _ => self.pending.len(),
        };
        let rest = self.pending.split_off(end);
        let ready = std::mem::replace(&mut self.pending, rest);
        let mut out = std::io::stdout().lock();
        for line in ready.lines() {
            if prefix {
                writeln!(out, "[{}] {line}", self.stage)?;
            } else {
                writeln!(out, "{line}")?;
            }
        }
        out.flush()
    }
}
