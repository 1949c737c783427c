//! `lachesis run list`: runs, newest first (pending runs in queue order).

use std::process::ExitCode;

use lachesis::model::{Dependency, RunQuery, RunState, now_millis, short_id};
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
    let runs = service.runs(&RunQuery { state, limit: Some(limit) }).await?;
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
                state.push_str(&format!(" (waits for {})", waits_for(&r.waits_for, r.deps_open)));
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

/// How many runs `waits_for` shows before "+N more".
const SHOWN_DEPENDENCIES: usize = 3;

/// What a waiting run waits for, short: "1a2b3c4d ok, sweep 5e6f7a8b" (the first three, then
/// "+N more"); "2 runs" when the edges were not read.
fn waits_for(open: &[Dependency], count: i64) -> String {
    if open.is_empty() {
        return if count == 1 { "1 run".into() } else { format!("{count} runs") };
    }
    let shown: Vec<String> = open.iter().take(SHOWN_DEPENDENCIES).map(Dependency::brief).collect();
    let more = open.len().saturating_sub(SHOWN_DEPENDENCIES);
    let more = if more > 0 { format!(" +{more} more") } else { String::new() };
    format!("{}{more}", shown.join(", "))
}

#[cfg(test)]
mod tests {
    use lachesis::model::{Awaited, Settled, When};
    use uuid::Uuid;

    use super::*;

    fn dep(n: u128, when: When) -> Dependency {
        let awaited = Awaited::Run { run: Uuid::from_u128(n << 96), state: None };
        Dependency { awaited, when, name: None, settled: Settled::Waiting }
    }

    #[test]
    fn a_waiting_run_shows_three_dependencies_then_how_many_more() {
        let one = [dep(0x1a2b3c4d, When::Ok)];
        assert_eq!(waits_for(&one, 1), "1a2b3c4d ok");
        let five: Vec<_> =
            (1..=5).map(|n| dep(n, [When::Ok, When::Any, When::Failed][n as usize % 3])).collect();
        assert_eq!(waits_for(&five, 5), "00000001 any, 00000002 failed, 00000003 ok +2 more");
        assert_eq!(waits_for(&five[..3], 3), "00000001 any, 00000002 failed, 00000003 ok");
        assert_eq!(waits_for(&[], 2), "2 runs");
        let sweep = Dependency {
            awaited: Awaited::Sweep { sweep: Uuid::from_u128(0x5e6f7a8b << 96), state: None },
            when: When::Ok,
            name: Some("tune".into()),
            settled: Settled::Waiting,
        };
        assert_eq!(waits_for(&[one[0].clone(), sweep], 2), "1a2b3c4d ok, sweep 5e6f7a8b");
    }
}
