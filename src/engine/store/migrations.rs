//! The schema's migrations, embedded in the binary, one list per backend.
//!
//! Listed here rather than with `sqlx::migrate!`: that macro needs sqlx's `macros` feature,
//! which compiles sqlx's SQLite driver (with SQLite's C source) and its PostgreSQL driver a
//! second time, for the compiler, on every cold build. A test checks each list against its
//! directory, and the checksums are sqlx's own, so stores migrated before keep validating.

use std::borrow::Cow;

use sqlx::SqlStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

/// One migration file: its version, its description (the file name's rest) and its SQL.
type Source = (i64, &'static str, &'static str);

macro_rules! migrations {
    ($dir:literal: $($version:literal $name:literal),* $(,)?) => {
        &[$((
            $version,
            $name,
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/", $dir, "/", $name, ".sql")),
        )),*]
    };
}

const SQLITE: &[Source] = migrations!("sqlite":
    1 "0001_runs", 2 "0002_selection", 3 "0003_jobs", 4 "0004_snapshots", 5 "0005_nodes",
    6 "0006_tests", 7 "0007_progress", 8 "0008_metric_history", 9 "0009_history_indexes", 10 "0010_checkpoints",
    11 "0011_holds", 12 "0012_dependencies", 13 "0013_report_posts", 14 "0014_runs_by_workflow", 15 "0015_runs_held",
    16 "0016_stage_attempts", 17 "0017_runs_by_end_state", 18 "0018_metric_values", 19 "0019_sweeps",
    20 "0020_preemptions", 21 "0021_sweep_dependencies", 22 "0022_environment_kinds", 23 "0023_webhook_outbox", 24 "0024_member_outcomes",
    25 "0025_sweep_suggestions", 26 "0026_typed_units", 27 "0027_sweep_resumes", 28 "0028_pbt_exploits",
    29 "0029_runs_backing_off",
);

const POSTGRES: &[Source] = migrations!("postgres":
    1 "0001_runs", 2 "0002_selection", 3 "0003_jobs", 4 "0004_snapshots", 5 "0005_nodes",
    6 "0006_tests", 7 "0007_progress", 8 "0008_metric_history", 9 "0009_history_indexes", 10 "0010_checkpoints",
    11 "0011_holds", 12 "0012_dependencies", 13 "0013_report_posts", 14 "0014_runs_by_workflow", 15 "0015_runs_held",
    16 "0016_stage_attempts", 17 "0017_runs_by_end_state", 18 "0018_metric_values", 19 "0019_sweeps",
    20 "0020_preemptions", 21 "0021_sweep_dependencies", 22 "0022_environment_kinds", 23 "0023_webhook_outbox", 24 "0024_member_outcomes",
    25 "0025_sweep_suggestions", 26 "0026_typed_units", 27 "0027_sweep_resumes", 28 "0028_pbt_exploits",
    29 "0029_runs_backing_off",
);

/// Which backend's schema.
#[derive(Clone, Copy, Debug)]
pub(super) enum Schema {
    Sqlite,
    Postgres,
}

impl Schema {
    fn sources(self) -> &'static [Source] {
        match self {
            Schema::Sqlite => SQLITE,
            Schema::Postgres => POSTGRES,
        }
    }

    /// The version a current store has applied; checking it costs one query, building the
    /// migrator (and its checksums) is left to stores that are behind.
    pub(super) fn latest(self) -> i64 {
        self.sources().iter().map(|(version, _, _)| *version).max().unwrap_or(0)
    }

    pub(super) fn migrator(self) -> Migrator {
        self.migrator_through(i64::MAX)
    }

    /// The migrator of the schema as it stood at version `last` (a store an older lachesis wrote).
    pub(super) fn migrator_through(self, last: i64) -> Migrator {
        Migrator::with_migrations(
            self.sources()
                .iter()
                .filter(|(version, _, _)| *version <= last)
                .map(|&(version, file, sql)| {
                    // sqlx's own naming: what follows the version, `_` read as a space.
                    let description = file.split_once('_').map_or(file, |(_, rest)| rest).replace('_', " ");
                    let no_tx = sql.starts_with("-- no-transaction");
                    Migration::new(
                        version,
                        Cow::Owned(description),
                        MigrationType::Simple,
                        SqlStr::from_static(sql),
                        no_tx,
                    )
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file in the directory is listed, with the version its name gives, and the SQL and
    /// checksum are exactly those `sqlx::migrate!` would have embedded.
    #[test]
    fn each_list_matches_its_directory() {
        for (schema, dir) in [(Schema::Sqlite, "sqlite"), (Schema::Postgres, "postgres")] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations").join(dir);
            let resolved = sqlx::migrate::resolve_blocking(&path).expect("migrations resolve");
            let mut from_files: Vec<_> = resolved.into_iter().map(|(m, _)| m).collect();
            from_files.sort_by_key(|m| m.version);
            let embedded = schema.migrator();
            assert_eq!(embedded.iter().count(), from_files.len(), "{dir}: a migration file is not listed");
            for (ours, theirs) in embedded.iter().zip(&from_files) {
                assert_eq!(ours.version, theirs.version, "{dir}");
                assert_eq!(ours.description, theirs.description, "{dir}");
                assert_eq!(ours.checksum, theirs.checksum, "{dir} {}", ours.version);
                assert_eq!(ours.no_tx, theirs.no_tx, "{dir} {}", ours.version);
            }
            assert_eq!(schema.latest(), from_files.last().unwrap().version);
        }
    }
}
