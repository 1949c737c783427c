//! `lachesis gc`: forget finished runs and tests older than a limit.

use std::process::ExitCode;

use lachesis::service::Service;
use lachesis::settings::Settings;
use lachesis::workflow::Dur;

use super::CliResult;
use super::output::print_json;

#[derive(clap::Args)]
pub struct GcArgs {
    /// Forget what ended longer ago than this (e.g. 12h, 30d); pending and live runs are kept
    #[arg(long, value_name = "AGE", default_value = "30d")]
    older_than: Dur,
    /// Say what would go, remove nothing
    #[arg(long)]
    dry_run: bool,
    #[arg(long)]
    json: bool,
}

pub async fn run(settings: Settings, args: GcArgs) -> CliResult {
    let service = Service::open(settings).await?;
    let report = service.collect_garbage(args.older_than.0, args.dry_run, None).await?;
    if args.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if report.dry_run { "would free" } else { "freed" };
    println!(
        "{verb} {} runs, {} tests, {} on disk (ended more than {} ago)",
        report.runs,
        report.tests,
        lachesis::launch::space::human_bytes(report.bytes),
        age(args.older_than.0)
    );
    if report.foreign_dirs > 0 {
        println!(
            "{} directories are outside this home's runs/ and tests/ and were left alone",
            report.foreign_dirs
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `30d`, `12h`, `90s`: the largest whole unit (`text::whole_units`).
fn age(d: std::time::Duration) -> String {
    lachesis::text::whole_units(d)
}
