//! Rotation of a log that another process writes, from outside: logrotate's `copytruncate`.
//! Slurm appends a batch job's output to the stage log itself (sbatch's `--open-mode=append`,
//! on the compute node), so the log cannot be renamed away from its writer as
//! [`RotatingLog`](super::RotatingLog) does: the writer would go on into the renamed file.
//! Instead, once past its size, the log's bytes are copied to `<log>.1` (older files shifted,
//! the oldest dropped, as a rotation does) and the log is cut back to empty, where the writer's
//! next append lands (an `O_APPEND` write goes to the end, wherever that is now).
//!
//! Lines written between the copy's last read and the cut are lost. The copy reads to the end
//! once more just before the cut, so that window is one read and one `ftruncate` long.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::limits::Rotation;
use super::rotate::rotated;

/// Rotates `path` if it is past `rotation.max_size`; true when it did. A log not written yet is
/// left alone. Nothing is moved if the copy cannot be made (a full disk): the log goes on
/// growing until a later look can.
pub fn copy_truncate(path: &Path, rotation: Rotation) -> io::Result<bool> {
    let mut live = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(err),
    };
    if live.metadata()?.len() <= rotation.max_size {
        return Ok(false);
    }
    if rotation.max_files <= 1 {
        // No file to keep: start the one over.
        live.set_len(0)?;
        return Ok(true);
    }
    let first = rotated(path, 1);
    let mut fresh_name = first.as_os_str().to_owned();
    fresh_name.push(".new");
    let fresh_path = PathBuf::from(fresh_name);
    let (mut copy, mut at) = copy_into(&mut live, &fresh_path).inspect_err(|_| {
        let _ = std::fs::remove_file(&fresh_path);
    })?;
    // Renaming over the oldest drops it.
    for n in (1..rotation.max_files - 1).rev() {
        match std::fs::rename(rotated(path, n), rotated(path, n + 1)) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => {
                let _ = std::fs::remove_file(&fresh_path);
                return Err(err);
            }
            _ => {}
        }
    }
    std::fs::rename(&fresh_path, &first).inspect_err(|_| {
        let _ = std::fs::remove_file(&fresh_path);
    })?;
    // What was written meanwhile, then the cut.
    live.seek(SeekFrom::Start(at))?;
    at += io::copy(&mut live, &mut copy)?;
    live.set_len(0)?;
    tracing::debug!(log = %path.display(), bytes = at, "rotated by copy and truncate");
    Ok(true)
}

/// Copies `live` from its start into a new file at `to` (mode 0600): the file and how many
/// bytes it holds.
fn copy_into(live: &mut File, to: &Path) -> io::Result<(File, u64)> {
    let mut copy = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(to)?;
    live.seek(SeekFrom::Start(0))?;
    let n = io::copy(live, &mut copy)?;
    Ok((copy, n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A writer that appends as Slurm's does: its own descriptor, opened once with O_APPEND.
    fn appender(path: &Path) -> File {
        OpenOptions::new().create(true).append(true).open(path).unwrap()
    }

    #[test]
    fn past_its_size_the_log_is_copied_aside_and_the_writer_goes_on_at_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trainer.log");
        let rotation = Rotation { max_size: 100, max_files: 3 };
        let mut writer = appender(&path);
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        let mut written = String::new();
        for round in 0..4 {
            let text: String = (0..12).map(|i| format!("round {round} line {i:02}\n")).collect();
            writer.write_all(text.as_bytes()).unwrap();
            written.push_str(&text);
            assert!(copy_truncate(&path, rotation).unwrap(), "round {round}: past 100 bytes");
            assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
            assert_eq!(read(&rotated(&path, 1)), text, "the newest round is the first rotated file");
        }
        writer.write_all(b"after\n").unwrap();
        assert_eq!(read(&path), "after\n", "the writer's next append lands at the new end");
        assert!(!rotated(&path, 3).exists(), "max_files counts the live file");
        let kept = [read(&rotated(&path, 2)), read(&rotated(&path, 1))].concat();
        assert!(written.ends_with(&kept), "the newest rounds, in order");
        // Under the size, or not written yet: nothing moves.
        assert!(!copy_truncate(&path, rotation).unwrap());
        assert!(!copy_truncate(&dir.path().join("none.log"), rotation).unwrap());
    }

    #[test]
    fn one_file_means_starting_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        appender(&path).write_all(&[b'x'; 20]).unwrap();
        assert!(copy_truncate(&path, Rotation { max_size: 10, max_files: 1 }).unwrap());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        assert!(!rotated(&path, 1).exists());
    }

    #[test]
    fn a_copy_that_cannot_be_made_moves_nothing_and_cuts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        appender(&path).write_all(&[b'x'; 20]).unwrap();
        // Where the copy would go, something that is no file (as a full disk refuses one).
        std::fs::create_dir(dir.path().join("a.log.1.new")).unwrap();
        assert!(copy_truncate(&path, Rotation { max_size: 10, max_files: 3 }).is_err());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 20);
        assert!(!rotated(&path, 1).exists());
    }
}
