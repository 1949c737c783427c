//! Following a stage's log as it grows: each read starts where the last one stopped, so a
//! line is looked at once, however long the log gets. When the log rotates (see
//! `logs::rotate`), the follower reads the old file to its end, then the new one from its start.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where a file stood at one moment (an attempt's start): which file it was and how long.
/// Lines after it are the attempt's; a file put in its place since (a trainer that rewrote it
/// on resuming) is the attempt's from its start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileMark {
    pub len: u64,
    /// Device and inode; none when the file did not exist (or is a log, which may rotate).
    id: Option<(u64, u64)>,
}

impl FileMark {
    /// The file at `path` now (length 0 if it does not exist yet).
    pub fn of(path: &Path) -> FileMark {
        match std::fs::metadata(path) {
            Ok(meta) => FileMark { len: meta.len(), id: Some((meta.dev(), meta.ino())) },
            Err(_) => FileMark::default(),
        }
    }

    /// A byte offset alone (a stage log's start: a log that rotates is followed into its next file).
    pub fn at(len: u64) -> FileMark {
        FileMark { len, id: None }
    }

    /// Where the attempt's lines start in `meta`'s file: after the mark in the marked file (or
    /// when no file was marked), from its start in another one or in one that got shorter.
    fn start_in(&self, meta: &std::fs::Metadata) -> u64 {
        let same = self.id.is_none_or(|id| id == (meta.dev(), meta.ino()));
        if same && meta.len() >= self.len { self.len } else { 0 }
    }

    /// `start_in` for the file at `path` now.
    pub fn start_at(&self, path: &Path) -> u64 {
        std::fs::metadata(path).map_or(0, |meta| self.start_in(&meta))
    }
}

/// Reads the lines appended to a file since the last call.
pub struct Follower {
    path: PathBuf,
    file: Option<File>,
    /// Where reading starts when the file is first opened.
    mark: FileMark,
    /// Bytes of the file already read.
    offset: u64,
    /// The start of a line whose end has not been written yet.
    partial: Vec<u8>,
    buf: Vec<u8>,
}

impl Follower {
    pub fn new(path: &Path) -> Follower {
        Follower::from_offset(path, 0)
    }

    /// Follows from byte `offset` on (the lines before it are another attempt's).
    pub fn from_offset(path: &Path, offset: u64) -> Follower {
        Follower::from_mark(path, FileMark::at(offset))
    }

    /// Follows the lines written after `mark` (see `FileMark`).
    pub fn from_mark(path: &Path, mark: FileMark) -> Follower {
        Follower {
            path: path.to_path_buf(),
            file: None,
            mark,
            offset: mark.len,
            partial: Vec::new(),
            buf: vec![0; 64 * 1024],
        }
    }

    /// Calls `on_line` for every complete line written since the last call (the file may not
    /// exist yet). A file that shrank (truncated, replaced) is read again from its start.
    pub fn read_new(&mut self, mut on_line: impl FnMut(&str)) -> std::io::Result<()> {
        self.read_some(u64::MAX, &mut on_line).map(|_| ())
    }

    /// Like `read_new`, but stops after about `budget` bytes so a log that grows faster than
    /// it is read can't hold the caller; true if it stopped with more to read.
    pub fn read_some(&mut self, budget: u64, mut on_line: impl FnMut(&str)) -> std::io::Result<bool> {
        if self.file.is_none() {
            match File::open(&self.path) {
                Ok(mut file) => {
                    self.offset = self.mark.start_in(&file.metadata()?);
                    file.seek(SeekFrom::Start(self.offset))?;
                    self.file = Some(file);
                }
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                Err(err) => return Err(err),
            }
        }
        let file = self.file.as_mut().expect("opened above");
        let len = file.metadata()?.len();
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
            file.seek(SeekFrom::Start(0))?;
        }
        let mut read = 0u64;
        loop {
            if read >= budget {
                return Ok(true);
            }
            let n = file.read(&mut self.buf)?;
            if n == 0 {
                // At the end of the file we hold: a rotation put a new file at the path.
                let held = file.metadata()?;
                match std::fs::metadata(&self.path) {
                    Ok(now) if (now.dev(), now.ino()) != (held.dev(), held.ino()) => {
                        match File::open(&self.path) {
                            Ok(new) => {
                                *file = new;
                                self.offset = 0;
                                continue;
                            }
                            // Renamed again meanwhile: the next call looks once more.
                            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                            Err(err) => return Err(err),
                        }
                    }
                    _ => return Ok(false),
                }
            }
            read += n as u64;
            self.offset += n as u64;
            let mut chunk = &self.buf[..n];
            while let Some(end) = chunk.iter().position(|b| *b == b'\n') {
                if self.partial.is_empty() {
                    on_line(&String::from_utf8_lossy(&chunk[..end]));
                } else {
                    self.partial.extend_from_slice(&chunk[..end]);
                    on_line(&String::from_utf8_lossy(&self.partial));
                    self.partial.clear();
                }
                chunk = &chunk[end + 1..];
            }
            // A line longer than this is no progress line; keep memory bounded.
            if self.partial.len() + chunk.len() <= 64 * 1024 {
                self.partial.extend_from_slice(chunk);
            } else {
                self.partial.clear();
            }
        }
    }
}

