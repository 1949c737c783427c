//! Free space on the home's filesystem, and a stage log that stops growing before the store
//! runs out of room.
//!
//! The reserve is the lesser of 64 MiB and 1% of the filesystem: enough for the store's
//! journal and the status files of every stage that may still exit, small enough not to starve
//! a small disk. Below it, `doctor` and the daemon warn, and stage logs drop output (with one
//! marker line each way) until twice the reserve is free again.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// The reserve's upper bound.
pub const RESERVE_MAX: u64 = 64 * 1024 * 1024;

/// Room on one filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    /// Bytes an unprivileged writer may still use.
    pub available: u64,
    pub total: u64,
}

impl Space {
    /// What must stay free on this filesystem: min(64 MiB, 1% of its size).
    pub fn reserve(&self) -> u64 {
        RESERVE_MAX.min(self.total / 100)
    }

    pub fn is_low(&self) -> bool {
        self.available < self.reserve()
    }

    /// Well above the reserve again (hysteresis, so a log does not flap on the edge).
    fn is_recovered(&self) -> bool {
        self.available >= self.reserve().saturating_mul(2)
    }
}

fn space_of(stat: rustix::fs::StatVfs) -> Space {
    let unit = stat.f_frsize.max(1);
    Space { available: stat.f_bavail.saturating_mul(unit), total: stat.f_blocks.saturating_mul(unit) }
}

/// The room on the filesystem holding `path`.
pub fn space_at(path: &Path) -> io::Result<Space> {
    rustix::fs::statvfs(path).map(space_of).map_err(io::Error::from)
}

fn space_of_file(file: &impl AsFd) -> io::Result<Space> {
    rustix::fs::fstatvfs(file).map(space_of).map_err(io::Error::from)
}

/// `1.5 GiB`, `12 MiB`, `800 KiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

/// Whether an error means the filesystem (or the user's quota) is full.
pub fn is_out_of_space(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(code) if code == rustix::io::Errno::NOSPC.raw_os_error() || code == rustix::io::Errno::DQUOT.raw_os_error())
}

/// How often a log looks at the free space, at most.
const CHECK_EVERY: Duration = Duration::from_millis(250);
/// ... unless this much was written since the last look.
const CHECK_AFTER_BYTES: u64 = 1024 * 1024;

/// A stage log that drops output while its filesystem is below the reserve, so the store and
/// the status files keep their room. A marker line says where output was dropped and resumed.
pub struct ReservedLog<W = File> {
    file: W,
    dropping: bool,
    dropped: u64,
    last_check: Option<Instant>,
    since_check: u64,
}

impl<W: Write + AsFd> ReservedLog<W> {
    pub fn new(file: W) -> ReservedLog<W> {
        ReservedLog { file, dropping: false, dropped: 0, last_check: None, since_check: 0 }
    }

    fn look(&mut self) {
        let due = self.last_check.is_none_or(|at| at.elapsed() >= CHECK_EVERY)
            || self.since_check >= CHECK_AFTER_BYTES;
        if !due {
            return;
        }
        self.last_check = Some(Instant::now());
        self.since_check = 0;
        let Ok(space) = space_of_file(&self.file) else { return };
        if !self.dropping && space.is_low() {
            self.start_dropping(&format!(
                "only {} free, below the {} reserve",
                human_bytes(space.available),
                human_bytes(space.reserve())
            ));
        } else if self.dropping && space.is_recovered() {
            let marker = format!(
                "\n[lachesis: log output resumed; {} dropped while the disk was full]\n",
                human_bytes(self.dropped)
            );
            self.dropping = false;
            self.dropped = 0;
            let _ = self.file.write_all(marker.as_bytes());
        }
    }

    fn start_dropping(&mut self, why: &str) {
        self.dropping = true;
        // Best effort: the marker is small, and the reserve is there for it.
        let marker = format!("\n[lachesis: log output dropped from here: {why}]\n");
        let _ = self.file.write_all(marker.as_bytes());
    }
}

impl<W: Write + AsFd> Write for ReservedLog<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.look();
        if !self.dropping {
            match self.file.write(buf) {
                Ok(n) => {
                    self.since_check += n as u64;
                    return Ok(n);
                }
                Err(err) if is_out_of_space(&err) => self.start_dropping("the disk is full"),
                Err(err) => return Err(err),
            }
        }
        // Dropped output counts as written: the stage must never block on a full disk.
        self.dropped += buf.len() as u64;
        self.since_check += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_is_the_lesser_of_64_mib_and_one_percent() {
        let small = Space { available: 100 * 1024, total: 16 * 1024 * 1024 };
        assert_eq!(small.reserve(), 16 * 1024 * 1024 / 100);
        assert!(small.is_low() == (small.available < small.reserve()));
        let big = Space { available: 10 << 30, total: 1 << 40 };
        assert_eq!(big.reserve(), RESERVE_MAX);
        assert!(!big.is_low());
        let nearly_full = Space { available: 63 << 20, total: 1 << 40 };
        assert!(nearly_full.is_low());
        assert!(!Space { available: 100 << 20, total: 1 << 40 }.is_recovered());
        assert!(Space { available: 128 << 20, total: 1 << 40 }.is_recovered());
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(64 * 1024 * 1024), "64.0 MiB");
        assert_eq!(human_bytes(1536 * 1024 * 1024), "1.5 GiB");
    }

    #[test]
    fn out_of_space_is_recognised() {
        assert!(is_out_of_space(&io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error())));
        assert!(is_out_of_space(&io::Error::from_raw_os_error(rustix::io::Errno::DQUOT.raw_os_error())));
        assert!(!is_out_of_space(&io::Error::from(io::ErrorKind::NotFound)));
    }

    #[test]
    fn a_log_with_room_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stage.log");
        let mut log = ReservedLog::new(File::create(&path).unwrap());
        log.write_all(b"hello\n").unwrap();
        log.flush().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"hello\n");
    }
}
