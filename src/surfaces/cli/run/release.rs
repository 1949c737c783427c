//! `lachesis run release`: put held runs back in the queue, each at its place.

use lachesis::service::{RunAction, Service};

use super::hold::summary_line;
use super::selection::{SelectionArgs, act};
use crate::cli::CliResult;

#[derive(clap::Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    runs: SelectionArgs,
}

pub async fn run(service: &Service, ReleaseArgs { runs }: ReleaseArgs) -> CliResult {
    act(service, RunAction::Release, runs, summary_line).await
}
