//! verifiers environments: packages exporting `load_environment(**kwargs)`, found without
//! running their code.
//!
//! Two places hold them:
//! - the Python of `LACHESIS_PYTHON`: every `*.dist-info` on its `sys.path` names a
//!   distribution; its module (the name with `-` as `_`, as `verifiers.load_environment`
//!   imports an id, else what `top_level.txt` or `RECORD` installs) is an environment when it
//!   defines `load_environment` at module level (or re-exports it from a module of its own);
//! - the environment directories, laid out as `vf-init` lays them out and not installed:
//!   `NAME/pyproject.toml` beside `NAME.py` or a package `NAME/__init__.py`.
//!
//! A module is read only when its text mentions `load_environment`, so the hundreds of other
//! distributions of a Python cost a directory listing and a metadata file each. Anything
//! broken (a syntax error, no `load_environment`, a name another environment or the standard
//! library has, unreadable metadata) is a warning; the rest of the listing stands.

mod check;
mod dist_info;
mod pyproject;
mod signature;
mod site;

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use tree_sitter::Parser;

pub use check::import_check;
pub use site::{PythonSite, python_site};

use super::discovery::{DiscoveredEnv, DiscoveryWarning};
use super::introspect::Introspection;
use super::scan::usable_root;
use crate::model::{EnvKind, EnvSource};
use dist_info::{
    is_module_name, is_project_name, parse_metadata, parse_record, parse_top_level, read_bounded,
};
use signature::{Found, LOAD_ENVIRONMENT, ModuleInfo, read_module};

/// What a verifiers environment's `class_name` and `config_class` say: its parameters are
/// those of this function.
pub const ENTRY_POINT: &str = LOAD_ENVIRONMENT;
/// A module larger than this is not read (no environment module is; a generated one might be).
const MAX_MODULE_BYTES: u64 = 4 << 20;

/// Finds the verifiers environments installed in `site` (when the Python could be asked) and
/// laid out under `dirs`. Never fails: what cannot be read is a warning.
#[must_use]
pub fn discover(site: Option<&PythonSite>, dirs: &[PathBuf]) -> (Vec<DiscoveredEnv>, Vec<DiscoveryWarning>) {
    let mut scan =
        Scan { parser: Parser::new(), found: Vec::new(), warnings: Vec::new(), by_name: HashMap::new() };
    if let Err(err) = scan.parser.set_language(&tree_sitter_python::LANGUAGE.into()) {
        scan.warn(PathBuf::new(), format!("python grammar is unusable: {err}"));
        return (scan.found, scan.warnings);
    }
    if let Some(site) = site {
        scan.installed(site);
    }
    for dir in dirs {
        let mut root_warnings = Vec::new();
        // The Atropos scan of the same roots says when one is missing.
        if let Some(root) = usable_root(dir, &mut root_warnings) {
            scan.directory_root(&root, site);
        }
    }
    (scan.found, scan.warnings)
}

/// The parameters of the `load_environment` in `file`, read from its source: what `env
/// select` makes the configurable fields.
///
/// # Errors
///
/// One line saying why the file cannot be read or holds no `load_environment`.
pub fn parameters(file: &Path) -> Result<Introspection, String> {
    let mut parser = Parser::new();
    parser.set_language(&tree_sitter_python::LANGUAGE.into()).map_err(|err| err.to_string())?;
    let source = read_module_file(file)?;
    let info = read_module(&mut parser, &source).map_err(|reason| format!("{}: {reason}", file.display()))?;
    let (fields, fell_back) = match info.found {
        Found::Defined { fields } => (fields, None),
        Found::Imported { from } => (
            Vec::new(),
            Some(format!(
                "{}: load_environment is imported from '{}', which lachesis does not follow: its parameters are unknown (set them with `config set`, unchecked)",
                file.display(),
                crate::text::one_line(&from)
            )),
        ),
        Found::Missing => return Err(format!("{}: defines no load_environment", file.display())),
    };
    Ok(Introspection { config_class: ENTRY_POINT.to_owned(), fell_back, fields })
}

