//! `lachesis run events`: the run's event history.

use std::process::ExitCode;

use lachesis::model::Event;
use lachesis::service::Service;

use crate::cli::CliResult;
use crate::cli::output::{print_json, time};

#[derive(clap::Args)]
pub struct EventsArgs {
    id: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, EventsArgs { id, json }: EventsArgs) -> CliResult {
    let (_, events) = service.run_events(&id).await?;
    if json {
        print_json(&events)?;
    } else {
        for event in &events {
            println!("{}", event_line(event));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn event_line(event: &Event) -> String {
    let subject = match (&event.stage, event.from_state, event.to_state) {
        (Some(stage), _, _) => format!("stage {stage}"),
        (None, Some(from), Some(to)) => format!("{from} -> {to}"),
        _ => event.kind.as_str().to_string(),
    };
    format!("{}  {:<22} {}", time(Some(event.at)), subject, event.message)
}
