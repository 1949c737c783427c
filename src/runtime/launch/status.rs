//! The files a shim leaves behind for a stage: `started` (who runs) and `exit` (how it ended).
//! Both are written atomically, so a reader sees a whole file or none.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::{Exit, Millis, ProcessIdentity};

/// Written by the shim once the stage process exists (or failed to).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Started {
    pub shim: ProcessIdentity,
    /// The stage process; its pid is also its process group id. None if it could not start.
    pub process: Option<ProcessIdentity>,
    pub started_at: Millis,
}

/// Written by the shim after the stage process is gone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finished {
    pub exit: Option<Exit>,
    /// Why the process never started (missing program, bad working directory).
    pub spawn_error: Option<String>,
    pub ended_at: Millis,
}

/// Where one stage's status files are.
#[derive(Clone, Debug)]
pub struct StageFiles {
    pub started: PathBuf,
    pub exit: PathBuf,
}

impl StageFiles {
    pub fn new(run_dir: &Path, stage: &str) -> StageFiles {
        let dir = run_dir.join(".status");
        StageFiles {
            started: dir.join(format!("{stage}.started.json")),
            exit: dir.join(format!("{stage}.exit.json")),
        }
    }

    pub fn read_started(&self) -> io::Result<Option<Started>> {
        read_json(&self.started)
    }

    pub fn read_finished(&self) -> io::Result<Option<Finished>> {
        read_json(&self.exit)
    }

    /// Removes temporary files a writer left behind (it died, or the disk was full). Only
    /// for a stage whose shim is gone: a live shim may be writing one right now.
    pub fn remove_leftovers(&self) {
        for path in [&self.started, &self.exit] {
            let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { continue };
            let mut prefix = name.to_os_string();
            prefix.push(".tmp");
            let Ok(entries) = std::fs::read_dir(dir) else { continue };
            for entry in entries.flatten() {
                if entry.file_name().as_encoded_bytes().starts_with(prefix.as_encoded_bytes()) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a file must survive an operating-system crash, or only a process crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// fsync the file and its directory: the exit status outlives a power cut.
    Synced,
    /// The page cache is enough: a `started` file names processes that a reboot ends anyway.
    Cached,
}

/// Write to a temporary file, rename over `path` (with `Synced`, fsync both file and directory):
/// a reader sees the file absent or complete, never half-written.
pub fn write_atomic(path: &Path, value: &impl Serialize, durability: Durability) -> io::Result<()> {
    let dir = parent_dir(path);
    std::fs::create_dir_all(dir)?;
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let written = write_then_rename(&tmp, path, value, durability);
    if written.is_err() {
        // An empty or partial temporary file (a full disk) must not stay behind.
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    if durability == Durability::Synced {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The directory holding `path`; "." for a bare file name, whose parent is "" (which cannot be
/// opened to sync).
fn parent_dir(path: &Path) -> &Path {
    path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

fn write_then_rename(
    tmp: &Path,
    path: &Path,
    value: &impl Serialize,
    durability: Durability,
) -> io::Result<()> {
    let mut file =
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(tmp)?;
    // One write: the file is unbuffered, and a serializer writes token by token.
    let mut bytes = serde_json::to_vec(value)?;
    bytes.push(b'\n');
    file.write_all(&bytes)?;
    if durability == Durability::Synced {
        file.sync_all()?;
    }
    std::fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_round_trips_and_missing_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let files = StageFiles::new(dir.path(), "env");
        assert_eq!(files.read_finished().unwrap(), None);
        let done = Finished { exit: Some(Exit::Signal(15)), spawn_error: None, ended_at: 7 };
        write_atomic(&files.exit, &done, Durability::Synced).unwrap();
        assert_eq!(files.read_finished().unwrap(), Some(done));
        let leftovers: Vec<_> = std::fs::read_dir(files.exit.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn a_bare_file_name_lives_in_the_working_directory() {
        assert_eq!(parent_dir(Path::new("exit.json")), Path::new("."));
        assert_eq!(parent_dir(Path::new("/runs/x/exit.json")), Path::new("/runs/x"));
        assert_eq!(parent_dir(Path::new("/")), Path::new("."));
    }

    #[test]
    fn leftover_temporary_files_are_ignored_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let files = StageFiles::new(dir.path(), "env");
        let other = StageFiles::new(dir.path(), "env2");
        let status = files.exit.parent().unwrap();
        std::fs::create_dir_all(status).unwrap();
        std::fs::write(status.join("env.exit.json.tmp123"), b"").unwrap();
        std::fs::write(status.join("env.started.json.tmp9"), b"{\"sh").unwrap();
        std::fs::write(status.join("env2.exit.json.tmp5"), b"").unwrap();
        assert_eq!(files.read_finished().unwrap(), None, "a temporary file is not a status");
        files.remove_leftovers();
        let mut left: Vec<_> = std::fs::read_dir(status)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["env2.exit.json.tmp5"], "only this stage's leftovers go");
        other.remove_leftovers();
        assert_eq!(std::fs::read_dir(status).unwrap().count(), 0);
    }
}
