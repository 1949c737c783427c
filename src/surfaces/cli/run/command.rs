//! The `run` subcommands, and which file runs each.

use lachesis::service::Service;
use lachesis::settings::Settings;

use super::{checkpoints, edit, events, hold, list, logs, metrics, release, resume, start, status, stop};
use crate::cli::CliResult;

#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum RunCommand {
    /// Queue a run; prints its id
    Start(start::StartArgs),
    /// List runs, newest first (pending runs in queue order)
    List(list::ListArgs),
    /// Show one run and its stages
    Status(status::StatusArgs),
    /// Stop runs (a pending one is cancelled): several ids, or --all/--state/--workflow/--sweep
    Stop(stop::StopArgs),
    /// Keep pending runs out of the queue until `run release` (several ids, or a filter)
    Hold(hold::HoldArgs),
    /// Put held runs back in the queue, each at its place (several ids, or a filter)
    Release(release::ReleaseArgs),
    /// Change a pending run's priority, variables or config fields (checked as at submission)
    Edit(edit::EditArgs),
    /// Print a run's stage logs: as much as fits in 1 MiB per stage (a note on stderr says
    /// when earlier output is left out), or the last N lines
    Logs(logs::LogsArgs),
    /// The run's event history
    Events(events::EventsArgs),
    /// Queue failed or stopped runs again as their next attempt, from their last checkpoint
    /// (several ids, or a filter)
    Resume(resume::ResumeArgs),
    /// The checkpoints the run's trainer wrote, across its attempts
    Checkpoints(checkpoints::CheckpointsArgs),
    /// The run's training-metric history, as the daemon read it from W&B
    Metrics(metrics::MetricsArgs),
}

pub async fn run(settings: Settings, command: RunCommand) -> CliResult {
    // `run start` may hand its run to the daemon without opening the store.
    let open = || Service::open(settings.clone());
    match command {
        RunCommand::Start(args) => start::run(settings, args).await,
        RunCommand::List(args) => list::run(&open().await?, args).await,
        RunCommand::Status(args) => status::run(&open().await?, args).await,
        RunCommand::Stop(args) => stop::run(&open().await?, args).await,
        RunCommand::Hold(args) => hold::run(&open().await?, args).await,
        RunCommand::Release(args) => release::run(&open().await?, args).await,
        RunCommand::Edit(args) => edit::run(&open().await?, args).await,
        RunCommand::Logs(args) => logs::run(&open().await?, args).await,
        RunCommand::Events(args) => events::run(&open().await?, args).await,
        RunCommand::Resume(args) => resume::run(&open().await?, args).await,
        RunCommand::Checkpoints(args) => checkpoints::run(&open().await?, args).await,
        RunCommand::Metrics(args) => metrics::run(&open().await?, args).await,
    }
}