/// The last line of the file's final `window` bytes for which `pick` gives something: a last
/// look at a log whose stage just exited, without reading the whole of it.
/// Nothing before byte `from` is looked at.
pub fn last_in_tail<T>(
    path: &Path,
    from: u64,
    window: u64,
    pick: impl FnMut(&str) -> Option<T>,
) -> Option<T> {
    crate::logs::last_match(path, from, window, pick).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_each_line_once_including_lines_written_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        let mut follower = Follower::new(&path);
        let mut seen = Vec::new();
        follower.read_new(|l| seen.push(l.to_string())).unwrap();
        assert!(seen.is_empty(), "no file yet");
        let mut file = File::create(&path).unwrap();
        write!(file, "Step 1/5\nStep 2").unwrap();
        follower.read_new(|l| seen.push(l.to_string())).unwrap();
        assert_eq!(seen, ["Step 1/5"]);
        write!(file, "/5\nStep 3/5\n").unwrap();
        follower.read_new(|l| seen.push(l.to_string())).unwrap();
        assert_eq!(seen, ["Step 1/5", "Step 2/5", "Step 3/5"]);
        follower.read_new(|l| seen.push(l.to_string())).unwrap();
        assert_eq!(seen.len(), 3, "nothing new, nothing read again");
        let mut later = Follower::from_offset(&path, "Step 1/5\n".len() as u64);
        let mut rest = Vec::new();
        later.read_new(|l| rest.push(l.to_string())).unwrap();
        assert_eq!(rest, ["Step 2/5", "Step 3/5"], "an attempt's lines start where its stage did");
        assert_eq!(
            last_in_tail(&path, 0, 1024, |l| l.starts_with("Step").then(|| l.to_string())),
            Some("Step 3/5".into())
        );
    }

    #[test]
    fn a_file_replaced_since_its_mark_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.jsonl");
        std::fs::write(&path, "1\n2\n3\n").unwrap();
        let mark = FileMark::of(&path);
        let lines = |mut follower: Follower| {
            let mut seen = Vec::new();
            follower.read_new(|l| seen.push(l.to_string())).unwrap();
            seen
        };
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        writeln!(file, "4").unwrap();
        assert_eq!(lines(Follower::from_mark(&path, mark)), ["4"], "appended after the mark");
        // Rewritten the way tinker-cookbook does on resuming: a new file renamed over it.
        let tmp = dir.path().join(".metrics.jsonl.tmp");
        std::fs::write(&tmp, "1\n2\n5\n6\n7\n8\n").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert_eq!(lines(Follower::from_mark(&path, mark)), ["1", "2", "5", "6", "7", "8"]);
        assert_eq!(mark.start_at(&path), 0);
        assert_eq!(FileMark::at(4).start_at(&path), 4, "a bare offset trusts the file");
        assert_eq!(lines(Follower::from_mark(&dir.path().join("none"), mark)), Vec::<String>::new());
    }

    #[test]
    fn a_rotated_log_is_followed_into_its_new_file_with_every_line_once() {
        use crate::logs::{RotatingLog, Rotation};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trainer.log");
        let mut log = RotatingLog::open(&path, Rotation { max_size: 64, max_files: 2 }).unwrap();
        let mut follower = Follower::new(&path);
        let mut seen = Vec::new();
        let mut written = Vec::new();
        for i in 0..300 {
            let line = format!("Step {i}/300");
            // Half a line, then the rest: a rotation may fall inside a line, which is kept whole.
            let (head, rest) = line.split_at(line.len() / 2);
            log.write_all(head.as_bytes()).unwrap();
            log.write_all(format!("{rest}\n").as_bytes()).unwrap();
            written.push(line);
            // Reads come at uneven times, but at least once per rotation.
            if i % 3 == 0 {
                follower.read_new(|l| seen.push(l.to_string())).unwrap();
            }
        }
        follower.read_new(|l| seen.push(l.to_string())).unwrap();
        assert!(path.with_extension("log.1").exists(), "the log rotated");
        assert_eq!(seen, written);
    }
}