fn read_module_file(file: &Path) -> Result<Vec<u8>, String> {
    let meta = fs::metadata(file).map_err(|err| format!("{}: cannot read: {err}", file.display()))?;
    if meta.len() > MAX_MODULE_BYTES {
        return Err(format!("{}: larger than {} MiB, not read", file.display(), MAX_MODULE_BYTES >> 20));
    }
    let mut bytes = Vec::new();
    fs::File::open(file)
        .and_then(|f| f.take(MAX_MODULE_BYTES).read_to_end(&mut bytes))
        .map_err(|err| format!("{}: cannot read: {err}", file.display()))?;
    Ok(bytes)
}

struct Scan {
    parser: Parser,
    found: Vec<DiscoveredEnv>,
    warnings: Vec<DiscoveryWarning>,
    /// Listed name → index in `found`, for collisions.
    by_name: HashMap<String, usize>,
}

/// A module that may be an environment, and where it came from.
struct Candidate<'a> {
    name: String,
    module: String,
    file: PathBuf,
    source: EnvSource,
    summary: Option<&'a str>,
    /// Said when the module defines no `load_environment` (a vf-init directory, or a
    /// distribution that requires verifiers); other distributions are simply not environments.
    expected: bool,
}

impl Scan {
    fn warn(&mut self, path: PathBuf, reason: String) {
        self.warnings.push(DiscoveryWarning { path, reason });
    }

