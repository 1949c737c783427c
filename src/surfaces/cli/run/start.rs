//! `lachesis run start`: one run, N identical runs, one per line of a file, or a pipeline.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use lachesis::model::When;
use lachesis::service::{DependencyRequest, RunRequest, Service, ServiceError};
use lachesis::settings::Settings;

use super::flags::{assignments, needs};
use crate::cli::CliResult;
use crate::cli::output::print_json;

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
    /// May be preempted by a run of higher priority (on a daemon started with `--preempt`):
    /// stopped, queued again and resumed from its last checkpoint
    #[arg(long)]
    preemptible: bool,
    /// Wait for the run to end, showing its progress; exit non-zero unless it completed
    #[arg(long, conflicts_with_all = ["count", "from"])]
    wait: bool,
    /// Queue N identical runs in one transaction; prints their ids in order
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    count: Option<u32>,
    /// Queue one run per line of FILE (`-`: stdin), in one transaction: JSON objects with any
    /// of workflow, env, vars, set, priority, stall_timeout, hold, time_limit, needs, preemptible,
    /// after, over the flags given here
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
    /// Wait for this sweep to end with a winner (repeatable; an id or unique prefix, or NAME=ID
    /// to use its winner's values as {after.NAME.best_run_id}, {after.NAME.best_trained_weights},
    /// …); the run fails if the sweep is stopped or no member reports its metric
    #[arg(long, value_name = "[NAME=]ID")]
    after_sweep: Vec<String>,
    /// Queue a pipeline: a YAML list of steps (a path, or a name in the workflows'
    /// `pipelines/` directory), in one transaction; prints the run ids in the file's order
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = [
            "count", "from", "wait", "workflow", "env", "set", "var", "after", "after_any", "after_failed", "after_sweep"
        ]
    )]
    pipeline: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

impl StartArgs {
    /// The run the flags describe (for `--from`, what each line's fields fall back to).
    fn request(&self) -> Result<RunRequest, ServiceError> {
        let after: Vec<DependencyRequest> =
            [(&self.after, When::Ok), (&self.after_any, When::Any), (&self.after_failed, When::Failed)]
                .into_iter()
                .flat_map(|(list, when)| {
                    list.iter().map(move |text| DependencyRequest::from_flag(text, when))
                })
                .chain(self.after_sweep.iter().map(|text| DependencyRequest::sweep_from_flag(text)))
                .collect();
        Ok(RunRequest {
            workflow: self.workflow.clone(),
            env: self.env.clone(),
            vars: assignments("--var", &self.var)?,
            set: assignments("--set", &self.set)?,
            priority: Some(self.priority),
            stall_timeout: self.stall_timeout,
            hold: self.hold.then_some(true),
            time_limit: self.time_limit,
            needs: needs(&self.needs)?,
            preemptible: self.preemptible.then_some(true),
            after: (!after.is_empty()).then_some(after),
        })
    }
}

/// Queues what the flags ask for. One run with nothing to wait for goes to the home's daemon
/// when one answers (it writes with the store it holds); everything else opens the store.
pub async fn run(settings: Settings, args: StartArgs) -> CliResult {
    if let StartArgs { wait: false, count: None, from: None, pipeline: None, .. } = &args
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
    let StartArgs { wait, count, json, .. } = args;
    let request = args.request()?;
    if let Some(file) = &args.pipeline {
        return queue_pipeline(&service, &pipeline(&service, file)?, json).await;
    }
    if count.is_some() || args.from.is_some() {
        let runs = match &args.from {
            Some(path) => service.submit_runs(requests_from(path, &request)?).await?,
            None => service.submit_runs(vec![request; count.unwrap_or(1) as usize]).await?,
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
    let run = service.submit_run(request).await?;
    if json && !wait {
        print_json(&lachesis::service::RunSummary::from(&run))?;
    } else if !json {
        println!("{}", run.id);
    }
    if wait {
        if !lachesis::wake::poke(&service.settings.socket_path(), lachesis::wake::Poke::Probe) {
            eprintln!("note: no daemon is running for this store yet; start one with `lachesis daemon`");
        }
        return super::watch::follow_progress(&service, &run.id.to_string(), json).await;
    }
    Ok(ExitCode::SUCCESS)
}

/// Queues a pipeline and prints an id per step in the file's order (a sweep step's is its
/// sweep's, with its members on stderr); `--json`: its runs, as before sweeps were steps.
async fn queue_pipeline(
    service: &Service,
    pipeline: &lachesis::workflow::pipeline::Pipeline,
    json: bool,
) -> CliResult {
    let queued = service.queue_pipeline(pipeline).await?;
    for (index, sweep, members) in &queued.sweeps {
        let step = lachesis::workflow::pipeline::step_label(&pipeline.steps[*index], *index);
        let ids: Vec<String> = members.iter().map(lachesis::model::short_id).collect();
        eprintln!("step {step}: sweep {}, {} members queued: {}", sweep.short_id(), ids.len(), ids.join(" "));
    }
    if json {
        let summaries: Vec<_> = queued.runs.iter().map(lachesis::service::RunSummary::from).collect();
        print_json(&summaries)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut runs = queued.runs.iter();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for index in 0..pipeline.steps.len() {
        match queued.sweeps.iter().find(|(at, ..)| *at == index) {
            Some((_, sweep, _)) => writeln!(out, "{}", sweep.id)?,
            None => {
                if let Some(run) = runs.next() {
                    writeln!(out, "{}", run.id)?;
                }
            }
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
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
    let text = crate::cli::input::read_text(&path, lachesis::yaml::MAX_BYTES as u64, "--pipeline")?;
    lachesis::workflow::pipeline::Pipeline::parse(&path, &text).map_err(|e| e.to_string())
}

/// The requests of a `--from` file (or stdin), one per non-blank line, over `base`.
/// The largest `--from` file read: a batch of some 100,000 lines.
const MAX_FROM_BYTES: u64 = 64 << 20;

fn requests_from(path: &std::path::Path, base: &RunRequest) -> Result<Vec<RunRequest>, String> {
    let text = crate::cli::input::read_text(path, MAX_FROM_BYTES, "--from")?;
    let mut requests = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let line = RunRequest::from_json(line)
            .map_err(|e| format!("--from {} line {}: {e}", path.display(), number + 1))?;
        requests.push(line.over(base));
    }
    if requests.is_empty() {
        return Err(format!("--from {}: no runs in it (one JSON object per line)", path.display()));
    }
    Ok(requests)
}
