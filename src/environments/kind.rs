//! What sort of environment a name stands for, and where it came from.
//!
//! Every kind answers the same questions (list, describe its configurable fields, build an
//! inference test, name the workflow that trains it); the service, the store and the surfaces see
//! only [`EnvKind`] and [`EnvSource`], so a third kind is one new module beside `atropos` and
//! `verifiers`.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The framework an environment is written for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnvKind {
    /// A class deriving from atroposlib's `BaseEnv`, run by its own `serve`/`process` modes.
    #[default]
    Atropos,
    /// A package exporting `load_environment(**kwargs) -> verifiers.Environment`, evaluated by
    /// `vf-eval` and trained by tinker-cookbook's `verifiers_rl` recipe.
    Verifiers,
}

impl EnvKind {
    pub const ALL: [EnvKind; 2] = [EnvKind::Atropos, EnvKind::Verifiers];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            EnvKind::Atropos => "atropos",
            EnvKind::Verifiers => "verifiers",
        }
    }

    /// The name stored and shown (`atropos`, `verifiers`); `None` for anything else.
    #[must_use]
    pub fn parse(text: &str) -> Option<EnvKind> {
        EnvKind::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

impl fmt::Display for EnvKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an environment was found: what `env show` says, and what a process needs to import it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum EnvSource {
    /// A file under one of the environment directories (`LACHESIS_ENV_DIRS`): an Atropos file,
    /// or a verifiers environment laid out as `vf-init` lays it out and not installed. `dir` is
    /// what goes on `PYTHONPATH` for its module to import.
    Directory { dir: PathBuf },
    /// A distribution installed in the Python of `LACHESIS_PYTHON`.
    Package { package: String, version: String },
}

impl EnvSource {
    /// One line for people: `package reverse-text 0.1.2` or `directory /envs/reverse_text`.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            EnvSource::Directory { dir } => format!("directory {}", dir.display()),
            EnvSource::Package { package, version } => format!("package {package} {version}"),
        }
    }

    /// The directory to put on `PYTHONPATH`, for an environment that is not installed.
    #[must_use]
    pub fn import_dir(&self) -> Option<&std::path::Path> {
        match self {
            EnvSource::Directory { dir } => Some(dir),
            EnvSource::Package { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_names() {
        for kind in EnvKind::ALL {
            assert_eq!(EnvKind::parse(kind.as_str()), Some(kind));
            assert_eq!(serde_json::to_value(kind).unwrap(), serde_json::json!(kind.as_str()));
        }
        assert_eq!(EnvKind::parse("Atropos"), None);
        assert_eq!(EnvKind::default(), EnvKind::Atropos, "stores written before kinds hold Atropos");
    }

    #[test]
    fn sources_say_where_in_one_line() {
        let package = EnvSource::Package { package: "reverse-text".into(), version: "0.1.2".into() };
        assert_eq!(package.describe(), "package reverse-text 0.1.2");
        assert_eq!(package.import_dir(), None);
        let json = serde_json::to_value(&package).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"from": "package", "package": "reverse-text", "version": "0.1.2"})
        );
        let dir = EnvSource::Directory { dir: "/envs/rt".into() };
        assert_eq!(dir.describe(), "directory /envs/rt");
        assert_eq!(dir.import_dir(), Some(std::path::Path::new("/envs/rt")));
    }
}
