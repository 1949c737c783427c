//! `lachesis run stop`: stop a run (a pending one is cancelled).

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
    let run = service.stop(&id).await?;
    if json {
        print_json(&lachesis::service::RunSummary::from(&run))?;
    } else {
        println!("{} {}", run.id, run.state);
    }
    Ok(ExitCode::SUCCESS)
}
