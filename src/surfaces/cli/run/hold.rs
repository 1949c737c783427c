//! `lachesis run hold`: keep pending runs out of the queue until `run release`.

use lachesis::service::{RunAction, RunSummary, Service};

use super::selection::{SelectionArgs, act};
use crate::cli::CliResult;

#[derive(clap::Args)]
pub struct HoldArgs {
    #[command(flatten)]
    runs: SelectionArgs,
}

pub async fn run(service: &Service, HoldArgs { runs }: HoldArgs) -> CliResult {
    act(service, RunAction::Hold, runs, summary_line).await
}

/// A run after a hold, release or edit: its id, state, whether it is held, and its priority.
pub(super) fn summary_line(run: &RunSummary) -> String {
    let held = if run.held_at.is_some() { " (held)" } else { "" };
    format!("{} {}{held} priority {}", run.id, run.state, run.priority)
}

/// A run after an edit, as a hold prints it (or its summary as JSON).
pub(super) fn print_summary(run: &lachesis::model::Run, json: bool) -> std::io::Result<()> {
    let summary = RunSummary::from(run);
    if json {
        return crate::cli::output::print_json(&summary);
    }
    println!("{}", summary_line(&summary));
    Ok(())
}
