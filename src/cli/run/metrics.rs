//! `lachesis run metrics`: the run's training-metric history, as the daemon read it from W&B.

use std::process::ExitCode;

use lachesis::service::Service;

use crate::cli::CliResult;
use crate::cli::output::{print_json, table};

#[derive(clap::Args)]
pub struct MetricsArgs {
    id: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, MetricsArgs { id, json }: MetricsArgs) -> CliResult {
    let history = service.metric_history(&id).await?;
    if json {
        print_json(&history.rows)?;
    } else {
        print_metric_history(&history.rows);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_metric_history(rows: &[lachesis::model::MetricRow]) {
    if rows.is_empty() {
        println!(
            "no metric history: the daemon reads it from W&B while the run runs, when WANDB_API_KEY is set"
        );
        return;
    }
    let number = |value: Option<f64>| value.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into());
    let mut t = table(["STEP", "REWARD_MEAN", "PERCENT_CORRECT", "EVAL_PERCENT_CORRECT", "LOSS"]);
    for row in rows {
        t.add_row([
            row.step.to_string(),
            number(row.reward_mean),
            number(row.percent_correct),
            number(row.eval_percent_correct),
            number(row.loss),
        ]);
    }
    println!("{t}");
}
