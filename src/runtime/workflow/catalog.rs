//! Where workflows live: one YAML file per workflow in a directory. The workflows shipped with
//! lachesis are copied there on first use, and never over a file the operator has edited.

use std::io;
use std::path::{Path, PathBuf};

use super::{InvalidWorkflow, Workflow};

/// Files compiled into the binary and installed into an empty workflow directory.
const BUNDLED: &[(&str, &str)] = &[
    (
        "tinker-atropos.yaml",
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/tinker-atropos.yaml")),
    ),
    (
        "tinker-cookbook.yaml",
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/tinker-cookbook.yaml")),
    ),
    (
        "tinker-verifiers.yaml",
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/tinker-verifiers.yaml")),
    ),
    ("demo.yaml", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/demo.yaml"))),
    ("demo/api.sh", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/demo/api.sh"))),
    ("demo/trainer.sh", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/demo/trainer.sh"))),
    ("demo/env.sh", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/demo/env.sh"))),
    ("demo-eval.yaml", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/demo-eval.yaml"))),
    ("demo-cleanup.yaml", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/demo-cleanup.yaml"))),
    ("demo/eval.sh", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/demo/eval.sh"))),
    ("demo/cleanup.sh", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/demo/cleanup.sh"))),
    (
        "pipelines/demo-pipeline.yaml",
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/pipelines/demo-pipeline.yaml")),
    ),
    ("demo-tune.yaml", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/demo-tune.yaml"))),
    ("demo/tune.sh", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/demo/tune.sh"))),
    (
        "sweeps/demo-sweep.yaml",
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/sweeps/demo-sweep.yaml")),
    ),
    (
        "pipelines/demo-sweep-pipeline.yaml",
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/pipelines/demo-sweep-pipeline.yaml")),
    ),
    ("demo-pbt.yaml", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/demo-pbt.yaml"))),
    ("demo/pbt.sh", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/demo/pbt.sh"))),
    (
        "sweeps/demo-pbt.yaml",
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/sweeps/demo-pbt.yaml")),
    ),
];

/// The catalog's directory of sweep files.
const SWEEPS: &str = "sweeps";

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
    #[error("unknown sweep '{name}' (available: {available}) in {dir}")]
    UnknownSweep { name: String, available: String, dir: String },
    #[error("sweep file {path}: {problem}")]
    BadSweepPath { path: String, problem: String },
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

    /// Writes the bundled workflows that are missing; existing files are left alone. Never
    /// through a symlink: a link (even a dangling one) is the operator's, and is skipped.
    pub fn install_bundled(&self) -> Result<(), CatalogError> {
        for (name, text) in BUNDLED {
            let path = self.dir.join(name);
            let io_err = |source| CatalogError::Io { path: path.clone(), source };
            if let Some(parent) = path.parent() {
                // Checked first: create_dir_all fails on a dangling link, and follows a live one.
                if parent != self.dir && is_symlink(parent) {
                    tracing::warn!(path = %parent.display(), "not installing a bundled workflow file through a symlink");
                    continue;
                }
                std::fs::create_dir_all(parent).map_err(io_err)?;
            }
            // create_new is O_CREAT|O_EXCL: it fails on any existing entry, and never follows a
            // symlink to create its target.
            match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut file) => io::Write::write_all(&mut file, text.as_bytes()).map_err(io_err)?,
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                    if is_symlink(&path) {
                        tracing::warn!(path = %path.display(), "a symlink stands where a bundled workflow file goes; left alone");
                    }
                }
                Err(err) => return Err(io_err(err)),
            }
        }
        Ok(())
    }

    /// Names of the workflow files present (file stems), sorted.
    pub fn names(&self) -> Vec<String> {
        yaml_stems(&self.dir)
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
            .find(|p| std::fs::symlink_metadata(p).is_ok())
            .filter(|_| !name.contains('/'))
            .ok_or_else(|| CatalogError::Unknown {
                name: name.to_string(),
                available: self.names().join(", "),
                dir: self.dir.clone(),
            })?;
        let text = read_regular(&path, "workflows")?;
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

    /// The sweep files of the catalog's `sweeps/` directory, by name (file stems), sorted.
    pub fn sweep_names(&self) -> Vec<String> {
        yaml_stems(&self.dir.join(SWEEPS))
    }

    /// The catalog's `sweeps/` directory: where a named sweep's W&B `program:` runs.
    pub fn sweeps_dir(&self) -> PathBuf {
        self.dir.join(SWEEPS)
    }

    /// A sweep file's text. `file` is a name in the catalog's `sweeps/` directory
    /// (`demo-sweep` or `demo-sweep.yaml`), or a path, absolute or from `sweeps/`, that stays
    /// inside the catalog's directory once its links and `..` are resolved; the file itself is
    /// a regular file, never a symlink (as a workflow's), of at most the YAML size limit.
    pub fn sweep_text(&self, file: &str) -> Result<String, CatalogError> {
        let sweeps = self.dir.join(SWEEPS);
        let shown = crate::text::one_line(file);
        let bad =
            |problem: &str| CatalogError::BadSweepPath { path: shown.clone(), problem: problem.to_string() };
        if file.is_empty() || file.contains('\0') {
            return Err(bad("is not a file name"));
        }
        let path = if file.contains('/') {
            let given = Path::new(file);
            if given.is_absolute() { given.to_path_buf() } else { sweeps.join(given) }
        } else {
            let names = if file.ends_with(".yaml") || file.ends_with(".yml") {
                vec![file.to_string()]
            } else {
                vec![format!("{file}.yaml"), format!("{file}.yml")]
            };
            let found = names.iter().map(|n| sweeps.join(n)).find(|p| std::fs::symlink_metadata(p).is_ok());
            found.ok_or_else(|| CatalogError::UnknownSweep {
                name: shown.clone(),
                available: match self.sweep_names() {
                    names if names.is_empty() => "none".into(),
                    names => names.join(", "),
                },
                dir: sweeps.display().to_string(),
            })?
        };
        let outside = || CatalogError::BadSweepPath {
            path: shown.clone(),
            problem: format!("is outside the workflows directory {}", self.dir.display()),
        };
        // Inside the catalog as written (so nothing is learnt of what exists outside it), then
        // once the directory it is in has its links and `..` resolved.
        if !lexical(&path).starts_with(lexical(&self.dir)) {
            return Err(outside());
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(bad("is not a file name"));
        };
        let inside = match (parent.canonicalize(), self.dir.canonicalize()) {
            (Ok(parent), Ok(catalog)) => parent.starts_with(&catalog),
            (Err(_), _) => return Err(bad("no such directory")),
            (_, Err(err)) => return Err(CatalogError::Io { path: self.dir.clone(), source: err }),
        };
        if !inside {
            return Err(outside());
        }
        let path = parent.join(name);
        if std::fs::symlink_metadata(&path).is_err() {
            return Err(bad("no such file"));
        }
        read_regular(&path, "sweep files")
    }

    /// The default workflow's name: the first file that says `default: true`, else tinker-atropos.
    pub fn default_name(&self) -> String {
        self.names()
            .into_iter()
            .find(|name| self.load(name).is_ok_and(|wf| wf.default))
            .unwrap_or_else(|| FALLBACK_DEFAULT.to_string())
    }
}

/// The stems of the YAML files in `dir` (`a.yaml` and `a.yml` once), sorted.
fn yaml_stems(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
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

/// `path` with its `.` and `..` taken as written (no link is followed).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// A workflow file's text: a regular file of the catalog (not a symlink out of it, not a FIFO),
/// of at most the YAML size limit.
fn read_regular(path: &Path, what: &str) -> Result<String, CatalogError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let invalid =
        |problem: String| InvalidWorkflow { file: path.to_path_buf(), field: "file".into(), problem };
    let io_err = |source| CatalogError::Io { path: path.to_path_buf(), source };
    // O_NOFOLLOW refuses a symlink; O_NONBLOCK keeps a FIFO from blocking the open.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(_) if is_symlink(path) => {
            return Err(invalid(format!("is a symlink; {what} must be regular files in the catalog")).into());
        }
        Err(err) => return Err(io_err(err)),
    };
    if !file.metadata().map_err(io_err)?.is_file() {
        return Err(invalid("is not a regular file".into()).into());
    }
    let mut text = String::new();
    file.take(crate::yaml::MAX_BYTES as u64 + 1).read_to_string(&mut text).map_err(|err| {
        if err.kind() == io::ErrorKind::InvalidData {
            CatalogError::Invalid(invalid("is not UTF-8 text".into()))
        } else {
            io_err(err)
        }
    })?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_workflows_install_parse_and_keep_edits() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::new(dir.path());
        catalog.install_bundled().unwrap();
        assert_eq!(
            catalog.names(),
            vec![
                "demo",
                "demo-cleanup",
                "demo-eval",
                "demo-pbt",
                "demo-tune",
                "tinker-atropos",
                "tinker-cookbook",
                "tinker-verifiers"
            ]
        );
        for name in catalog.names() {
            catalog.load(&name).unwrap_or_else(|e| panic!("bundled {name}: {e}"));
        }
        assert_eq!(catalog.default_name(), "tinker-atropos");
        let edited = "name: demo\nstages:\n  - {name: only, argv: [\"true\"]}\n";
        std::fs::write(dir.path().join("demo.yaml"), edited).unwrap();
        catalog.install_bundled().unwrap();
        assert_eq!(catalog.load("demo").unwrap().stages.len(), 1);
    }

    /// The verifiers workflow's trainer is handed exactly its locked profile (what `config show`
    /// says is fixed), and every var it declares.
    #[test]
    fn the_verifiers_workflow_passes_its_locked_profile_and_its_vars() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::new(dir.path());
        catalog.install_bundled().unwrap();
        let workflow = catalog.load("tinker-verifiers").unwrap();
        assert_eq!(workflow.trains(), Some(crate::environments::EnvKind::Verifiers));
        let argv = &workflow.stages[0].argv;
        let passed = |key: &str| argv.iter().find_map(|a| a.strip_prefix(key)?.strip_prefix('='));
        for (key, value) in &workflow.locked {
            assert_eq!(passed(key), value.as_str(), "locked {key}");
        }
        for var in workflow.vars.keys() {
            assert_eq!(passed(var), Some(format!("{{{var}}}").as_str()), "var {var}");
        }
        assert_eq!(passed("vf_env_id"), Some("{env_name}"));
        assert_eq!(passed("vf_env_args"), Some("{env_args}"));
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

    #[test]
    fn bundled_files_never_follow_symlinks_and_linked_workflows_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("victim");
        std::os::unix::fs::symlink(&target, dir.path().join("demo.yaml")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("gone"), dir.path().join("demo")).unwrap();
        let catalog = Catalog::new(dir.path());
        catalog.install_bundled().unwrap();
        assert!(!target.exists(), "the dangling link's target was written");
        assert!(!outside.path().join("gone").exists(), "a directory was made through a dangling link");
        std::fs::write(&target, "name: demo\nstages:\n  - {name: a, argv: [x]}\n").unwrap();
        let err = catalog.load("demo").unwrap_err().to_string();
        assert!(err.contains("demo.yaml: file: is a symlink"), "{err}");
        assert!(catalog.load("tinker-atropos").is_ok(), "a bad neighbour only affects itself");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dir.path().join("fifo.yaml"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap();
        let err = catalog.load("fifo").unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }

    /// A sweep by name or by a path that stays in the workflows directory; anything else is
    /// one line saying why, and nothing outside is read.
    #[test]
    fn sweep_files_are_read_by_name_or_from_inside_the_catalog_only() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let catalog = Catalog::new(dir.path());
        catalog.install_bundled().unwrap();
        let demo = catalog.sweep_text("demo-sweep").unwrap();
        assert!(demo.contains("workflow: demo-tune"), "{demo}");
        assert_eq!(catalog.sweep_text("demo-sweep.yaml").unwrap(), demo);
        assert_eq!(catalog.sweep_text("./demo-sweep.yaml").unwrap(), demo);
        let absolute = dir.path().join("sweeps/demo-sweep.yaml");
        assert_eq!(catalog.sweep_text(absolute.to_str().unwrap()).unwrap(), demo);
        assert_eq!(catalog.sweep_names(), vec!["demo-pbt".to_string(), "demo-sweep".to_string()]);
        std::fs::write(outside.path().join("secret.yaml"), "token: hunter2\n").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.yaml"), dir.path().join("sweeps/linked.yaml"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("sweeps/out")).unwrap();
        let secret = outside.path().join("secret.yaml");
        let cases: [(&str, &str); 10] = [
            ("nope", "unknown sweep 'nope' (available: demo-pbt, demo-sweep, linked)"),
            ("../../../../etc/passwd", "is outside the workflows directory"),
            (secret.to_str().unwrap(), "is outside the workflows directory"),
            ("out/secret.yaml", "is outside the workflows directory"),
            ("linked", "is a symlink; sweep files must be regular files"),
            ("../sweeps/..", "is not a file name"),
            ("../../nowhere/x.yaml", "is outside the workflows directory"),
            ("", "is not a file name"),
            ("a\0b", "is not a file name"),
            ("missing/x.yaml", "no such directory"),
        ];
        for (file, says) in cases {
            let err = catalog.sweep_text(file).unwrap_err().to_string();
            assert!(err.contains(says), "{file:?}: {err}");
            assert!(!err.contains('\n') && !err.contains("hunter2"), "{file:?}: {err}");
        }
        let err = catalog.sweep_text("bad\nname/x.yaml").unwrap_err().to_string();
        assert!(!err.contains('\n') && err.contains("bad\\nname"), "{err}");
    }
}
