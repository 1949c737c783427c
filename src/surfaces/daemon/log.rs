//! The daemon's own log, written so that no failure to write it can stop or stall the daemon.
//!
//! Lines are handed to a writer thread through a bounded queue: a destination that blocks (a
//! terminal on hold, a pipe nobody reads) costs lines, never the loop that sees exits. A line
//! that cannot be written (a full disk, a pipe whose reader left, a hung-up terminal, a closed
//! descriptor) is dropped and counted, and the first line that lands afterwards is preceded by
//! one saying how many were lost and why. With `--detach` the destination is a file in the home,
//! rotated like stage logs and reopened on SIGHUP (logrotate moves it away, then signals).

use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use crate::logs::{RotatingLog, Rotation};

/// Lines waiting for the writer thread, at most; past that, lines are dropped (and counted).
const QUEUE: usize = 4096;
/// A log file that could not be opened is tried again at most this often.
const REOPEN_EVERY: Duration = Duration::from_secs(1);
/// The daemon's log file rotates like a stage log, within these limits.
pub const FILE_ROTATION: Rotation = Rotation { max_size: 64 * 1024 * 1024, max_files: 5 };

enum Message {
    Line(Vec<u8>),
    /// Look at the reopen flag (SIGHUP).
    Wake,
    /// Everything queued before this is written (or dropped): answer.
    Flush(mpsc::Sender<()>),
}

/// The daemon's log: a cheap handle, cloned into the subscriber and the SIGHUP handler.
#[derive(Clone)]
pub struct DaemonLog {
    queue: SyncSender<Message>,
    shared: Arc<Shared>,
}

struct Shared {
    /// The file, when the log goes to one (`--detach`); stderr otherwise.
    path: Option<PathBuf>,
    /// Lines the queue had no room for.
    overflow: AtomicU64,
    reopen: AtomicBool,
}

impl std::fmt::Debug for DaemonLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.shared.path {
            Some(path) => write!(f, "DaemonLog({})", path.display()),
            None => f.write_str("DaemonLog(stderr)"),
        }
    }
}

impl DaemonLog {
    /// A log on this process's stderr, whatever that is.
    pub fn stderr() -> DaemonLog {
        DaemonLog::start(None, Destination::Stderr)
    }

    /// A log in the file at `path` (created 0600), rotated under `rotation`. With
    /// `holds_stderr`, this process's stderr (where a panic message goes) follows the live file
    /// through rotations and reopens. A file that cannot be opened now is tried again later.
    pub fn file(path: &Path, rotation: Rotation, holds_stderr: bool) -> DaemonLog {
        let file =
            FileLog { path: path.to_path_buf(), rotation, log: None, tried: None, holds_stderr, fd: None };
        DaemonLog::start(Some(path.to_path_buf()), Destination::File(file))
    }

    fn start(path: Option<PathBuf>, destination: Destination) -> DaemonLog {
        let (queue, lines) = mpsc::sync_channel(QUEUE);
        let shared = Arc::new(Shared { path, overflow: AtomicU64::new(0), reopen: AtomicBool::new(false) });
        let writer = Writer { destination, dropped: 0, reason: None, shared: Arc::clone(&shared) };
        let spawned = std::thread::Builder::new().name("daemon-log".into()).spawn(move || writer.run(lines));
        if spawned.is_err() {
            // No thread, no log: every line is counted as dropped rather than written inline,
            // which could block the daemon.
            shared.overflow.fetch_add(1, Ordering::Relaxed);
        }
        DaemonLog { queue, shared }
    }

    /// The file the log goes to (None: stderr).
    pub fn path(&self) -> Option<&Path> {
        self.shared.path.as_deref()
    }

    /// Asks the writer to close and reopen the file at its path (it says so in the log).
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Relaxed);
        // A full queue means the writer is busy; it looks at the flag before its next line.
        let _ = self.queue.try_send(Message::Wake);
    }

    /// Waits (up to `within`) until every line queued so far is written or dropped.
    pub fn flush(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let (done, wait) = mpsc::channel();
        let mut message = Message::Flush(done);
        // Never a blocking send: a writer stuck on its destination must not hold the exit.
        loop {
            match self.queue.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    message = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return,
            }
        }
        let _ = wait.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }

    fn queue_line(&self, line: &[u8]) {
        match self.queue.try_send(Message::Line(line.to_vec())) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.shared.overflow.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// What the subscriber writes one formatted event into. It never fails: a line that cannot be
/// queued is counted, so the formatter has nothing to report (and nothing to print to stderr).
pub struct LineWriter<'a>(&'a DaemonLog);

impl Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.queue_line(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for DaemonLog {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> LineWriter<'a> {
        LineWriter(self)
    }
}

