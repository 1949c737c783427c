//! The writer of a stage log under its [`Rotation`]: past the size, `trainer.log` becomes
//! `trainer.log.1` (and `.1` becomes `.2`, …, the oldest dropped), and writing carries on in a
//! fresh `trainer.log`. Readers holding the old file read it to its end, then follow the new
//! one (see `logs::follow`).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::limits::Rotation;

/// `trainer.log` and `n` → `trainer.log.n`.
pub fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// One file of a stage log: the live one (rotation 0) or a rotated one (`<log>.N`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LogFile {
    pub rotation: u32,
    pub size: u64,
}

/// The files a stage log has now, the live one first, then `<log>.1`, `<log>.2`, … to the first
/// that is missing (at most [`MAX_FILES`](super::limits::MAX_FILES) of them). A log not written
/// yet has none.
pub fn log_files(path: &Path) -> Vec<LogFile> {
    (0..=super::limits::MAX_FILES)
        .map_while(|rotation| {
            let file = if rotation == 0 { path.to_path_buf() } else { rotated(path, rotation) };
            let size = std::fs::metadata(file).ok()?.len();
            Some(LogFile { rotation, size })
        })
        .collect()
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).mode(0o600).open(path)
}

pub struct RotatingLog {
    path: PathBuf,
    file: File,
    /// Bytes in the live file.
    size: u64,
    rotation: Rotation,
}

impl RotatingLog {
    /// Opens (or creates) the live log for appending; what it already holds counts.
    pub fn open(path: &Path, rotation: Rotation) -> io::Result<RotatingLog> {
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(RotatingLog { path: path.to_path_buf(), file, size, rotation })
    }

    fn rotate(&mut self) -> io::Result<()> {
        if self.rotation.max_files <= 1 {
            // No file to keep: start the one over (appends land at the new end).
            self.file.set_len(0)?;
            self.size = 0;
            return Ok(());
        }
        // The fresh file first: if it cannot be made (a full disk), nothing has moved, and the
        // output goes on into the live file until a later write tries again.
        let mut fresh_name = self.path.as_os_str().to_owned();
        fresh_name.push(".new");
        let fresh_path = PathBuf::from(fresh_name);
        let fresh = open_append(&fresh_path)?;
        fresh.set_len(0)?;
        // Renaming over the oldest drops it.
        for n in (1..self.rotation.max_files - 1).rev() {
            match std::fs::rename(rotated(&self.path, n), rotated(&self.path, n + 1)) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => {
                    let _ = std::fs::remove_file(&fresh_path);
                    return Err(err);
                }
                _ => {}
            }
        }
        if let Err(err) = std::fs::rename(&self.path, rotated(&self.path, 1)) {
            let _ = std::fs::remove_file(&fresh_path);
            return Err(err);
        }
        // The old file is out of the way either way: write on into the fresh one.
        let placed = std::fs::rename(&fresh_path, &self.path);
        self.file = fresh;
        self.size = 0;
        placed
    }
}

impl Write for RotatingLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // A file is rotated before the write that would take it past the size, so it holds
        // whole writes (whole lines, for a stage that writes lines) unless one write is bigger.
        // A rotation that fails is tried again on the next write; the output is kept meanwhile.
        if self.size > 0 && self.size.saturating_add(buf.len() as u64) > self.rotation.max_size {
            let _ = self.rotate();
        }
        let n = self.file.write(buf)?;
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// The live file's descriptor, for the free-space checks of `launch::space::ReservedLog`.
impl AsFd for RotatingLog {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(from: usize, to: usize) -> Vec<String> {
        (from..to).map(|i| format!("line {i:04}\n")).collect()
    }

    #[test]
    fn past_the_size_the_log_rotates_and_the_oldest_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trainer.log");
        let rotation = Rotation { max_size: 100, max_files: 3 };
        let mut log = RotatingLog::open(&path, rotation).unwrap();
        let written = lines(0, 200);
        for line in &written {
            log.write_all(line.as_bytes()).unwrap();
        }
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        let kept: Vec<String> =
            [rotated(&path, 2), rotated(&path, 1), path.clone()].iter().map(|p| read(p)).collect();
        for file in &kept {
            assert!(file.len() as u64 <= rotation.max_size && file.ends_with('\n'), "{file:?}");
        }
        assert!(!rotated(&path, 3).exists(), "max_files counts the live file");
        // The three files hold the newest lines, in order, each once.
        let all = kept.concat();
        assert!(written.concat().ends_with(&all) && all.len() > 200, "{all}");
        // A reopened log (a restarted shim) counts what is already there.
        let mut again = RotatingLog::open(&path, rotation).unwrap();
        let before = read(&path);
        again.write_all(&[b'x'; 99]).unwrap();
        assert_eq!(read(&rotated(&path, 1)), before, "rotated before the write that would pass the size");
    }

    #[test]
    fn a_rotation_that_cannot_make_its_new_file_moves_nothing_and_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        // Where the fresh file would go, something that is no file (as a full disk refuses one).
        std::fs::create_dir(dir.path().join("a.log.new")).unwrap();
        let mut log = RotatingLog::open(&path, Rotation { max_size: 10, max_files: 3 }).unwrap();
        for line in lines(0, 5) {
            log.write_all(line.as_bytes()).unwrap();
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), lines(0, 5).concat());
        assert!(!rotated(&path, 1).exists());
        // Once it can, the next write rotates.
        std::fs::remove_dir(dir.path().join("a.log.new")).unwrap();
        log.write_all(b"after\n").unwrap();
        assert_eq!(std::fs::read_to_string(rotated(&path, 1)).unwrap(), lines(0, 5).concat());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "after\n");
    }

    #[test]
    fn the_files_are_the_live_one_then_each_rotated_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        assert!(log_files(&path).is_empty(), "not written yet");
        let mut log = RotatingLog::open(&path, Rotation { max_size: 10, max_files: 3 }).unwrap();
        for line in lines(0, 3) {
            log.write_all(line.as_bytes()).unwrap();
        }
        let files = log_files(&path);
        let seen: Vec<(u32, u64)> = files.iter().map(|f| (f.rotation, f.size)).collect();
        assert_eq!(seen, [(0, 10), (1, 10), (2, 10)]);
    }

    #[test]
    fn one_file_means_starting_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let mut log = RotatingLog::open(&path, Rotation { max_size: 10, max_files: 1 }).unwrap();
        log.write_all(b"12345678\n").unwrap();
        log.write_all(b"abc\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"abc\n");
        assert!(!rotated(&path, 1).exists());
    }
}
