//! `lachesis run release`: put a held run back in the queue, at its place.

use std::process::ExitCode;

use lachesis::service::Service;

use super::hold::print_summary;
use crate::cli::CliResult;

#[derive(clap::Args)]
pub struct ReleaseArgs {
    id: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, ReleaseArgs { id, json }: ReleaseArgs) -> CliResult {
    print_summary(&service.release(&id).await?, json)?;
    Ok(ExitCode::SUCCESS)
}
