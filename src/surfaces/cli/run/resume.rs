//! `lachesis run resume`: queue failed or stopped runs again, each as its next attempt.

use lachesis::service::{RunAction, Service};

use super::selection::{SelectionArgs, act};
use crate::cli::CliResult;

#[derive(clap::Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    runs: SelectionArgs,
    /// The step of the checkpoint to resume from [default: each run's last resumable one]
    #[arg(long, value_name = "STEP")]
    from: Option<i64>,
}

pub async fn run(service: &Service, ResumeArgs { runs, from }: ResumeArgs) -> CliResult {
    act(service, RunAction::Resume { from }, runs, |run| {
        format!("{} {} (attempt {})", run.id, run.state, run.attempt)
    })
    .await
}
