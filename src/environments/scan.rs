//! Which Python files discovery reads: every `.py` under the given directories, followed through
//! file symlinks but not directory ones, `_`-prefixed files kept only as bases.

use std::fs;
use std::path::{Path, PathBuf};

use super::DiscoveryWarning;

pub(super) struct SourceFile {
    pub(super) path: PathBuf,
    /// False for `_`-prefixed files, which only feed the inheritance graph.
    pub(super) listed: bool,
}

pub(super) fn collect_files(dirs: &[PathBuf], warnings: &mut Vec<DiscoveryWarning>) -> Vec<SourceFile> {
    let mut paths = Vec::new();
    for dir in dirs {
        let Some(root) = usable_root(dir, warnings) else {
            continue;
        };
        walk(&root, &mut paths, warnings);
    }
    // Overlapping or repeated roots would otherwise list one class twice and make it ambiguous.
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .map(|path| {
            let listed = !file_name(&path).starts_with('_');
            SourceFile { path, listed }
        })
        .collect()
}

pub(super) fn usable_root(dir: &Path, warnings: &mut Vec<DiscoveryWarning>) -> Option<PathBuf> {
    let reason = match fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => None,
        Ok(_) => Some("not a directory".to_owned()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Some("directory does not exist".to_owned()),
        Err(err) => Some(format!("cannot read directory: {err}")),
    };
    if let Some(reason) = reason {
        warnings.push(DiscoveryWarning { path: dir.to_owned(), reason });
        return None;
    }
    // Canonical roots make file paths absolute and comparable across overlapping roots.
    Some(fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned()))
}

pub(super) fn walk(root: &Path, out: &mut Vec<PathBuf>, warnings: &mut Vec<DiscoveryWarning>) {
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) => {
                warnings
                    .push(DiscoveryWarning { path: dir, reason: format!("cannot read directory: {err}") });
                continue;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                // A non-UTF-8 name cannot be shown in JSON output nor be a Python module name.
                warnings.push(DiscoveryWarning {
                    path: path.clone(),
                    reason: "file name is not valid UTF-8".to_owned(),
                });
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if name != "__pycache__" {
                    pending.push(path);
                }
            } else if name.ends_with(".py") && is_file(&path, kind) {
                out.push(path);
            }
        }
    }
}

pub(super) fn is_file(path: &Path, kind: fs::FileType) -> bool {
    kind.is_file() || (kind.is_symlink() && fs::metadata(path).is_ok_and(|m| m.is_file()))
}

pub(super) fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or_default()
}
