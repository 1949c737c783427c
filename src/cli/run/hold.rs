//! `lachesis run hold`: keep a pending run out of the queue until `run release`.

use std::process::ExitCode;

use lachesis::service::Service;

use crate::cli::CliResult;
use crate::cli::output::print_json;

#[derive(clap::Args)]
pub struct HoldArgs {
    id: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, HoldArgs { id, json }: HoldArgs) -> CliResult {
    print_summary(&service.hold(&id).await?, json)?;
    Ok(ExitCode::SUCCESS)
}

/// A run after a hold, release or edit: its id, state and whether it is held.
pub(super) fn print_summary(run: &lachesis::model::Run, json: bool) -> std::io::Result<()> {
    if json {
        return print_json(&lachesis::service::RunSummary::from(run));
    }
    let held = if run.held_at.is_some() { " (held)" } else { "" };
    println!("{} {}{held} priority {}", run.id, run.state, run.priority);
    Ok(())
}
