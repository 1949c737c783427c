//! `lachesis schedule …`: cron schedules that enqueue inference tests (nightly regression checks).

use std::process::ExitCode;

use lachesis::model::Schedule;
use lachesis::service::{ScheduleDetail, Service};
use lachesis::settings::Settings;

use super::CliResult;
use super::output::{print_json, table, time};

#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum ScheduleCommand {
    /// Add a schedule: `--cron "0 3 * * *"` (5-field crontab or @daily-style aliases)
    Add {
        name: String,
        #[arg(long)]
        cron: String,
        /// IANA time zone of the cron expression [default: UTC]
        #[arg(long)]
        tz: Option<String>,
        #[command(flatten)]
        test: Box<super::test::TestOptions>,
        /// URL to POST to when a test finishes or regresses (repeatable)
        #[arg(long = "webhook")]
        webhooks: Vec<String>,
        /// Accuracy drop below the baseline (median of the last 5 succeeded tests) that marks a
        /// test regressed [default: 0.10]
        #[arg(long)]
        max_drop: Option<f64>,
        #[arg(long)]
        json: bool,
    },
    /// List schedules with their next due time
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show one schedule and its recent tests
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Stop firing (due times while paused are not caught up)
    Pause {
        name: String,
    },
    Resume {
        name: String,
    },
    /// Remove a schedule (its tests stay)
    Rm {
        name: String,
    },
}

fn next_due(schedule: &Schedule) -> Option<i64> {
    schedule.next_due(chrono::Utc::now())
}

/// A due time in the schedule's own zone, named (`2026-11-24 09:00:00 Europe/Paris`), or in UTC
/// saying so: the cron line is read in that zone, so its times read best there.
fn due_time(ms: Option<i64>, tz: Option<&str>) -> String {
    use chrono::TimeZone;
    let Some(utc) = ms.and_then(|ms| chrono::Utc.timestamp_millis_opt(ms).single()) else {
        return "-".into();
    };
    match tz.and_then(|name| name.parse::<chrono_tz::Tz>().ok()) {
        Some(zone) => format!("{} {zone}", utc.with_timezone(&zone).format("%Y-%m-%d %H:%M:%S")),
        None => format!("{} UTC", utc.format("%Y-%m-%d %H:%M:%S")),
    }
}

pub async fn run(settings: Settings, command: ScheduleCommand) -> CliResult {
    let service = Service::open(settings).await?;
    match command {
        ScheduleCommand::Add { name, cron, tz, test, webhooks, max_drop, json } => {
            let request = test.request();
            let schedule =
                service.add_schedule(&name, &cron, tz.as_deref(), &request, webhooks, max_drop).await?;
            if json {
                print_json(&schedule)?;
            } else {
                println!(
                    "added schedule {} ({}); next due {}",
                    schedule.name,
                    schedule.cron,
                    due_time(next_due(&schedule), schedule.tz.as_deref())
                );
            }
        }
        ScheduleCommand::List { json } => {
            let schedules = service.schedules().await?;
            if json {
                let rows: Vec<_> = schedules
                    .iter()
                    .map(|s| serde_json::json!({ "schedule": s, "next_due": next_due(s) }))
                    .collect();
                print_json(&rows)?;
            } else if schedules.is_empty() {
                println!("no schedules");
            } else {
                let mut t = table(["NAME", "CRON", "TZ", "ENV", "MODELS", "STATE", "NEXT DUE"]);
                for s in &schedules {
                    t.add_row([
                        s.name.clone(),
                        s.cron.clone(),
                        s.tz.clone().unwrap_or_else(|| "UTC".into()),
                        s.spec.env_name.clone(),
                        s.spec.models.join(", "),
                        if s.paused { "paused".into() } else { "active".into() },
                        if s.paused { "-".into() } else { due_time(next_due(s), s.tz.as_deref()) },
                    ]);
                }
                println!("{t}");
            }
        }
        ScheduleCommand::Show { name, json } => {
            let detail = service.schedule_detail(&name).await?;
            if json {
                print_json(&detail)?;
            } else {
                let ScheduleDetail { schedule, next_due, tests, events } = detail;
                println!(
                    "schedule  {} ({}{})",
                    schedule.name,
                    schedule.cron,
                    schedule.tz.as_ref().map(|t| format!(", {t}")).unwrap_or_default()
                );
                println!("test      {} against {}", schedule.spec.env_name, schedule.spec.models.join(", "));
                println!(
                    "next due  {}",
                    if schedule.paused {
                        "- (paused)".to_string()
                    } else {
                        due_time(next_due, schedule.tz.as_deref())
                    }
                );
                for event in &events {
                    println!("{}  {}", time(Some(event.at)), event.message);
                }
                for test in &tests {
                    println!("test {}  {}  {}", test.id, test.state, test.reason.clone().unwrap_or_default());
                }
            }
        }
        ScheduleCommand::Pause { name } => {
            service.pause_schedule(&name, true).await?;
            println!("paused {name}");
        }
        ScheduleCommand::Resume { name } => {
            service.pause_schedule(&name, false).await?;
            println!("resumed {name}");
        }
        ScheduleCommand::Rm { name } => {
            service.remove_schedule(&name).await?;
            println!("removed {name}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
