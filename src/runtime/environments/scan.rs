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

#[cfg(test)]
mod tests {
    use std::fs;

    use tempfile::TempDir;

    use crate::environments::discover;
    use crate::environments::fixtures::{class_names, discover_one, warning_for, write};

    #[test]
    fn private_hidden_and_cache_files_are_not_listed() {
        let dir = TempDir::new().unwrap();
        write(dir.path(), "_private.py", "class Private(BaseEnv):\n    pass\n");
        write(dir.path(), "__init__.py", "class InInit(BaseEnv):\n    pass\n");
        write(dir.path(), ".hidden.py", "class HiddenFile(BaseEnv):\n    pass\n");
        write(dir.path(), ".venv/lib/site.py", "class InVenv(BaseEnv):\n    pass\n");
        write(dir.path(), "__pycache__/cached.py", "class Cached(BaseEnv):\n    pass\n");
        write(dir.path(), "notes.txt", "class Text(BaseEnv):\n    pass\n");
        write(dir.path(), "public.py", "class Public(BaseEnv):\n    pass\n");
        let found = discover_one(&dir);
        assert_eq!(class_names(&found), ["Public"]);
        assert!(found.warnings.is_empty(), "{:?}", found.warnings);
    }
    #[test]
    fn missing_directory_and_file_root_are_warnings() {
        let dir = TempDir::new().unwrap();
        write(dir.path(), "envs/e.py", "class E(BaseEnv):\n    pass\n");
        let file_root = write(dir.path(), "plain.py", "");
        let missing = dir.path().join("does-not-exist");
        let found = discover(&[missing.clone(), dir.path().join("envs"), file_root.clone()]);
        assert_eq!(class_names(&found), ["E"]);
        assert_eq!(warning_for(&found, &missing).reason, "directory does not exist");
        assert_eq!(warning_for(&found, &file_root).reason, "not a directory");
        assert_eq!(
            warning_for(&found, &missing).to_string(),
            format!("{}: directory does not exist", missing.display())
        );
    }

    #[test]
    fn overlapping_roots_list_each_file_once() {
        let dir = TempDir::new().unwrap();
        write(dir.path(), "sub/e.py", "class E(BaseEnv):\n    pass\n");
        let found = discover(&[dir.path().to_owned(), dir.path().join("sub"), dir.path().join("sub/../sub")]);
        assert_eq!(class_names(&found), ["E"]);
        assert!(found.find("e").is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn symlinked_files_are_followed_and_directory_links_are_not() {
        let dir = TempDir::new().unwrap();
        let real = write(dir.path(), "real/e.py", "class E(BaseEnv):\n    pass\n");
        fs::create_dir_all(dir.path().join("scan")).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("scan/linked.py")).unwrap();
        // A link back to an ancestor would loop forever if followed.
        std::os::unix::fs::symlink(dir.path(), dir.path().join("scan/loop")).unwrap();
        let found = discover(&[dir.path().join("scan")]);
        assert_eq!(class_names(&found), ["E"]);
        assert_eq!(found.environments[0].name, "linked");
    }
}
