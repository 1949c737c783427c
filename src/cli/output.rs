//! How things look: tables, times, JSON.

use std::io::{IsTerminal, Write};

use comfy_table::{ContentArrangement, Table, presets};
use lachesis::model::{Exit, Millis, ProcessState, Stage};

pub fn print_json(value: &impl serde::Serialize) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)
}

pub fn is_tty() -> bool {
    std::io::stdout().is_terminal()
}

pub fn table<const N: usize>(header: [&str; N]) -> Table {
    let mut table = Table::new();
    table
        .load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header);
    table
}

/// Local wall-clock time, to the second.
pub fn time(ms: Option<Millis>) -> String {
    use chrono::TimeZone;
    match ms.and_then(|ms| chrono::Local.timestamp_millis_opt(ms).single()) {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S").to_string(),
        None => "-".into(),
    }
}

pub fn duration(from: Option<Millis>, to: Option<Millis>) -> String {
    let (Some(from), Some(to)) = (from, to) else {
        return "-".into();
    };
    let secs = (to - from).max(0) as f64 / 1000.0;
    if secs < 60.0 {
        format!("{secs:.1}s")
    } else if secs < 3600.0 {
        format!("{}m{:02}s", (secs / 60.0) as u64, secs as u64 % 60)
    } else {
        format!("{}h{:02}m", (secs / 3600.0) as u64, (secs as u64 % 3600) / 60)
    }
}

/// A stage's state in words, with its exit status once it has one.
pub fn stage_state(stage: &Stage, run_ended: bool) -> String {
    match (stage.record.state, stage.record.exit) {
        (ProcessState::Pending, _) if run_ended => "not started".into(),
        (ProcessState::Exited, Some(Exit::Code(code))) => format!("exited {code}"),
        (ProcessState::Exited, Some(Exit::Signal(sig))) => {
            format!("killed by {}", lachesis::model::signal_name(sig))
        }
        (ProcessState::Exited, None) => "did not start".into(),
        (state, _) => state.to_string(),
    }
}
