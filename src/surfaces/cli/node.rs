use std::process::ExitCode;

use lachesis::service::Service;
use lachesis::settings::Settings;

use super::CliResult;
use super::output::{print_json, table};

#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum NodeCommand {
    /// The daemons sharing this PostgreSQL store: labels, heartbeat age, runs
    List {
        #[arg(long)]
        json: bool,
    },
    /// Drop a lost node from the list (its runs were settled when it was reaped)
    Forget { node: String },
}

pub async fn run(settings: Settings, command: NodeCommand) -> CliResult {
    let service = Service::open(settings).await?;
    match command {
        NodeCommand::List { json } => {
            let nodes = service.nodes().await?;
            if json {
                print_json(&nodes)?;
                return Ok(ExitCode::SUCCESS);
            }
            let mut t = table(["NODE", "STATE", "LABELS", "HEARTBEAT", "LEASE", "RUNS", "HOST", "PID"]);
            for view in &nodes {
                let node = &view.node;
                let labels: Vec<String> = node.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                t.add_row([
                    node.id.clone(),
                    view.health.to_string(),
                    if labels.is_empty() { "-".into() } else { labels.join(",") },
                    format!("{:.1}s ago", view.heartbeat_age_ms as f64 / 1000.0),
                    format!("{}s", node.lease_ms / 1000),
                    node.runs.to_string(),
                    node.hostname.clone(),
                    node.pid.to_string(),
                ]);
            }
            if nodes.is_empty() {
                println!("no node has registered yet (start one with `lachesis daemon`)");
            } else {
                println!("{t}");
            }
        }
        NodeCommand::Forget { node } => {
            service.forget_node(&node).await?;
            println!("forgot node {node}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
