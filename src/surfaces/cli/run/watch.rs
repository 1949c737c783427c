//! Following a run until it ends (`run start --wait`, `run status --watch`).

use std::time::Duration;

use lachesis::model::{RunState, Stage};
use lachesis::service::{RunStatus, Service};

use super::events::event_line;
use super::status::print_status;
use crate::cli::CliResult;
use crate::cli::output::{is_tty, print_json, stage_state};

/// True once nothing more will happen to the run.
pub(super) fn settled(status: &RunStatus) -> bool {
    status.run.state.is_terminal() && !status.stages.iter().any(|s| s.record.state.is_live())
}

/// Prints events as they happen until the run has ended; on a terminal, a live line with each
/// stage's state. Exit status: success only for a completed run.
pub(super) async fn follow_progress(service: &Service, id: &str, json: bool) -> CliResult {
    let run = service.resolve_run(id).await?;
    let tty = is_tty() && !json;
    let bar = tty.then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let mut last_event = 0;
    loop {
        let status = service.run_status(&run.id.to_string()).await?;
        for event in service.events_after(run.id, last_event).await? {
            last_event = event.id;
            if json {
                continue;
            }
            match &bar {
                Some(bar) => bar.println(event_line(&event)),
                None => println!("{}", event_line(&event)),
            }
        }
        if let Some(bar) = &bar {
            if let Some(progress) = &status.run.progress
                && let Some(total) = progress.total
            {
                if bar.length() != Some(total.max(0) as u64) {
                    bar.set_length(total.max(0) as u64);
                    if let Ok(style) =
                        indicatif::ProgressStyle::with_template("{bar:30.cyan/blue} {pos}/{len} {msg}")
                    {
                        bar.set_style(style);
                    }
                }
                bar.set_position(progress.step.max(0) as u64);
            }
            bar.set_message(progress_line(&status.run.state, &status.stages));
        }
        if settled(&status) {
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            if json {
                print_json(&status)?;
            } else {
                print_status(&status);
            }
            let ok = status.run.state == RunState::Completed;
            return Ok(crate::cli::exit_code::ok_or_not(ok));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn progress_line(state: &RunState, stages: &[Stage]) -> String {
    let parts: Vec<String> =
        stages.iter().map(|s| format!("{} {}", s.name, stage_state(s, state.is_terminal()))).collect();
    format!("{state}: {}", parts.join(" · "))
}