    fn installed(&mut self, site: &PythonSite) {
        let mut seen = std::collections::HashSet::new();
        for dir in &site.path {
            let Ok(entries) = fs::read_dir(dir) else { continue };
            let mut infos: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "dist-info") && p.is_dir())
                .collect();
            infos.sort();
            for info in infos {
                self.distribution(site, dir, &info, &mut seen);
            }
        }
    }

    fn distribution(
        &mut self,
        site: &PythonSite,
        site_dir: &Path,
        info: &Path,
        seen: &mut std::collections::HashSet<String>,
    ) {
        let metadata = match read_bounded(&info.join("METADATA")) {
            Ok(text) => text,
            Err(err) => return self.warn(info.to_owned(), format!("unreadable metadata: {err}")),
        };
        let Some(dist) = parse_metadata(&metadata) else {
            return self.warn(info.to_owned(), "unreadable metadata: no Name and Version".to_owned());
        };
        // The first of a name on sys.path is what Python finds; a later copy is shadowed.
        let normalized = dist.name.to_ascii_lowercase().replace(['_', '.'], "-");
        if !seen.insert(normalized.clone()) || normalized == "verifiers" {
            return;
        }
        if !is_project_name(&dist.name) {
            return self.warn(
                info.to_owned(),
                format!("distribution name {} is not a valid name", crate::text::one_line(&dist.name)),
            );
        }
        let source = EnvSource::Package { package: dist.name.clone(), version: dist.version.clone() };
        let requires_verifiers = requires_verifiers(&metadata);
        let own = dist.name.replace('-', "_");
        let modules = if is_module_name(&own) && find_module(site_dir, &own).is_some() {
            vec![own.clone()]
        } else {
            let top_level =
                read_bounded(&info.join("top_level.txt")).map(|t| parse_top_level(&t)).unwrap_or_default();
            if top_level.is_empty() {
                read_bounded(&info.join("RECORD")).map(|t| parse_record(&t)).unwrap_or_default()
            } else {
                top_level
            }
        };
        for module in modules {
            if site.is_stdlib(&module) {
                if find_module(site_dir, &module).is_some_and(|file| mentions_load_environment(&file)) {
                    self.warn(
                        info.to_owned(),
                        format!("{} {}: its module '{module}' has the name of a standard-library module, which Python imports instead", dist.name, dist.version),
                    );
                }
                continue;
            }
            // Installed here, or (an editable install) anywhere on sys.path.
            let file = find_module(site_dir, &module)
                .or_else(|| site.path.iter().find_map(|dir| find_module(dir, &module)));
            let Some(file) = file else { continue };
            let name = if module == own { dist.name.clone() } else { module.clone() };
            self.candidate(Candidate {
                name,
                module,
                file,
                source: source.clone(),
                summary: dist.summary.as_deref(),
                expected: requires_verifiers,
            });
        }
    }

    fn directory_root(&mut self, root: &Path, site: Option<&PythonSite>) {
        let Ok(entries) = fs::read_dir(root) else { return };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| !super::scan::file_name(p).starts_with('.') && p.join("pyproject.toml").is_file())
            .collect();
        if root.join("pyproject.toml").is_file() {
            dirs.push(root.to_owned());
        }
        dirs.sort();
        for dir in dirs {
            self.layout(&dir, site);
        }
    }

    /// A `vf-init` layout: `dir/pyproject.toml` naming the project, and its module beside it.
    fn layout(&mut self, dir: &Path, site: Option<&PythonSite>) {
        let pyproject = dir.join("pyproject.toml");
        let project = match read_bounded(&pyproject) {
            Ok(text) => pyproject::parse_project(&text),
            Err(err) => return self.warn(pyproject, format!("cannot read: {err}")),
        };
        let dir_name = super::scan::file_name(dir).to_owned();
        let name = project.name.clone().unwrap_or_else(|| dir_name.clone());
        if !is_project_name(&name) {
            return self.warn(
                pyproject,
                format!("project name {} is not a valid name", crate::text::one_line(&name)),
            );
        }
        let module = name.replace('-', "_");
        if !is_module_name(&module) {
            return self.warn(
                pyproject,
                format!("project name '{name}' is not importable as a module ('{module}')"),
            );
        }
        if site.is_some_and(|s| s.is_stdlib(&module)) {
            return self.warn(
                pyproject,
                format!("environment '{name}': '{module}' is a standard-library module name, which Python imports instead"),
            );
        }
        let Some(file) = find_module(dir, &module) else {
            // Not every pyproject.toml under an environment directory is a verifiers one; only
            // a directory that looks like one is worth a word.
            if dir.join(format!("{dir_name}.py")).is_file() || mentions_verifiers(&pyproject) {
                self.warn(
                    pyproject,
                    format!("environment '{name}': no {module}.py or {module}/__init__.py beside it"),
                );
            }
            return;
        };
        let source = EnvSource::Directory { dir: dir.to_owned() };
        let summary = project.description.as_deref();
        self.candidate(Candidate { name, module, file, source, summary, expected: true });
    }

    fn candidate(&mut self, candidate: Candidate<'_>) {
        let Candidate { name, module, file, source, summary, expected } = candidate;
        let label = match &source {
            EnvSource::Package { package, version } => format!("{package} {version}"),
            EnvSource::Directory { .. } => format!("environment '{name}'"),
        };
        let bytes = match read_module_file(&file) {
            Ok(bytes) => bytes,
            Err(reason) => return self.warn(file, reason),
        };
        if !contains(&bytes, LOAD_ENVIRONMENT.as_bytes()) {
            if expected {
                self.warn(file, format!("{label}: defines no load_environment"));
            }
            return;
        }
        let info = match read_module(&mut self.parser, &bytes) {
            Ok(info) => info,
            Err(reason) => return self.warn(file, format!("{label}: {reason}")),
        };
        let ModuleInfo { found, description } = info;
        let file = match found {
            Found::Defined { .. } => file,
            // `from .impl import load_environment` in a package: its parameters are in `impl`.
            Found::Imported { from } => match submodule(&file, &module, &from) {
                Some(defining) => defining,
                None if from.starts_with('.') || from.starts_with(&format!("{module}.")) => file,
                None => {
                    if expected {
                        self.warn(
                            file,
                            format!(
                                "{label}: load_environment comes from '{}', not from the package itself",
                                crate::text::one_line(&from)
                            ),
                        );
                    }
                    return;
                }
            },
            Found::Missing => {
                if expected {
                    self.warn(file, format!("{label}: defines no load_environment at module level"));
                }
                return;
            }
        };
        if let Some(&first) = self.by_name.get(&name) {
            let other = &self.found[first];
            let same = fs::canonicalize(&other.file_path).ok() == fs::canonicalize(&file).ok();
            if !same {
                let reason = format!(
                    "environment '{name}' ({}) has the name of the one from {}, which is listed instead",
                    source.describe(),
                    other.source.describe()
                );
                self.warn(file, reason);
            }
            return;
        }
        let description = summary
            .map(str::to_owned)
            .or(description)
            .unwrap_or_else(|| format!("verifiers environment from module {module}"));
        self.by_name.insert(name.clone(), self.found.len());
        self.found.push(DiscoveredEnv {
            name,
            class_name: ENTRY_POINT.to_owned(),
            file_path: file,
            description,
            config_class: ENTRY_POINT.to_owned(),
            kind: EnvKind::Verifiers,
            source,
        });
    }
}

