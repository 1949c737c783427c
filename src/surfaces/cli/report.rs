//! `lachesis report`: the morning report, as tables or JSON.

use std::process::ExitCode;

use lachesis::service::{Report, ReportRun, Service};
use lachesis::settings::Settings;
use lachesis::workflow::Dur;

use super::CliResult;
use super::output::{duration, print_json, table, time};

#[derive(clap::Args)]
pub struct ReportArgs {
    /// The window: runs and tests that ended this long ago or since, and those still going
    /// (e.g. 12h, 30m, 2d; at most 30d)
    #[arg(long, value_name = "AGE", default_value = "12h", value_parser = parse_window)]
    since: Dur,
    #[arg(long)]
    json: bool,
}

/// A window longer than zero.
fn parse_window(text: &str) -> Result<Dur, String> {
    text.parse::<Dur>()?.positive()
}

pub async fn run(settings: Settings, args: ReportArgs) -> CliResult {
    let service = Service::open(settings).await?;
    let report = service.report(args.since.0).await?;
    if args.json {
        print_json(&report)?;
    } else {
        print!("{}", render(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn dash(text: Option<String>) -> String {
    text.filter(|t| !t.is_empty()).unwrap_or_else(|| "-".into())
}

/// Since its first attempt started and, for a retried run, its last attempt's own time:
/// `3h 5m (last attempt 1h)`.
fn run_duration(run: &ReportRun) -> String {
    let total = duration(Some(0), run.total_ms.or(run.duration_ms));
    if run.attempt > 1 {
        format!("{total} (last attempt {})", duration(Some(0), run.duration_ms))
    } else {
        total
    }
}

fn render(report: &Report) -> String {
    let mut out = format!(
        "Report over the last {}: {} to {}\n\n",
        report.window,
        time(Some(report.since)),
        time(Some(report.until))
    );
    if report.runs.is_empty() {
        out.push_str("No run ended in the window, and none is running.\n");
    } else {
        let mut t = table([
            "RUN", "WORKFLOW", "ENV", "OUTCOME", "ATTEMPT", "STEP", "DURATION", "SAVED", "METRICS", "REASON",
        ]);
        for run in &report.runs {
            t.add_row([
                lachesis::model::short_id(&run.id),
                run.workflow.clone(),
                dash(run.env_name.clone()),
                run.state.to_string(),
                dash(run.attempt_line()),
                dash(run.step_line()),
                run_duration(run),
                dash(run.saved_line()),
                dash(run.metrics_line()),
                dash(run.reason.clone()),
            ]);
        }
        out.push_str(&format!("{t}\n"));
    }
    if report.more_runs > 0 {
        out.push_str(&format!("… and {} more runs (see `lachesis run list`)\n", report.more_runs));
    }
    if report.preemptions > 0 {
        let lost = std::time::Duration::from_millis(report.preempted_work_ms.max(0) as u64);
        out.push_str(&format!(
            "Preemptions: {}, ≈ {} of work lost (redone from the last checkpoints)\n",
            report.preemptions,
            lachesis::model::progress::span(lost)
        ));
    }
    for run in report.runs.iter().filter(|r| !r.log_tail.is_empty()) {
        out.push_str(&format!(
            "\n{} failed: last lines of {}:\n",
            lachesis::model::short_id(&run.id),
            run.failed_stage.as_deref().unwrap_or("its log")
        ));
        for line in &run.log_tail {
            out.push_str(&format!("    {line}\n"));
        }
    }
    out.push('\n');
    if report.tests.is_empty() {
        out.push_str("No inference test ended in the window, and none is running.\n");
    } else {
        let mut t = table(["TEST", "ENV", "SCHEDULE", "OUTCOME", "DURATION", "ACCURACY", "REGRESSIONS"]);
        for test in &report.tests {
            t.add_row([
                lachesis::model::short_id(&test.id),
                test.env_name.clone(),
                dash(test.schedule.clone()),
                test.state.to_string(),
                duration(Some(0), test.duration_ms),
                dash(Some(test.accuracy_line())),
                dash(Some(test.regressions_line())),
            ]);
        }
        out.push_str(&format!("{t}\n"));
    }
    if report.more_tests > 0 {
        out.push_str(&format!("… and {} more tests (see `lachesis test list`)\n", report.more_tests));
    }
    if !report.sweeps.is_empty() {
        let mut t = table(["SWEEP", "WORKFLOW", "STATE", "MEMBERS", "BEST", "EARLY TERMINATION"]);
        for sweep in &report.sweeps {
            t.add_row([
                lachesis::model::short_id(&sweep.id),
                sweep.workflow.clone(),
                sweep.state.to_string(),
                sweep.members_line(),
                dash(sweep.best_line()),
                dash(sweep.early_termination_line()),
            ]);
        }
        out.push_str(&format!("\nSweeps:\n{t}\n"));
    }
    if report.more_sweeps > 0 {
        out.push_str(&format!("… and {} more sweeps (see `lachesis sweep list`)\n", report.more_sweeps));
    }
    let waiting = &report.waiting;
    out.push_str(&format!(
        "\nruns: {}\ntests: {}\nwaiting: {} pending, {} held, {} tests queued\n",
        report.run_tally(),
        report.test_tally(),
        waiting.pending,
        waiting.held,
        waiting.queued_tests
    ));
    out
}
