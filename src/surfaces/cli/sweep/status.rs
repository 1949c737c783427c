//! `lachesis sweep status ID`: the leaderboard.

use std::process::ExitCode;

use lachesis::model::short_id;
use lachesis::model::sweep::{python_float, var_text};
use lachesis::service::{Service, SweepStatus};

use crate::cli::CliResult;
use crate::cli::output::{print_json, table, time};

/// How often `--watch` reads the leaderboard again.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(clap::Args)]
pub struct StatusArgs {
    id: String,
    /// Show the leaderboard again every 2 s until every member has ended
    #[arg(long)]
    watch: bool,
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, StatusArgs { id, watch, json }: StatusArgs) -> CliResult {
    loop {
        let status = service.sweep_status(&id).await?;
        let ended = status.counts.iter().all(|(state, _)| state.is_terminal());
        if json {
            // One line per reading while watching, so a reader can follow the stream.
            match watch {
                true => println!("{}", serde_json::to_string(&status)?),
                false => print_json(&status)?,
            }
        } else {
            if watch && crate::cli::output::is_tty() {
                // Clear the screen and home the cursor: the board is redrawn in place.
                print!("\x1b[2J\x1b[H");
            }
            print!("{}", render(&status));
        }
        if !watch || ended {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
}

/// The leaderboard as text: a header, then one row per member, best first.
fn render(status: &SweepStatus) -> String {
    let s = &status.sweep;
    let mut out = format!("sweep     {}\nworkflow  {}\nstate     {}", s.id, s.workflow, s.state);
    if let Some(reason) = &s.reason {
        out.push_str(&format!(" ({reason})"));
    }
    if let (Some("pbt"), Some(metric)) = (s.method.as_deref(), &status.metric) {
        out.push_str(&format!(
            "\nmethod    pbt: {} exploit{} (losers continue from the winners' checkpoints by {metric})",
            status.exploits.len(),
            if status.exploits.len() == 1 { "" } else { "s" }
        ));
    }
    if s.method.as_deref() == Some("bayes") {
        // Its members are made as slots open: say how far it is (grid and random say nothing).
        out.push_str(&format!(
            "\nmethod    bayes: {} of {} members suggested so far",
            status.leaderboard.len(),
            s.members
        ));
    }
    let counts: Vec<String> = status.counts.iter().map(|(state, n)| format!("{n} {state}")).collect();
    out.push_str(&format!("\nmembers   {} ({})", s.members, counts.join(", ")));
    if let Some(max_live) = s.max_live {
        out.push_str(&format!(", at most {max_live} at once"));
    }
    if let (Some(metric), Some(goal)) = (&status.metric, status.goal) {
        out.push_str(&format!("\nmetric    {metric} ({goal})"));
    }
    if let Some(resumed) = status.resumes.last() {
        // The last resume, and how many there were.
        let times = match status.resumes.len() {
            1 => String::new(),
            n => format!(" (resumed {n} times)"),
        };
        out.push_str(&format!("\nresumed   {} {}{times}", time(Some(resumed.at)), resumed.message));
    }
    if let Some(unreported) = &status.unreported {
        out.push_str(&format!("\nwaiting   {unreported}"));
    }
    out.push_str(&format!("\ncreated   {}\n", time(Some(s.created_at))));
    let parameters: Vec<String> =
        status.leaderboard.first().map(|m| m.parameters.keys().cloned().collect()).unwrap_or_default();
    let mut header = vec!["K".to_string(), "RUN".into(), "STATE".into()];
    header.extend(parameters.iter().map(|p| p.to_uppercase()));
    header.extend(["BEST".into(), "AT STEP".into(), "LAST".into(), "READINGS".into(), "REASON".into()]);
    let mut t = table::<0>([]);
    t.set_header(header);
    for m in &status.leaderboard {
        let mut state = m.state.to_string();
        if status.winner == Some(m.k) {
            state.push_str(" (winner)");
        }
        let mut row = vec![m.k.to_string(), short_id(&m.run), state];
        row.extend(parameters.iter().map(|p| m.parameters.get(p).map_or_else(|| "-".into(), var_text)));
        let number = |v: Option<f64>| v.map_or_else(|| "-".into(), python_float);
        row.push(number(m.best));
        row.push(m.best_step.map_or_else(|| "-".into(), |step| step.to_string()));
        row.push(number(m.last));
        row.push(m.iterations.to_string());
        row.push(m.reason.clone().unwrap_or_default());
        t.add_row(row);
    }
    out.push_str(&format!("{t}\n"));
    if !status.exploits.is_empty() {
        // A pbt sweep's lineage: which member copied which, when, with what.
        out.push_str("exploits\n");
        for e in &status.exploits {
            let applied = if e.applied_at.is_some() { "" } else { " (stopping)" };
            out.push_str(&format!("  {}  {}{applied}\n", time(Some(e.decided_at)), e.describe()));
        }
    }
    out
}