enum Destination {
    Stderr,
    File(FileLog),
}

struct FileLog {
    path: PathBuf,
    rotation: Rotation,
    /// None while it cannot be opened.
    log: Option<RotatingLog>,
    /// When opening was last tried.
    tried: Option<Instant>,
    holds_stderr: bool,
    /// The live file's descriptor, to see a rotation (the fresh file is opened while the old
    /// one is still open, so its number always differs from the one before).
    fd: Option<RawFd>,
}

impl FileLog {
    /// Opens the file at the path; until that succeeds, writing goes on into the one open (a
    /// reopen that fails for want of space keeps the moved-away file).
    fn open(&mut self) -> io::Result<()> {
        self.tried = Some(Instant::now());
        let log = RotatingLog::open(&self.path, self.rotation)?;
        self.log = Some(log);
        self.follow_with_stderr();
        Ok(())
    }

    /// Points stderr at the live file, so that what is written there (a panic's message) is
    /// in the log the user reads.
    fn follow_with_stderr(&mut self) {
        let Some(log) = &self.log else { return };
        let fd = log.as_fd().as_raw_fd();
        if self.fd != Some(fd) && self.holds_stderr {
            // SAFETY: dup2 onto fd 2 only replaces what stderr refers to; the live file stays
            // owned by the log, and fd 2 is never owned by a Rust object here.
            unsafe { libc::dup2(fd, libc::STDERR_FILENO) };
        }
        self.fd = Some(fd);
    }

    fn write_all(&mut self, line: &[u8]) -> Result<(), String> {
        if self.log.is_none() {
            if self.tried.is_some_and(|at| at.elapsed() < REOPEN_EVERY) {
                return Err(format!("cannot open {}", self.path.display()));
            }
            self.open().map_err(|e| format!("cannot open {}: {}", self.path.display(), reason(&e)))?;
        }
        let Some(log) = self.log.as_mut() else {
            return Err(format!("cannot open {}", self.path.display()));
        };
        let written = log.write_all(line).map_err(|e| reason(&e));
        self.follow_with_stderr();
        written
    }
}

impl Destination {
    fn write_all(&mut self, line: &[u8]) -> Result<(), String> {
        match self {
            // std's stderr is unbuffered, and treats a closed descriptor as a bottomless one.
            Destination::Stderr => io::stderr().lock().write_all(line).map_err(|e| reason(&e)),
            Destination::File(file) => file.write_all(line),
        }
    }
}

/// Why a write failed, in a few words.
fn reason(err: &io::Error) -> String {
    use rustix::io::Errno;
    let words = match err.raw_os_error().map(Errno::from_raw_os_error) {
        Some(Errno::NOSPC) | Some(Errno::DQUOT) => "disk full",
        Some(Errno::PIPE) => "its reader has gone",
        Some(Errno::IO) => "input/output error, as from a hung-up terminal",
        Some(Errno::BADF) => "its descriptor is closed",
        _ => return err.to_string(),
    };
    words.to_string()
}

/// The thread that owns the destination.
struct Writer {
    destination: Destination,
    /// Lines lost since the last one that landed.
    dropped: u64,
    /// Why the first of them was lost.
    reason: Option<String>,
    shared: Arc<Shared>,
}

impl Writer {
    fn run(mut self, messages: Receiver<Message>) {
        if let Destination::File(file) = &mut self.destination
            && let Err(err) = file.open()
        {
            self.reason = Some(format!("cannot open {}: {}", file.path.display(), reason(&err)));
        }
        for message in messages {
            if self.shared.reopen.swap(false, Ordering::Relaxed) {
                self.reopen();
            }
            match message {
                Message::Line(line) => self.write(&line),
                Message::Wake => {}
                Message::Flush(done) => {
                    let _ = done.send(());
                }
            }
        }
    }

    fn reopen(&mut self) {
        let Destination::File(file) = &mut self.destination else { return };
        let said = match file.open() {
            Ok(()) => format!("SIGHUP: reopened the log {}", file.path.display()),
            Err(err) => format!("SIGHUP: cannot reopen the log {}: {}", file.path.display(), reason(&err)),
        };
        self.write(line("INFO", &said).as_bytes());
    }

    fn write(&mut self, bytes: &[u8]) {
        let overflow = self.shared.overflow.swap(0, Ordering::Relaxed);
        if overflow > 0 {
            self.dropped += overflow;
            self.reason.get_or_insert_with(|| "the log's destination did not keep up".into());
        }
        if self.dropped > 0 {
            let lines = if self.dropped == 1 { "line was" } else { "lines were" };
            let why = self.reason.as_deref().unwrap_or("unknown");
            let note = line("WARN", &format!("{} log {lines} dropped ({why})", self.dropped));
            if let Err(why) = self.destination.write_all(note.as_bytes()) {
                return self.lost(why);
            }
            self.dropped = 0;
            self.reason = None;
        }
        if let Err(why) = self.destination.write_all(bytes) {
            self.lost(why);
        }
    }

