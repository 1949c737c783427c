//! Bounded reads of a stage log: the last lines, a byte range, the last line that matches.
//! Each reads backwards or forwards in blocks from a seek, so it costs the same on a 1 KB log
//! and a 10 GB one, and holds at most its answer (plus one block) in memory.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// The most text one answer carries: a longer range is cut, and so is a longer line.
pub const MAX_ANSWER: u64 = 1024 * 1024;
/// How far back the weights line is looked for: a trainer reports its weights at the end.
pub const SCAN_WINDOW: u64 = 8 * 1024 * 1024;
/// The unit of every read.
const BLOCK: u64 = 64 * 1024;

/// A piece of a log, with where it lies in the file: `start..end` of the `size` bytes it had
/// when read. A client pages backwards from `start` or follows from `end`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LogPage {
    /// The file's length when it was read (0 for a log not written yet).
    pub size: u64,
    /// Which file was read (its inode; 0 for none): another one at the same path later means
    /// the log rotated, and the rest of this one is in `<log>.1`.
    #[serde(skip_serializing_if = "is_zero")]
    pub file: u64,
    pub start: u64,
    pub end: u64,
    /// The bytes `start..end`, invalid UTF-8 shown as U+FFFD.
    pub text: String,
    /// The answer stopped at its maximum size before what was asked for (lines or bytes).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, thiserror::Error)]
#[error("read log {}: {source}", .path.display())]
pub struct LogError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

fn at(path: &Path) -> impl Fn(io::Error) -> LogError + '_ {
    move |source| LogError { path: path.to_path_buf(), source }
}

