//! `lachesis run metrics`: a run's training metrics by name (from its workflow's `metrics:`
//! source and W&B), each with its last reading and count, or one metric's series (`--name`).

use std::process::ExitCode;

use lachesis::service::{NamedMetrics, Service};

use crate::cli::CliResult;
use crate::cli::output::{print_json, table};

#[derive(clap::Args)]
pub struct MetricsArgs {
    id: String,
    /// One metric's series (step, value, attempt), e.g. `env/all/reward/total`.
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, MetricsArgs { id, name, json }: MetricsArgs) -> CliResult {
    let metrics = service.run_named_metrics(&id, name.as_deref()).await?;
    if json {
        print_json(&metrics)?;
        return Ok(ExitCode::SUCCESS);
    }
    match metrics {
        NamedMetrics::Names { metrics, .. } if metrics.is_empty() => println!(
            "no metrics yet: they are read from the workflow's `metrics:` source while the run runs, \
             and from W&B when WANDB_API_KEY is set"
        ),
        NamedMetrics::Names { metrics, .. } => {
            let mut t = table(["NAME", "LAST", "STEP", "ATTEMPT", "COUNT"]);
            for m in &metrics {
                t.add_row([
                    lachesis::text::one_line(&m.name),
                    format!("{}", m.last.value),
                    m.last.step.to_string(),
                    m.last.attempt.to_string(),
                    m.count.to_string(),
                ]);
            }
            println!("{t}");
        }
        NamedMetrics::Series { name, points, .. } if points.is_empty() => {
            println!(
                "no readings of '{}' (`run metrics ID` lists the run's metrics)",
                lachesis::text::one_line(&name)
            )
        }
        NamedMetrics::Series { points, .. } => {
            let mut t = table(["STEP", "VALUE", "ATTEMPT"]);
            for p in &points {
                t.add_row([p.step.to_string(), format!("{}", p.value), p.attempt.to_string()]);
            }
            println!("{t}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