/// `dir/module.py`, else `dir/module/__init__.py`.
fn find_module(dir: &Path, module: &str) -> Option<PathBuf> {
    let flat = dir.join(format!("{module}.py"));
    if flat.is_file() {
        return Some(flat);
    }
    let package = dir.join(module).join("__init__.py");
    package.is_file().then_some(package)
}

/// The file of a module inside the package whose `__init__.py` is `init`, as its `from` names
/// it: `.sub.mod`, or `package.sub.mod` (`package` being `module`, the package itself).
fn submodule(init: &Path, module: &str, from: &str) -> Option<PathBuf> {
    let inside = from.strip_prefix('.').or_else(|| from.strip_prefix(module)?.strip_prefix('.'))?;
    if init.file_name()? != "__init__.py" {
        return None;
    }
    let parts: Vec<&str> = inside.split('.').collect();
    if !parts.iter().all(|part| is_module_name(part)) {
        return None;
    }
    let (last, dirs) = parts.split_last()?;
    let dir = dirs.iter().fold(init.parent()?.to_owned(), |dir, part| dir.join(part));
    find_module(&dir, last)
}

fn mentions_load_environment(file: &Path) -> bool {
    read_module_file(file).is_ok_and(|bytes| contains(&bytes, LOAD_ENVIRONMENT.as_bytes()))
}

fn mentions_verifiers(pyproject: &Path) -> bool {
    read_bounded(pyproject).is_ok_and(|text| text.contains("verifiers"))
}

/// `Requires-Dist: verifiers…` among the headers of a METADATA.
fn requires_verifiers(metadata: &str) -> bool {
    metadata.lines().take_while(|l| !l.trim().is_empty()).any(|line| {
        line.split_once(':').is_some_and(|(key, value)| {
            key.trim().eq_ignore_ascii_case("requires-dist") && {
                let value = value.trim_start().to_ascii_lowercase();
                value.strip_prefix("verifiers").is_some_and(|rest| {
                    !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
                })
            }
        })
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_re_export_is_followed_inside_its_own_package() {
        let dir = tempfile::tempdir().unwrap();
        let package = dir.path().join("math_env");
        std::fs::create_dir_all(package.join("impl")).unwrap();
        std::fs::write(package.join("__init__.py"), "").unwrap();
        std::fs::write(package.join("env.py"), "").unwrap();
        std::fs::write(package.join("impl/core.py"), "").unwrap();
        let init = package.join("__init__.py");
        assert_eq!(submodule(&init, "math_env", ".env"), Some(package.join("env.py")));
        assert_eq!(submodule(&init, "math_env", "math_env.env"), Some(package.join("env.py")));
        assert_eq!(submodule(&init, "math_env", ".impl.core"), Some(package.join("impl/core.py")));
        assert_eq!(submodule(&init, "math_env", "other.env"), None);
        assert_eq!(submodule(&init, "math_env", "..up"), None);
        assert_eq!(submodule(&init, "math_env", ".missing"), None);
        assert_eq!(submodule(&package.join("env.py"), "math_env", ".env"), None, "only a package re-exports");
    }

    #[test]
    fn a_dependency_on_verifiers_is_read_from_the_headers() {
        assert!(requires_verifiers("Name: x\nRequires-Dist: verifiers>=0.1.9\n"));
        assert!(requires_verifiers("Name: x\nrequires-dist: verifiers ; extra == 'x'\n"));
        assert!(!requires_verifiers("Name: x\nRequires-Dist: verifiers-extra\n"));
        assert!(!requires_verifiers("Name: x\n\nRequires-Dist: verifiers\n"));
    }
}