/// The log file, or None for one not written yet (a stage that has not started).
fn open(path: &Path) -> Result<Option<(File, LogPage)>, LogError> {
    match File::open(path) {
        Ok(file) => {
            let meta = file.metadata().map_err(at(path))?;
            let (size, id) = (meta.len(), meta.ino());
            // An empty page at the end: the caller fills in what it reads.
            Ok(Some((file, LogPage { size, file: id, start: size, end: size, ..LogPage::default() })))
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(at(path)(err)),
    }
}

fn read_exact_at(file: &mut File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    file.seek(SeekFrom::Start(offset))?;
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

fn page(at_end: LogPage, start: u64, bytes: &[u8], cut: bool) -> LogPage {
    LogPage {
        start,
        end: start + bytes.len() as u64,
        text: String::from_utf8_lossy(bytes).into_owned(),
        cut,
        ..at_end
    }
}

/// The last `lines` lines (a final line without its newline counts), at most `max_bytes` of
/// them (clamped to [`MAX_ANSWER`]): past that, the answer is the last `max_bytes` bytes, cut.
pub fn tail(path: &Path, lines: usize, max_bytes: u64) -> Result<LogPage, LogError> {
    tail_in_blocks(path, lines, max_bytes, BLOCK)
}

fn tail_in_blocks(path: &Path, lines: usize, max_bytes: u64, block_size: u64) -> Result<LogPage, LogError> {
    let Some((mut file, at_end)) = open(path)? else { return Ok(LogPage::default()) };
    let size = at_end.size;
    let max_bytes = max_bytes.min(MAX_ANSWER);
    if lines == 0 || size == 0 || max_bytes == 0 {
        return Ok(at_end);
    }
    let floor = size.saturating_sub(max_bytes);
    // Blocks read so far, the earliest first; together they hold `pos..size`.
    let mut held: Vec<u8> = Vec::new();
    let mut pos = size;
    // The file's final newline ends the last line; it starts none.
    let mut newlines = 0usize;
    let mut start = None;
    while pos > floor && start.is_none() {
        let from = pos.saturating_sub(block_size).max(floor);
        let mut block = vec![0; (pos - from) as usize];
        let n = read_exact_at(&mut file, from, &mut block).map_err(at(path))?;
        block.truncate(n);
        if n as u64 != pos - from {
            // The file shrank under us (rotated, truncated): answer what is there.
            break;
        }
        for (i, byte) in block.iter().enumerate().rev() {
            let offset = from + i as u64;
            if *byte == b'\n' && offset != size - 1 {
                newlines += 1;
                if newlines == lines {
                    start = Some(offset + 1);
                    break;
                }
            }
        }
        block.extend_from_slice(&held);
        held = block;
        pos = from;
    }
    let cut = match start {
        Some(_) => false,
        // Stopped at the size limit: the answer is whole only if a line ends just before it.
        None if pos == floor && floor > 0 => {
            let mut before = [0u8];
            let n = read_exact_at(&mut file, floor - 1, &mut before).map_err(at(path))?;
            !(n == 1 && before[0] == b'\n' && newlines + 1 == lines)
        }
        None => false,
    };
    let start = start.unwrap_or(pos);
    let skip = (start - pos) as usize;
    Ok(page(at_end, start, &held[skip.min(held.len())..], cut))
}

/// The bytes `offset..offset + limit`, `limit` clamped to [`MAX_ANSWER`]; an offset past the
/// end gives an empty page at the end (the log was rotated or truncated meanwhile).
pub fn range(path: &Path, offset: u64, limit: u64) -> Result<LogPage, LogError> {
    let Some((mut file, at_end)) = open(path)? else { return Ok(LogPage::default()) };
    let size = at_end.size;
    if offset >= size {
        return Ok(at_end);
    }
    let want = limit.min(MAX_ANSWER).min(size - offset);
    let mut bytes = vec![0; want as usize];
    let n = read_exact_at(&mut file, offset, &mut bytes).map_err(at(path))?;
    bytes.truncate(n);
    Ok(page(at_end, offset, &bytes, limit > MAX_ANSWER && size - offset > MAX_ANSWER))
}

/// The last line of the log's final `window` bytes (none before byte `from`) for which `pick`
/// gives something, scanning backwards block by block. When the current file has none and the
/// window is not used up, the rotated file before it is looked at too: a log that rotated just
/// after its weights line still has it.
pub fn last_match<T>(
    path: &Path,
    from: u64,
    window: u64,
    mut pick: impl FnMut(&str) -> Option<T>,
) -> Result<Option<T>, LogError> {
    last_match_in_blocks(path, from, window, &mut pick, BLOCK)
}

fn last_match_in_blocks<T>(
    path: &Path,
    from: u64,
    window: u64,
    pick: &mut impl FnMut(&str) -> Option<T>,
    block_size: u64,
) -> Result<Option<T>, LogError> {
    let (found, scanned) = scan_back(path, from, window, pick, block_size)?;
    if found.is_some() || from > 0 || scanned >= window {
        return Ok(found);
    }
    Ok(scan_back(&super::rotate::rotated(path, 1), 0, window - scanned, pick, block_size)?.0)
}

/// One file of [`last_match`]; also says how many bytes it looked at.
fn scan_back<T>(
    path: &Path,
    from: u64,
    window: u64,
    pick: &mut impl FnMut(&str) -> Option<T>,
    block_size: u64,
) -> Result<(Option<T>, u64), LogError> {
    let Some((mut file, LogPage { size, .. })) = open(path)? else { return Ok((None, 0)) };
    let floor = size.saturating_sub(window).max(from);
    // The end of a line whose start is in a block not read yet.
    let mut carry: Vec<u8> = Vec::new();
    let mut pos = size;
    while pos > floor {
        let block_start = pos.saturating_sub(block_size).max(floor);
        let mut block = vec![0; (pos - block_start) as usize];
        let n = read_exact_at(&mut file, block_start, &mut block).map_err(at(path))?;
        if n as u64 != pos - block_start {
            break; // shrank under us
        }
        block.extend_from_slice(&carry);
        pos = block_start;
        // Every line after the block's first newline is whole; the part before it is not yet.
        let Some(first) = block.iter().position(|b| *b == b'\n') else {
            carry = block;
            continue;
        };
        for line in block[first + 1..].split(|b| *b == b'\n').rev() {
            if let Some(hit) = pick(&String::from_utf8_lossy(line)) {
                return Ok((Some(hit), size - pos));
            }
        }
        block.truncate(first);
        carry = block;
    }
    // What is left starts a line when the scan reached the file's start or the stage's.
    if pos == floor
        && (floor == 0 || floor == from)
        && let Some(hit) = pick(&String::from_utf8_lossy(&carry))
    {
        return Ok((Some(hit), size - pos));
    }
    Ok((None, size - pos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn log_with(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trainer.log");
        std::fs::write(&path, bytes).unwrap();
        (dir, path)
    }

    /// The last `lines` lines by splitting the whole file: what `tail` must agree with.
    fn naive_tail(bytes: &[u8], lines: usize, max: u64) -> (u64, bool) {
        let size = bytes.len() as u64;
        if lines == 0 || size == 0 || max == 0 {
            return (size, false);
        }
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let breaks: Vec<usize> =
            body.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i).collect();
        let start = if breaks.len() >= lines { breaks[breaks.len() - lines] as u64 + 1 } else { 0 };
        if size - start > max { (size - max, true) } else { (start, false) }
    }

    #[test]
    fn a_tail_is_the_last_lines_across_blocks() {
        let text: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        let (_dir, path) = log_with(text.as_bytes());
        let page = tail(&path, 3, MAX_ANSWER).unwrap();
        assert_eq!(page.text, "line 4997\nline 4998\nline 4999\n");
        assert_eq!((page.size, page.end, page.cut), (text.len() as u64, text.len() as u64, false));
        assert_eq!(page.start, page.end - page.text.len() as u64);
        // Lines that straddle the boundary between two blocks come back whole.
        let page = tail_in_blocks(&path, 2000, MAX_ANSWER, 7).unwrap();
        assert_eq!(page.text.lines().count(), 2000);
        assert!(page.text.starts_with("line 3000\n"));
    }

    #[test]
    fn the_last_line_counts_without_its_newline() {
        let (_dir, path) = log_with(b"a\nb\nc");
        assert_eq!(tail(&path, 2, MAX_ANSWER).unwrap().text, "b\nc");
        assert_eq!(tail(&path, 9, MAX_ANSWER).unwrap().text, "a\nb\nc");
        assert_eq!(tail(&path, 0, MAX_ANSWER).unwrap().text, "");
    }

    #[test]
    fn invalid_utf8_is_shown_not_refused() {
        let (_dir, path) = log_with(b"ok\n\xff\xfebad\n");
        let page = tail(&path, 1, MAX_ANSWER).unwrap();
        assert_eq!(page.text, "\u{fffd}\u{fffd}bad\n");
        assert_eq!(page.end - page.start, 6, "offsets count bytes, not characters");
    }

    #[test]
    fn one_line_longer_than_an_answer_is_cut_not_buffered() {
        let mut bytes = vec![b'x'; 3 * MAX_ANSWER as usize];
        bytes.push(b'\n');
        let (_dir, path) = log_with(&bytes);
        let page = tail(&path, 1, u64::MAX).unwrap();
        assert!(page.cut);
        assert_eq!(page.text.len() as u64, MAX_ANSWER, "at most one answer, whatever was asked");
        assert_eq!((page.start, page.end), (bytes.len() as u64 - MAX_ANSWER, bytes.len() as u64));
        let page = range(&path, 5, u64::MAX).unwrap();
        assert!(page.cut && page.text.len() as u64 == MAX_ANSWER && page.start == 5);
    }

    #[test]
    fn empty_missing_and_past_the_end_read_as_nothing() {
        let (dir, path) = log_with(b"");
        let empty = tail(&path, 10, MAX_ANSWER).unwrap();
        assert_eq!((empty.size, empty.start, empty.end, empty.text.as_str()), (0, 0, 0, ""));
        assert!(empty.file > 0, "an empty log is still a file");
        let missing = dir.path().join("not-yet.log");
        assert_eq!(tail(&missing, 10, MAX_ANSWER).unwrap(), LogPage::default());
        assert_eq!(range(&missing, 0, 10).unwrap(), LogPage::default());
        assert_eq!(last_match(&missing, 0, SCAN_WINDOW, |l| Some(l.to_string())).unwrap(), None);
        std::fs::write(&path, b"0123456789").unwrap();
        let page = range(&path, 50, 10).unwrap();
        assert_eq!((page.size, page.start, page.end, page.text.as_str()), (10, 10, 10, ""));
        let page = range(&path, 3, 4).unwrap();
        assert_eq!((page.start, page.end, page.text.as_str(), page.cut), (3, 7, "3456", false));
        let err = tail(dir.path(), 1, 10).unwrap_err().to_string();
        assert!(err.starts_with("read log ") && !err.contains('\n'), "{err}");
    }

    #[test]
    fn a_sparse_10_gb_log_reads_its_end_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trainer.log");
        let file = File::create(&path).unwrap();
        file.set_len(10 << 30).unwrap();
        drop(file);
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut file, b"\nsaved tinker://run/weights-9.\nStep 9/9\n").unwrap();
        assert_eq!(tail(&path, 2, MAX_ANSWER).unwrap().text, "saved tinker://run/weights-9.\nStep 9/9\n");
        let found = last_match(&path, 0, SCAN_WINDOW, |l| l.contains("tinker://").then(|| l.to_string()));
        assert_eq!(found.unwrap().as_deref(), Some("saved tinker://run/weights-9."));
        assert!(
            last_match(&path, 0, SCAN_WINDOW, |l| l.contains("nowhere").then_some(())).unwrap().is_none()
        );
    }

    #[test]
    fn the_last_match_may_be_in_the_rotated_file() {
        let (dir, path) = log_with(b"Step 1\nStep 2\n");
        std::fs::write(dir.path().join("trainer.log.1"), b"old tinker://w/1\nlater tinker://w/2\n").unwrap();
        let weights = |l: &str| l.split_once("tinker://").map(|(_, w)| w.to_string());
        assert_eq!(last_match(&path, 0, SCAN_WINDOW, weights).unwrap().as_deref(), Some("w/2"));
        // Lines before `from` belong to another attempt: neither they nor older files count.
        assert_eq!(last_match(&path, 7, SCAN_WINDOW, weights).unwrap(), None);
    }

    proptest! {
        #[test]
        fn reads_agree_with_reading_the_whole_file(
            bytes in prop::collection::vec(prop_oneof![Just(b'\n'), Just(0xffu8), b'a'..=b'e'], 0..300),
            lines in 0usize..40,
            max in 0u64..400,
            block in 1u64..40,
            offset in 0u64..320,
        ) {
            let (_dir, path) = log_with(&bytes);
            let page = tail_in_blocks(&path, lines, max, block).unwrap();
            let (start, cut) = naive_tail(&bytes, lines, max);
            prop_assert_eq!((page.start, page.end, page.size, page.cut), (start, bytes.len() as u64, bytes.len() as u64, cut));
            prop_assert_eq!(&page.text, &String::from_utf8_lossy(&bytes[start as usize..]));

            let page = range(&path, offset, max).unwrap();
            let from = (offset as usize).min(bytes.len());
            let to = (from + max as usize).min(bytes.len());
            prop_assert_eq!((page.start, page.end), (from as u64, to as u64));
            prop_assert_eq!(&page.text, &String::from_utf8_lossy(&bytes[from..to]));

            let wanted = |l: &str| (l.len() > 2 && l.starts_with('a')).then(|| l.to_string());
            let found = last_match_in_blocks(&path, 0, SCAN_WINDOW, &mut |l: &str| wanted(l), block).unwrap();
            let naive = String::from_utf8_lossy(&bytes).split('\n').rev().find_map(wanted);
            prop_assert_eq!(found, naive);
        }
    }
}
