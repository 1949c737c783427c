//! `lachesis run edit`: change a pending run's priority, variables, config fields or needs.

use std::process::ExitCode;

use lachesis::service::Service;

use super::flags::{assignments, needs};
use super::hold::print_summary;
use crate::cli::CliResult;

#[derive(clap::Args)]
pub struct EditArgs {
    id: String,
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i64>,
    /// Config field (repeatable): --set group_size=16
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    set: Vec<String>,
    /// Workflow variable (repeatable): --var steps=3
    #[arg(long = "var", value_name = "NAME=VALUE")]
    var: Vec<String>,
    /// Units of the daemon's pools (repeatable): --needs gpu=1
    #[arg(long = "needs", value_name = "POOL=COUNT")]
    needs: Vec<String>,
    #[arg(long)]
    json: bool,
}

pub async fn run(
    service: &Service,
    EditArgs { id, priority, set, var, needs: asked, json }: EditArgs,
) -> CliResult {
    let request = lachesis::service::EditRequest {
        priority,
        vars: assignments("--var", &var)?,
        set: assignments("--set", &set)?,
        needs: needs(&asked)?,
    };
    print_summary(&service.edit_run(&id, request).await?, json)?;
    Ok(ExitCode::SUCCESS)
}
