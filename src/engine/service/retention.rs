//! Retention: forgetting finished runs and tests (rows and directories together) once they are
//! older than a limit, and how big the home has grown.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::{Result, Service};
use crate::engine::store::Expired;
use crate::model::now_millis;

/// Rows per transaction: a long purge never holds the write lock for long.
const CHUNK: i64 = 500;

/// What a collection removed (or, on a dry run, would remove).
#[derive(Clone, Debug, Default, Serialize)]
pub struct GcReport {
    pub dry_run: bool,
    pub runs: usize,
    pub tests: usize,
    /// Disk space of the removed run and test directories.
    pub bytes: u64,
    /// Directories left alone because they are not where this home keeps them (another
    /// machine's home, or a moved one): their rows are gone, their files are not.
    pub foreign_dirs: usize,
}

impl Service {
    /// Removes every run and test that ended more than `older_than` ago (never one still
    /// pending or live): rows, events, stages, snapshots, tasks, then its directory. On a
    /// store shared by nodes, `node` limits runs to those this node ran (its disk holds them).
    pub async fn collect_garbage(
        &self,
        older_than: Duration,
        dry_run: bool,
        node: Option<&str>,
    ) -> Result<GcReport> {
        let before = now_millis() - i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        let mut report = GcReport { dry_run, ..GcReport::default() };
        let runs_dir = self.settings.home.join("runs");
        let tests_dir = self.settings.home.join("tests");
        // A dry run pages through everything at once; a real one deletes page by page.
        let limit = if dry_run { i64::MAX } else { CHUNK };
        loop {
            let runs = self.store.expired_runs(before, node, limit).await?;
            report.runs += runs.len();
            report.bytes += self.remove_dirs(&runs, &runs_dir, dry_run, &mut report.foreign_dirs);
            if !dry_run {
                let ids: Vec<_> = runs.iter().map(|r| r.id).collect();
                self.store.forget_runs(&ids).await?;
            }
            if dry_run || (runs.len() as i64) < limit {
                break;
            }
        }
        loop {
            let tests = self.store.expired_tests(before, limit).await?;
            report.tests += tests.len();
            report.bytes += self.remove_dirs(&tests, &tests_dir, dry_run, &mut report.foreign_dirs);
            if !dry_run {
                let ids: Vec<_> = tests.iter().map(|t| t.id).collect();
                self.store.forget_tests(&ids).await?;
            }
            if dry_run || (tests.len() as i64) < limit {
                break;
            }
        }
        if !dry_run && report.runs + report.tests > 0 {
            self.store.compact().await?;
        }
        Ok(report)
    }

    /// Measures (and unless `dry_run`, removes) the directories of `expired` that sit where
    /// this home keeps them, `parent/<id>`; returns their disk usage.
    fn remove_dirs(&self, expired: &[Expired], parent: &Path, dry_run: bool, foreign: &mut usize) -> u64 {
        let mut bytes = 0;
        for item in expired {
            if item.dir != parent.join(item.id.to_string()) {
                *foreign += 1;
                continue;
            }
            bytes += disk_usage(&item.dir);
            if !dry_run
                && let Err(err) = std::fs::remove_dir_all(&item.dir)
                && err.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!("cannot remove {}: {err}", item.dir.display());
            }
        }
        bytes
    }

    /// Disk space the home uses (store file, run and test directories, logs).
    pub fn home_size(&self) -> u64 {
        disk_usage(&self.settings.home)
    }
}

/// Disk space under `path`, symbolic links not followed; what cannot be read counts as 0.
pub fn disk_usage(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let own = meta.blocks() * 512;
    if !meta.is_dir() {
        return own;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return own;
    };
    own + entries.flatten().map(|entry| disk_usage(&entry.path())).sum::<u64>()
}
