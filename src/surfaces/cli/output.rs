//! How things look: tables, times, JSON.

use std::io::{IsTerminal, Write};

use comfy_table::{ContentArrangement, Table, presets};
use lachesis::model::{Exit, Millis, ProcessState, Stage};

pub fn print_json(value: &impl serde::Serialize) -> std::io::Result<()> {
    // Buffered: stdout flushes at each newline, and pretty JSON has one per field (a big
    // sweep's leaderboard was 15,000 writes).
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    out.flush()
}

/// Makes a closed stdout (`lachesis run list | head -2`) end the program quietly with success,
/// as ripgrep does, instead of panicking inside `println!`. The hook only catches that one
/// panic; any other goes to the default hook.
pub fn exit_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to std") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// Whether an error returned to `main` is a write to a closed pipe (ends quietly too).
pub fn is_broken_pipe(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(err) = source {
        if err.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
            return true;
        }
        if err.downcast_ref::<serde_json::Error>().and_then(|e| e.io_error_kind())
            == Some(std::io::ErrorKind::BrokenPipe)
        {
            return true;
        }
        source = err.source();
    }
    false
}

pub fn is_tty() -> bool {
    std::io::stdout().is_terminal()
}

/// A table for people: columns separated by spaces, no borders, and no trailing spaces (comfy-table
/// pads every cell, the last column included, to its width).
pub fn table<const N: usize>(header: [&str; N]) -> PlainTable {
    let mut table = Table::new();
    table
        .load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header);
    PlainTable(table)
}

/// A comfy-table whose lines end at their last character.
pub struct PlainTable(Table);

impl std::ops::Deref for PlainTable {
    type Target = Table;
    fn deref(&self) -> &Table {
        &self.0
    }
}

impl std::ops::DerefMut for PlainTable {
    fn deref_mut(&mut self) -> &mut Table {
        &mut self.0
    }
}

impl std::fmt::Display for PlainTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, line) in self.0.lines().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(line.trim_end())?;
        }
        Ok(())
    }
}

/// Local wall-clock time, to the second (`text::clock`).
pub fn time(ms: Option<Millis>) -> String {
    lachesis::text::clock(ms)
}

/// The time between two moments, as every surface writes one (`text::span`); `-` without both.
pub fn duration(from: Option<Millis>, to: Option<Millis>) -> String {
    match (from, to) {
        (Some(from), Some(to)) => lachesis::text::span_ms(to - from),
        _ => "-".into(),
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

#[cfg(test)]
mod plain_table_tests {
    use super::*;

    #[test]
    fn no_line_of_a_table_ends_in_spaces() {
        let mut t = table(["ID", "STATE", "REASON"]);
        t.add_row(["ab12cd34", "failed", "stage 'trainer' exited 1"]);
        t.add_row(["ef56", "completed", ""]);
        let text = t.to_string();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.lines().all(|line| line == line.trim_end()), "{text:?}");
        assert!(text.lines().nth(1).unwrap().ends_with("stage 'trainer' exited 1"), "{text}");
    }
}
