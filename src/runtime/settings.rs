//! Where lachesis keeps things, from flags, environment variables and defaults.

use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::workflow::Catalog;

/// Where the store is: the embedded default, or a database URL.
#[derive(Clone, Debug)]
pub enum StoreLocation {
    Sqlite(PathBuf),
    Postgres(String),
}

impl StoreLocation {
    /// `url` when given (`sqlite://PATH`, `postgres://…`), else the SQLite file in `home`.
    pub fn resolve(url: Option<&str>, home: &Path) -> Result<StoreLocation, UnsupportedUrl> {
        match url {
            None => Ok(StoreLocation::Sqlite(home.join("lachesis.db"))),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(StoreLocation::Postgres(url.to_string()))
            }
            Some(url) => match url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")) {
                Some(path) if !path.is_empty() => Ok(StoreLocation::Sqlite(PathBuf::from(path))),
                _ => Err(UnsupportedUrl(url.to_string())),
            },
        }
    }
}

/// A `--database-url` that names neither SQLite nor PostgreSQL.
#[derive(Debug, thiserror::Error)]
#[error("unsupported database url '{0}' (use sqlite://PATH or postgres://…)")]
pub struct UnsupportedUrl(pub String);

#[derive(Clone, Debug)]
pub struct Settings {
    /// `$LACHESIS_HOME`, default `~/.lachesis`: the SQLite store, run directories, workflows.
    pub home: PathBuf,
    /// `--database-url` / `LACHESIS_DATABASE_URL`; the SQLite file in `home` when absent.
    pub database_url: Option<String>,
    /// `LACHESIS_WORKFLOWS`, default `$LACHESIS_HOME/workflows`.
    pub workflows_dir: PathBuf,
    /// The Python interpreter for `{python}` and introspection (`LACHESIS_PYTHON`, default `python3`).
    pub python: String,
    /// The tinker-atropos checkout (`LACHESIS_TINKER_ATROPOS`, default `~/tinker-atropos`).
    pub tinker_atropos: PathBuf,
    /// Where environments are discovered: the checkout's `tinker_atropos/environments`, then
    /// the directories in `LACHESIS_ENV_DIRS` (colon-separated).
    pub environment_dirs: Vec<PathBuf>,
}

impl Settings {
    pub fn new(home: Option<PathBuf>, database_url: Option<String>) -> Settings {
        let home = home
            .or_else(|| std::env::var_os("LACHESIS_HOME").map(PathBuf::from))
            .unwrap_or_else(|| crate::workflow::expand_home("~/.lachesis"));
        let home = std::path::absolute(&home).unwrap_or(home);
        let workflows_dir = std::env::var_os("LACHESIS_WORKFLOWS")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("workflows"));
        let workflows_dir = std::path::absolute(&workflows_dir).unwrap_or(workflows_dir);
        let python = std::env::var("LACHESIS_PYTHON").unwrap_or_else(|_| "python3".to_string());
        let tinker_atropos = std::env::var_os("LACHESIS_TINKER_ATROPOS")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::workflow::expand_home("~/tinker-atropos"));
        let mut environment_dirs = vec![tinker_atropos.join("tinker_atropos").join("environments")];
        if let Some(extra) = std::env::var_os("LACHESIS_ENV_DIRS") {
            environment_dirs.extend(std::env::split_paths(&extra).filter(|p| !p.as_os_str().is_empty()));
        }
        Settings { home, database_url, workflows_dir, python, tinker_atropos, environment_dirs }
    }

    pub fn store_location(&self) -> Result<StoreLocation, UnsupportedUrl> {
        StoreLocation::resolve(self.database_url.as_deref(), &self.home)
    }

    pub fn run_dir(&self, id: &Uuid) -> PathBuf {
        self.home.join("runs").join(id.to_string())
    }

    /// The unix socket a daemon listens on for wake-ups.
    pub fn socket_path(&self) -> PathBuf {
        self.home.join("daemon.sock")
    }

    /// The unix socket a daemon serves the HTTP API on, always (mode 0600, in the private
    /// home): the CLI submits through it instead of opening the store (see `api::client`).
    pub fn api_socket_path(&self) -> PathBuf {
        self.home.join("api.sock")
    }

    /// A digest of every setting that changes what a submission means: the store, where
    /// workflows and environments are found, the Python of `{python}`. A CLI hands its work to
    /// the home's daemon only when both have the same.
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let location = match StoreLocation::resolve(self.database_url.as_deref(), &self.home) {
            Ok(StoreLocation::Sqlite(path)) => {
                format!("sqlite:{}", std::path::absolute(&path).unwrap_or(path).display())
            }
            Ok(StoreLocation::Postgres(url)) => url,
            Err(_) => String::new(),
        };
        let mut digest = sha2::Sha256::new();
        for part in
            [location, self.workflows_dir.display().to_string(), self.python.clone()].into_iter().chain(
                [&self.tinker_atropos]
                    .into_iter()
                    .chain(&self.environment_dirs)
                    .map(|p| p.display().to_string()),
            )
        {
            // Length-prefixed, so no two lists of parts give the same bytes.
            digest.update((part.len() as u64).to_le_bytes());
            digest.update(part.as_bytes());
        }
        digest.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The workflow catalog, with the bundled workflows installed into the default directory.
    pub fn catalog(&self) -> Result<Catalog, crate::workflow::CatalogError> {
        let catalog = Catalog::new(&self.workflows_dir);
        if self.workflows_dir == self.home.join("workflows") {
            catalog.install_bundled()?;
        }
        Ok(catalog)
    }

    /// Creates the home as 0700, or makes an existing one of ours 0700.
    pub fn ensure_private_home(&self) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.home)?;
        let meta = std::fs::metadata(&self.home)?;
        if meta.uid() == rustix::process::geteuid().as_raw() && meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(&self.home, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(())
    }

    pub fn home(&self) -> &Path {
        &self.home
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_changes_with_what_a_submission_means() {
        let base = Settings::new(Some("/h".into()), None);
        assert_eq!(base.fingerprint(), Settings::new(Some("/h".into()), None).fingerprint());
        let same_file = Settings::new(Some("/h".into()), Some("sqlite:///h/lachesis.db".into()));
        assert_eq!(base.fingerprint(), same_file.fingerprint(), "the same file, named by URL");
        let others = [
            Settings::new(Some("/other".into()), None),
            Settings::new(Some("/h".into()), Some("postgres://127.0.0.1/db".into())),
            Settings { workflows_dir: "/elsewhere".into(), ..base.clone() },
            Settings { python: "python3.12".into(), ..base.clone() },
            Settings { environment_dirs: vec!["/envs".into()], ..base.clone() },
        ];
        for other in others {
            assert_ne!(base.fingerprint(), other.fingerprint(), "{other:?}");
        }
    }
}