    fn lost(&mut self, why: String) {
        self.dropped += 1;
        self.reason.get_or_insert(why);
    }
}

/// A line of the log's own, shaped like the subscriber's (no colour: it may go to a file).
fn line(level: &str, message: &str) -> String {
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ");
    format!("{now} {level:>5} lachesis::daemon::log: {message}\n")
}

/// Whether the daemon's log may be coloured: it goes to stderr (not a file), stderr is a
/// terminal, and `NO_COLOR` is unset or empty (no-color.org).
pub fn wants_colour(to_file: bool) -> bool {
    use std::io::IsTerminal;
    let no_colour = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !to_file && !no_colour && io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    const WITHIN: Duration = Duration::from_secs(10);

    fn emit(log: &DaemonLog, text: &str) {
        LineWriter(log).write_all(format!("{text}\n").as_bytes()).unwrap();
    }

    #[test]
    fn lines_land_in_the_file_in_order_and_the_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.log");
        let log = DaemonLog::file(&path, FILE_ROTATION, false);
        for i in 0..100 {
            emit(&log, &format!("line {i}"));
        }
        log.flush(WITHIN);
        let text = std::fs::read_to_string(&path).unwrap();
        let want: String = (0..100).map(|i| format!("line {i}\n")).collect();
        assert_eq!(text, want);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn a_full_disk_drops_lines_and_the_first_line_that_lands_says_how_many_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.log");
        // /dev/full answers every write with ENOSPC.
        std::os::unix::fs::symlink("/dev/full", &path).unwrap();
        let log = DaemonLog::file(&path, FILE_ROTATION, false);
        for i in 0..3 {
            emit(&log, &format!("lost {i}"));
        }
        log.flush(WITHIN);
        // Space returns, as logrotate would have it: a new file, then the reopen.
        std::fs::remove_file(&path).unwrap();
        log.reopen();
        emit(&log, "kept");
        log.flush(WITHIN);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        // The note comes before the first line that lands: here, the reopen's own.
        assert!(lines[1].contains("SIGHUP: reopened the log"), "{text}");
        assert!(
            lines[0].ends_with("WARN lachesis::daemon::log: 3 log lines were dropped (disk full)"),
            "{text}"
        );
        assert_eq!(lines[2], "kept");
    }

    #[test]
    fn a_log_that_cannot_be_opened_is_tried_again_and_loses_only_what_came_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("daemon.log");
        let log = DaemonLog::file(&path, FILE_ROTATION, false);
        emit(&log, "lost");
        log.flush(WITHIN);
        std::fs::create_dir(dir.path().join("missing")).unwrap();
        log.reopen();
        emit(&log, "kept");
        log.flush(WITHIN);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("1 log line was dropped (cannot open"), "{text}");
        assert!(text.ends_with("kept\n"), "{text}");
    }

    #[test]
    fn the_file_rotates_within_its_limits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.log");
        let log = DaemonLog::file(&path, Rotation { max_size: 1000, max_files: 3 }, false);
        for i in 0..500 {
            emit(&log, &format!("line {i:04}"));
        }
        log.flush(WITHIN);
        assert!(crate::logs::rotated(&path, 2).exists());
        assert!(!crate::logs::rotated(&path, 3).exists());
        assert!(std::fs::read_to_string(&path).unwrap().ends_with("line 0499\n"));
    }

    #[test]
    fn a_full_queue_costs_lines_not_a_wait() {
        // A pipe nobody reads stands for a terminal on hold: the writer thread blocks on it.
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
        let reader = std::thread::spawn({
            let fifo = fifo.clone();
            move || std::fs::File::open(fifo).unwrap()
        });
        let log = DaemonLog::file(&fifo, FILE_ROTATION, false);
        let held = reader.join().unwrap();
        let started = Instant::now();
        for _ in 0..(QUEUE * 4) {
            emit(&log, &"x".repeat(200));
        }
        assert!(started.elapsed() < WITHIN, "queueing lines never waits for the destination");
        assert!(log.shared.overflow.load(Ordering::Relaxed) > 0);
        // Nor does the flush before the daemon exits, past its limit.
        let started = Instant::now();
        log.flush(Duration::from_millis(100));
        assert!(started.elapsed() < WITHIN);
        drop(held);
    }

    #[test]
    fn colour_needs_a_terminal_and_no_file() {
        assert!(!wants_colour(true));
    }
}
