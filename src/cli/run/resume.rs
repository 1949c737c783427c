//! `lachesis run resume`: queue a failed or stopped run again as its next attempt.

use std::process::ExitCode;

use lachesis::service::Service;

use crate::cli::CliResult;
use crate::cli::output::print_json;

#[derive(clap::Args)]
pub struct ResumeArgs {
    id: String,
    /// The step of the checkpoint to resume from [default: the last resumable one]
    #[arg(long, value_name = "STEP")]
    from: Option<i64>,
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, ResumeArgs { id, from, json }: ResumeArgs) -> CliResult {
    let run = service.resume(&id, from).await?;
    if json {
        print_json(&lachesis::service::RunSummary::from(&run))?;
    } else {
        println!("{} {} (attempt {})", run.id, run.state, run.attempt);
    }
    Ok(ExitCode::SUCCESS)
}
