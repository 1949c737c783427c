//! What the discovery tests share: environment files written under a scratch directory, and
//! reading the listing back.

use std::fs;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::{DiscoveredEnv, Discovery, DiscoveryWarning, discover};

/// Writes `contents` at `rel` under `root`, creating parent directories.
pub(super) fn write(root: &Path, rel: &str, contents: impl AsRef<[u8]>) -> PathBuf {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("fixture paths have a parent")).expect("mkdir");
    fs::write(&path, contents).expect("write fixture");
    fs::canonicalize(&path).expect("canonicalize fixture")
}

pub(super) fn env<'d>(discovery: &'d Discovery, class_name: &str) -> &'d DiscoveredEnv {
    discovery
        .environments
        .iter()
        .find(|e| e.class_name == class_name)
        .unwrap_or_else(|| panic!("{class_name} not discovered: {discovery:#?}"))
}

pub(super) fn class_names(discovery: &Discovery) -> Vec<&str> {
    discovery.environments.iter().map(|e| e.class_name.as_str()).collect()
}

pub(super) fn warning_for<'d>(discovery: &'d Discovery, path: &Path) -> &'d DiscoveryWarning {
    discovery
        .warnings
        .iter()
        .find(|w| w.path == path)
        .unwrap_or_else(|| panic!("no warning for {}: {:#?}", path.display(), discovery))
}

pub(super) fn discover_one(dir: &TempDir) -> Discovery {
    discover(&[dir.path().to_owned()])
}
