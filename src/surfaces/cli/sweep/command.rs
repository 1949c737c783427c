//! The `sweep` subcommands, and which file runs each.

use lachesis::service::Service;
use lachesis::settings::Settings;

use super::{list, resume, start, status, stop};
use crate::cli::CliResult;

#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum SweepCommand {
    /// Queue a sweep from a sweep file (W&B's format with lachesis' keys); prints its id and
    /// members
    Start(start::StartArgs),
    /// List sweeps, newest first
    List(list::ListArgs),
    /// A sweep's leaderboard: each member's parameters, state and best metric value
    Status(status::StatusArgs),
    /// Stop a sweep: its pending members are cancelled, its started ones stopped
    Stop(stop::StopArgs),
    /// Resume a stopped sweep: the members its stop ended (and those that failed with attempts
    /// left) run again, a bayes sweep gets new members up to its run_cap
    Resume(resume::ResumeArgs),
}

pub async fn run(settings: Settings, command: SweepCommand) -> CliResult {
    let service = Service::open(settings).await?;
    match command {
        SweepCommand::Start(args) => start::run(&service, args).await,
        SweepCommand::List(args) => list::run(&service, args).await,
        SweepCommand::Status(args) => status::run(&service, args).await,
        SweepCommand::Stop(args) => stop::run(&service, args).await,
        SweepCommand::Resume(args) => resume::run(&service, args).await,
    }
}
