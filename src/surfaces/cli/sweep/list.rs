//! `lachesis sweep list`: sweeps, newest first, each with why it ended (empty while it runs).

use std::process::ExitCode;

use lachesis::model::short_id;
use lachesis::service::Service;

use crate::cli::CliResult;
use crate::cli::output::{print_json, table, time};

#[derive(clap::Args)]
pub struct ListArgs {
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, ListArgs { json }: ListArgs) -> CliResult {
    let sweeps = service.sweeps().await?;
    if json {
        print_json(&sweeps)?;
    } else if sweeps.is_empty() {
        println!("no sweeps");
    } else {
        let mut t = table(["ID", "WORKFLOW", "STATE", "MEMBERS", "MAX LIVE", "CREATED", "REASON"]);
        for s in &sweeps {
            t.add_row([
                short_id(&s.id),
                s.workflow.clone(),
                s.state.to_string(),
                s.members.to_string(),
                s.max_live.map_or_else(|| "-".into(), |n| n.to_string()),
                time(Some(s.created_at)),
                s.ended.as_ref().map(ToString::to_string).unwrap_or_default(),
            ]);
        }
        println!("{t}");
    }
    Ok(ExitCode::SUCCESS)
}
