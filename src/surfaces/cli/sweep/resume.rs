//! `lachesis sweep resume ID`: a stopped sweep goes on (the members its stop ended, and those
//! that failed with attempts left, run again; a bayes sweep gets new members up to its run_cap).

use std::process::ExitCode;

use lachesis::service::Service;

use crate::cli::CliResult;
use crate::cli::output::print_json;

#[derive(clap::Args)]
pub struct ResumeArgs {
    id: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, ResumeArgs { id, json }: ResumeArgs) -> CliResult {
    let sweep = service.resume_sweep(&id).await?;
    if json {
        print_json(&sweep)?;
    } else {
        println!("{} {}", sweep.id, sweep.state);
    }
    Ok(ExitCode::SUCCESS)
}
