//! `lachesis sweep stop ID`: cancel a sweep's pending members and stop its started ones.

use std::process::ExitCode;

use lachesis::service::Service;

use crate::cli::CliResult;
use crate::cli::output::print_json;

#[derive(clap::Args)]
pub struct StopArgs {
    id: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, StopArgs { id, json }: StopArgs) -> CliResult {
    let sweep = service.stop_sweep(&id).await?;
    if json {
        print_json(&sweep)?;
    } else {
        println!("{} {}", sweep.id, sweep.state);
    }
    Ok(ExitCode::SUCCESS)
}
