//! Where workflows live: one YAML file per workflow in a directory. The workflows shipped with
//! lachesis are copied there on first use, and never over a file the operator has edited.

use std::io;
use std::path::{Path, PathBuf};

use super::{InvalidWorkflow, Workflow};

/// Files compiled into the binary and installed into an empty workflow directory.
const BUNDLED: &[(&str, &str)] = &[
    ("tinker-atropos.yaml", include_str!("../../workflows/tinker-atropos.yaml")),
    ("demo.yaml", include_str!("../../workflows/demo.yaml")),
    ("demo/api.sh", include_str!("../../workflows/demo/api.sh")),
    ("demo/trainer.sh", include_str!("../../workflows/demo/trainer.sh")),
    ("demo/env.sh", include_str!("../../workflows/demo/env.sh")),
];

/// The workflow used when a surface names none, if no file says `default: true`.
pub const FALLBACK_DEFAULT: &str = "tinker-atropos";

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("unknown workflow '{name}' (available: {available}) in {}", dir.display())]
    Unknown { name: String, available: String, dir: PathBuf },
    #[error(
        "'{name}' is a file path, but workflows are catalog names: copy it to {} as NAME.yaml and pass NAME (available: {available})",
        dir.display()
    )]
    NotAName { name: String, available: String, dir: PathBuf },
    #[error(transparent)]
    Invalid(#[from] InvalidWorkflow),
    #[error("cannot read {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

pub struct Catalog {
    dir: PathBuf,
}

impl Catalog {
    pub fn new(dir: impl Into<PathBuf>) -> Catalog {
        Catalog { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes the bundled workflows that are missing; existing files are left alone.
    pub fn install_bundled(&self) -> Result<(), CatalogError> {
        for (name, text) in BUNDLED {
            let path = self.dir.join(name);
            if path.exists() {
                continue;
            }
            let io_err = |source| CatalogError::Io { path: path.clone(), source };
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io_err)?;
            }
            std::fs::write(&path, text).map_err(io_err)?;
        }
        Ok(())
    }

    /// Names of the workflow files present (file stems), sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let path = entry.path();
                let ext = path.extension()?.to_str()?;
                (ext == "yaml" || ext == "yml").then(|| path.file_stem()?.to_str().map(str::to_string))?
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Loads one workflow by name; only that file is read, so a broken neighbour can't block it.
    pub fn load(&self, name: &str) -> Result<Workflow, CatalogError> {
        if name.contains('/') || name.ends_with(".yaml") || name.ends_with(".yml") {
            return Err(CatalogError::NotAName {
                name: name.to_string(),
                available: self.names().join(", "),
                dir: self.dir.clone(),
            });
        }
        let path = ["yaml", "yml"]
            .iter()
            .map(|ext| self.dir.join(format!("{name}.{ext}")))
            .find(|p| p.is_file())
            .filter(|_| !name.contains('/'))
            .ok_or_else(|| CatalogError::Unknown {
                name: name.to_string(),
                available: self.names().join(", "),
                dir: self.dir.clone(),
            })?;
        let text = std::fs::read_to_string(&path)
            .map_err(|source| CatalogError::Io { path: path.clone(), source })?;
        let workflow = Workflow::parse(&path, &text)?;
        if workflow.name != name {
            return Err(InvalidWorkflow {
                file: path,
                field: "name".into(),
                problem: format!("'{}' does not match the file name '{name}'", workflow.name),
            }
            .into());
        }
        Ok(workflow)
    }

    /// The default workflow's name: the first file that says `default: true`, else tinker-atropos.
    pub fn default_name(&self) -> String {
        self.names()
            .into_iter()
            .find(|name| self.load(name).is_ok_and(|wf| wf.default))
            .unwrap_or_else(|| FALLBACK_DEFAULT.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_workflows_install_parse_and_keep_edits() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::new(dir.path());
        catalog.install_bundled().unwrap();
        assert_eq!(catalog.names(), vec!["demo", "tinker-atropos"]);
        for name in catalog.names() {
            catalog.load(&name).unwrap_or_else(|e| panic!("bundled {name}: {e}"));
        }
        assert_eq!(catalog.default_name(), "tinker-atropos");
        let edited = "name: demo\nstages:\n  - {name: only, argv: [\"true\"]}\n";
        std::fs::write(dir.path().join("demo.yaml"), edited).unwrap();
        catalog.install_bundled().unwrap();
        assert_eq!(catalog.load("demo").unwrap().stages.len(), 1);
    }

    #[test]
    fn unknown_and_mismatched_names_are_clear() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::new(dir.path());
        std::fs::write(dir.path().join("a.yaml"), "name: b\nstages:\n  - {name: x, argv: [y]}\n").unwrap();
        let err = catalog.load("nope").unwrap_err().to_string();
        assert!(err.starts_with("unknown workflow 'nope' (available: a)"), "{err}");
        let err = catalog.load("a").unwrap_err().to_string();
        assert!(err.ends_with("a.yaml: name: 'b' does not match the file name 'a'"), "{err}");
        assert!(catalog.load("../a").is_err());
    }
}
