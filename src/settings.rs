//! Where lachesis keeps things, from flags, environment variables and defaults.

use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::store::{StoreLocation, StoreResult};
use crate::workflow::Catalog;

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

    pub fn store_location(&self) -> StoreResult<StoreLocation> {
        StoreLocation::resolve(self.database_url.as_deref(), &self.home)
    }

    pub fn run_dir(&self, id: &Uuid) -> PathBuf {
        self.home.join("runs").join(id.to_string())
    }

    /// The unix socket a daemon listens on for wake-ups.
    pub fn socket_path(&self) -> PathBuf {
        self.home.join("daemon.sock")
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
