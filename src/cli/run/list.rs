//! `lachesis run list`: runs, newest first (pending runs in queue order).

use std::process::ExitCode;

use lachesis::model::{RunQuery, RunState, now_millis, short_id};
use lachesis::service::Service;

use crate::cli::CliResult;
use crate::cli::output::{duration, print_json, table, time};

#[derive(clap::Args)]
pub struct ListArgs {
    #[arg(long)]
    state: Option<RunState>,
    #[arg(long, default_value_t = 50)]
    limit: i64,
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, ListArgs { state, limit, json }: ListArgs) -> CliResult {
    let runs = service.list(&RunQuery { state, limit: Some(limit) }).await?;
    if json {
        print_json(&runs)?;
    } else if runs.is_empty() {
        println!("no runs");
    } else {
        let mut t =
            table(["ID", "WORKFLOW", "ENV", "STATE", "STEP", "PRIO", "CREATED", "DURATION", "REASON"]);
        // Several daemons: say where each run is; a retried run, which attempt.
        let nodes = runs.iter().any(|r| r.node.is_some()) && service.backend().supports_nodes();
        for r in &runs {
            let end = r.ended_at.or(r.started_at.map(|_| now_millis()));
            let mut state = r.state.to_string();
            if r.held_at.is_some() {
                state.push_str(" (held)");
            }
            if r.deps_open > 0 && r.state == RunState::Pending {
                state.push_str(&format!(" (waits for {})", runs_word(r.deps_open)));
            }
            if r.attempt > 1 {
                state.push_str(&format!(" (attempt {})", r.attempt));
            }
            if let (true, Some(node)) = (nodes, &r.node) {
                state.push_str(&format!(" @{node}"));
            }
            t.add_row([
                short_id(&r.id),
                r.workflow.clone(),
                r.env_name.clone().unwrap_or_else(|| "-".into()),
                state,
                r.progress.as_ref().map_or_else(|| "-".into(), |p| p.short()),
                r.priority.to_string(),
                time(Some(r.created_at)),
                duration(r.started_at, end),
                r.reason.clone().unwrap_or_default(),
            ]);
        }
        println!("{t}");
    }
    Ok(ExitCode::SUCCESS)
}

/// "1 run", "3 runs".
fn runs_word(n: i64) -> String {
    if n == 1 { "1 run".into() } else { format!("{n} runs") }
}
