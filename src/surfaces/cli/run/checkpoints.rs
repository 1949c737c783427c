//! `lachesis run checkpoints`: the checkpoints the run's trainer wrote, across its attempts.

use std::process::ExitCode;

use lachesis::service::Service;

use crate::cli::CliResult;
use crate::cli::output::print_json;

#[derive(clap::Args)]
pub struct CheckpointsArgs {
    id: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, CheckpointsArgs { id, json }: CheckpointsArgs) -> CliResult {
    let (_, checkpoints) = service.run_checkpoints(&id).await?;
    if json {
        print_json(&checkpoints)?;
    } else {
        crate::cli::checkpoints::print(&checkpoints);
    }
    Ok(ExitCode::SUCCESS)
}
