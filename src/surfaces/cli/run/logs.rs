//! `lachesis run logs`: a run's stage logs, bounded, or followed until the run ends.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use lachesis::launch::space::human_bytes;
use lachesis::service::{LogRequest, Service};

use super::watch::settled;
use crate::cli::CliResult;
use crate::cli::output::print_json;

#[derive(clap::Args)]
pub struct LogsArgs {
    id: String,
    /// Only this stage
    #[arg(long)]
    stage: Option<String>,
    /// Only the last N lines of each stage
    #[arg(long, short = 'n', value_name = "N")]
    tail: Option<usize>,
    /// Keep printing as the logs grow (like `tail -f`) until the run ends
    #[arg(long, short)]
    follow: bool,
    /// The text with its place in the file (size, start, end) per stage
    #[arg(long, conflicts_with = "follow")]
    json: bool,
}

pub async fn run(service: &Service, LogsArgs { id, stage, tail, follow, json }: LogsArgs) -> CliResult {
    logs(service, &id, stage.as_deref(), tail, follow, json).await
}

/// Prints stage logs; with `follow`, keeps reading until the run has ended. Every read is one
/// bounded page from the service, so memory stays flat however big the log.
async fn logs(
    service: &Service,
    id: &str,
    only: Option<&str>,
    tail: Option<usize>,
    follow: bool,
    json: bool,
) -> CliResult {
    // Without --tail: everything one answer holds (a whole log, unless it is big).
    let lines = tail.unwrap_or(lachesis::service::MAX_TAIL_LINES);
    let opening = service.run_logs(id, only, LogRequest::Tail { lines }).await?;
    if json {
        print_json(&opening)?;
        return Ok(ExitCode::SUCCESS);
    }
    let prefix = opening.len() > 1;
    let mut stages = Vec::with_capacity(opening.len());
    for log in opening {
        let shown = (human_bytes(log.page.end - log.page.start), human_bytes(log.page.size));
        if tail.is_none() && log.page.start > 0 {
            eprintln!(
                "[{}: the last {} of {}; earlier output is left out: use --tail N]",
                log.stage, shown.0, shown.1
            );
        } else if log.page.cut {
            eprintln!("[{}: the last {} of {}, cut at the most one read shows]", log.stage, shown.0, shown.1);
        }
        let mut printed = LogPrinter {
            stage: log.stage,
            file: log.page.file,
            offset: log.page.end,
            pending: String::new(),
        };
        printed.print(&log.page.text, prefix, follow)?;
        stages.push(printed);
    }
    if !follow {
        return Ok(ExitCode::SUCCESS);
    }
    loop {
        let done = settled(&service.run_status(id).await?);
        for stage in &mut stages {
            // Read to the end (a page at a time), then the rest of a line only once it ended.
            loop {
                let request = LogRequest::Range { offset: stage.offset, limit: lachesis::logs::MAX_ANSWER };
                let Some(log) = service.run_logs(id, Some(&stage.stage), request).await?.pop() else { break };
                let page = log.page;
                if page.file == 0 {
                    break; // not there (yet, or between a rotation's two renames)
                }
                if stage.file != 0 && page.file != stage.file {
                    // Rotated: the rest of the file we were reading is `<log>.1` now.
                    stage.read_previous(service, id, prefix).await?;
                    (stage.file, stage.offset) = (page.file, 0);
                    continue;
                }
                stage.file = page.file;
                if page.size < stage.offset {
                    stage.offset = 0; // truncated: from its new start
                    continue;
                }
                stage.offset = page.end;
                stage.print(&page.text, prefix, true)?;
                if page.end >= page.size {
                    break;
                }
            }
            if done {
                let rest = std::mem::take(&mut stage.pending);
                stage.print(&rest, prefix, false)?;
            }
        }
        if done {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Where a stage's printed log stands.
struct LogPrinter {
    stage: String,
    /// The file being read (see `LogPage::file`).
    file: u64,
    /// The next byte to read.
    offset: u64,
    /// The start of a line still being written (while following).
    pending: String,
}

impl LogPrinter {
    /// Prints the rest of the file that was live before a rotation, from where we were.
    async fn read_previous(
        &mut self,
        service: &Service,
        id: &str,
        prefix: bool,
    ) -> Result<(), Box<dyn std::error::Error>> {
        loop {
            let request = LogRequest::Previous { offset: self.offset, limit: lachesis::logs::MAX_ANSWER };
            let Some(log) = service.run_logs(id, Some(&self.stage), request).await?.pop() else {
                return Ok(());
            };
            // Rotated twice since the last look: that file's rest is gone from `.1`.
            if log.page.file != self.file {
                return Ok(());
            }
            self.offset = log.page.end;
            self.print(&log.page.text, prefix, true)?;
            if log.page.end >= log.page.size {
                return Ok(());
            }
        }
    }

    /// Prints `text` line by line; with `whole_lines`, a last line without its newline waits
    /// in `pending` (unless it grew past one answer: then it goes out as it is).
    fn print(&mut self, text: &str, prefix: bool, whole_lines: bool) -> std::io::Result<()> {
        self.pending.push_str(text);
        let end = match self.pending.rfind('\n') {
            Some(end) if whole_lines => end + 1,
            _ if whole_lines && (self.pending.len() as u64) < lachesis::logs::MAX_ANSWER => return Ok(()),
            _ => self.pending.len(),
        };
        let rest = self.pending.split_off(end);
        let ready = std::mem::replace(&mut self.pending, rest);
        let mut out = std::io::stdout().lock();
        for line in ready.lines() {
            if prefix {
                writeln!(out, "[{}] {line}", self.stage)?;
            } else {
                writeln!(out, "{line}")?;
            }
        }
        out.flush()
    }
}
