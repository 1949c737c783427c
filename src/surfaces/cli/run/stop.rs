//! `lachesis run stop`: stop runs (a pending one is cancelled).

use lachesis::service::{RunAction, Service};

use super::selection::{SelectionArgs, act};
use crate::cli::CliResult;

#[derive(clap::Args)]
pub struct StopArgs {
    #[command(flatten)]
    runs: SelectionArgs,
}

pub async fn run(service: &Service, StopArgs { runs }: StopArgs) -> CliResult {
    act(service, RunAction::Stop, runs, |run| format!("{} {}", run.id, run.state)).await
}
