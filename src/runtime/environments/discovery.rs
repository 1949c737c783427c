//! Finds Atropos environments by parsing Python files, without running Python.
//!
//! An environment is a module-level class that inherits from atroposlib's `BaseEnv`, directly or
//! through other classes defined in the scanned files. Parsing (tree-sitter) instead of importing
//! keeps listing fast and safe: importing an environment runs arbitrary code and needs atroposlib,
//! and one broken file must never hide the others.
//!
//! Decisions worth knowing:
//! - Files whose name starts with `_` are never listed, but their classes still count as
//!   intermediate bases: a shared `_base.py` holding `class AgentBaseEnv(BaseEnv)` is a common
//!   layout, and skipping it would silently hide every environment built on it.
//! - Only classes at module level count (directly, or under decorators). Classes nested in other
//!   classes or functions, and classes under module-level `if`/`try` blocks, are ignored: they may
//!   not exist at run time, and introspection looks the class up as a module attribute.
//! - Bases are matched by their last dotted component and by name only (`x.y.BaseEnv` and
//!   `BaseEnv[Cfg]` both count as `BaseEnv`), because resolving imports would mean running them.
//! - A file whose syntax tree has any error is skipped whole with a warning, even though
//!   tree-sitter could recover part of it: a half-parsed class would give a wrong listing.
//! - Symlinked files are followed, symlinked directories are not (no loops to guard against).

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Serialize, Serializer};
use tree_sitter::Parser;

use super::classes::{ClassDef, parse_file};
use super::scan::collect_files;
use crate::model::{EnvKind, EnvSource};

/// The root class every environment derives from.
const BASE_ENV: &str = "BaseEnv";
/// What `config_init` builds when an environment does not name its own config class.
pub(super) const DEFAULT_CONFIG_CLASS: &str = "BaseEnvConfig";

/// One environment class found on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiscoveredEnv {
    /// The class attribute `name`, or the file stem when the class sets none.
    pub name: String,
    pub class_name: String,
    #[serde(serialize_with = "serialize_path_lossy")]
    pub file_path: PathBuf,
    /// First non-empty line of the class docstring.
    pub description: String,
    /// The class attribute `env_config_cls`, or `BaseEnvConfig`.
    pub config_class: String,
    pub kind: EnvKind,
    /// Where it was found (its directory, or its installed package and version).
    pub source: EnvSource,
}

/// A file or directory that could not be scanned; the rest of the listing is still valid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiscoveryWarning {
    #[serde(serialize_with = "serialize_path_lossy")]
    pub path: PathBuf,
    pub reason: String,
}

impl fmt::Display for DiscoveryWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.as_os_str().is_empty() {
            return f.write_str(&self.reason);
        }
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

/// The result of scanning environment directories.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Discovery {
    /// In path order, then source order within a file.
    pub environments: Vec<DiscoveredEnv>,
    pub warnings: Vec<DiscoveryWarning>,
}

/// Scans each directory recursively for environment classes. Never fails: anything that cannot
/// be read or parsed becomes a warning.
#[must_use]
pub fn discover(dirs: &[PathBuf]) -> Discovery {
    let mut warnings = Vec::new();
    let files = collect_files(dirs, &mut warnings);
    let mut parser = Parser::new();
    if let Err(err) = parser.set_language(&tree_sitter_python::LANGUAGE.into()) {
        // Only reachable if the grammar and runtime crates disagree on ABI: a build problem,
        // reported rather than panicking so the caller still gets a (empty) listing.
        warnings.push(DiscoveryWarning {
            path: PathBuf::new(),
            reason: format!("python grammar is unusable: {err}"),
        });
        return Discovery { environments: Vec::new(), warnings };
    }

    let mut classes = Vec::new();
    for file in &files {
        match parse_file(&mut parser, &file.path) {
            Ok(found) => classes.extend(found.into_iter().map(|class| (file, class))),
            Err(reason) => warnings.push(DiscoveryWarning { path: file.path.clone(), reason }),
        }
    }

    let derived = names_deriving_from_base_env(classes.iter().map(|(_, class)| class));
    let environments = classes
        .iter()
        .filter(|(file, class)| file.listed && class.name != BASE_ENV)
        .filter(|(_, class)| class.bases.iter().any(|base| derived.contains(base.as_str())))
        .map(|(file, class)| class.to_env(&file.path))
        .collect();
    Discovery { environments, warnings }
}

/// Every kind's environments: the Atropos classes under `dirs`, then the verifiers packages
/// installed in `site` (`Err`: why the Python could not be asked, a warning) and laid out under
/// `dirs`. A name two environments share is listed for both, with a warning (selecting it by
/// that name is ambiguous).
#[must_use]
pub fn discover_all(dirs: &[PathBuf], site: Result<&super::verifiers::PythonSite, String>) -> Discovery {
    let mut discovery = discover(dirs);
    let site = match site {
        Ok(site) => Some(site),
        Err(reason) => {
            discovery.warnings.push(DiscoveryWarning {
                path: PathBuf::new(),
                reason: format!("installed verifiers environments are not listed: {reason}"),
            });
            None
        }
    };
    let (verifiers, warnings) = super::verifiers::discover(site, dirs);
    // A verifiers module with a syntax error is also an unreadable Python file to the Atropos
    // scan: one warning for it, the one that says which environment it breaks.
    discovery.warnings.retain(|w| !warnings.iter().any(|v| v.path == w.path));
    discovery.warnings.extend(warnings);
    for env in &verifiers {
        if let Some(atropos) = discovery.environments.iter().find(|a| a.name == env.name) {
            discovery.warnings.push(DiscoveryWarning {
                path: env.file_path.clone(),
                reason: format!(
                    "environment '{}' ({}) has the name of the Atropos environment in {}: selecting it by name is ambiguous",
                    env.name,
                    env.source.describe(),
                    atropos.file_path.display()
                ),
            });
        }
    }
    discovery.environments.extend(verifiers);
    discovery
}

/// Names of classes that reach `BaseEnv` through their bases, including `BaseEnv` itself.
/// A breadth-first walk from `BaseEnv` over the reversed "is a base of" edges: linear, needs no
/// recursion, and terminates on cycles because each name is visited once.
fn names_deriving_from_base_env<'a>(classes: impl Iterator<Item = &'a ClassDef>) -> HashSet<&'a str> {
    let mut subclasses: HashMap<&str, Vec<&str>> = HashMap::new();
    for class in classes {
        for base in &class.bases {
            subclasses.entry(base.as_str()).or_default().push(class.name.as_str());
        }
    }
    let mut reached = HashSet::from([BASE_ENV]);
    let mut queue = VecDeque::from([BASE_ENV]);
    while let Some(name) = queue.pop_front() {
        for &sub in subclasses.get(name).into_iter().flatten() {
            if reached.insert(sub) {
                queue.push_back(sub);
            }
        }
    }
    reached
}

fn serialize_path_lossy<S: Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
    // serde refuses non-UTF-8 paths; a listing must still serialize.
    serializer.serialize_str(&path.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environments::fixtures::{class_names, discover_one, env, warning_for, write};
    use std::time::Instant;
    use tempfile::TempDir;

    #[test]
    fn direct_subclass_with_plain_name_and_docstring() {
        let dir = TempDir::new().unwrap();
        let path = write(
            dir.path(),
            "gsm8k.py",
            r#"
from atroposlib.envs.base import BaseEnv

class GSM8kEnv(BaseEnv):
    """
       Grade-school math, scored by exact match.

    More text that is not the description.
    """
    name = "gsm8k"

    @classmethod
    def config_init(cls):
        return None, None

if __name__ == "__main__":
    GSM8kEnv.cli()
"#,
        );
        let found = discover_one(&dir);
        assert_eq!(
            found.environments,
            vec![DiscoveredEnv {
                name: "gsm8k".into(),
                class_name: "GSM8kEnv".into(),
                file_path: path.clone(),
                description: "Grade-school math, scored by exact match.".into(),
                config_class: "BaseEnvConfig".into(),
                kind: EnvKind::Atropos,
                source: EnvSource::Directory { dir: path.parent().unwrap().to_owned() },
            }]
        );
        assert!(found.warnings.is_empty(), "{:?}", found.warnings);
        assert!(found.environments[0].file_path.is_absolute());
    }

    #[test]
    fn dotted_keyword_and_generic_bases() {
        let dir = TempDir::new().unwrap();
        write(
            dir.path(),
            "bases.py",
            r#"
import atroposlib
from atroposlib import envs

class Dotted(atroposlib.envs.BaseEnv):
    pass

class DottedShort(envs.base.BaseEnv):
    pass

class WithMeta(BaseEnv, metaclass=Meta):
    pass

class KeywordFirst(Mixin, BaseEnv, flag=True, **extra):
    pass

class Generic(BaseEnv[MyConfig]):
    pass

class NotAnEnv(Helper, metaclass=BaseEnv):
    pass

class Plain:
    pass
"#,
        );
        let found = discover_one(&dir);
        assert_eq!(class_names(&found), ["Dotted", "DottedShort", "WithMeta", "KeywordFirst", "Generic"]);
    }

    #[test]
    fn decorated_classes_are_found() {
        let dir = TempDir::new().unwrap();
        write(
            dir.path(),
            "decorated.py",
            r#"
@dataclass
@register(kind="env")
class Decorated(BaseEnv):
    name: str = "decorated"

@dataclass
def not_a_class():
    pass
"#,
        );
        let found = discover_one(&dir);
        assert_eq!(class_names(&found), ["Decorated"]);
        assert_eq!(env(&found, "Decorated").name, "decorated");
    }

    #[test]
    fn name_attribute_forms() {
        let dir = TempDir::new().unwrap();
        write(
            dir.path(),
            "names.py",
            r#"
class Annotated(BaseEnv):
    name: str = "annotated"

class SingleQuoted(BaseEnv):
    name = 'single'

class Reassigned(BaseEnv):
    name = "first"
    name = "second"

class FString(BaseEnv):
    name = f"{PREFIX}-env"

class NotLiteral(BaseEnv):
    name = compute_name()

class AnnotatedOnly(BaseEnv):
    name: str

class Empty(BaseEnv):
    name = ""

class Escaped(BaseEnv):
    name = "tab\there"

class Concatenated(BaseEnv):
    name = "con" 'cat'
"#,
        );
        let found = discover_one(&dir);
        let name = |class: &str| env(&found, class).name.clone();
        assert_eq!(name("Annotated"), "annotated");
        assert_eq!(name("SingleQuoted"), "single");
        assert_eq!(name("Reassigned"), "second");
        // Names not knowable without running the code fall back to the file stem.
        assert_eq!(name("FString"), "names");
        assert_eq!(name("NotLiteral"), "names");
        assert_eq!(name("AnnotatedOnly"), "names");
        assert_eq!(name("Empty"), "names");
        assert_eq!(name("Escaped"), "tab\there");
        assert_eq!(name("Concatenated"), "concat");
    }

    #[test]
    fn description_forms() {
        let dir = TempDir::new().unwrap();
        write(
            dir.path(),
            "docs.py",
            r#"
class NoDoc(BaseEnv):
    name = "nodoc"

class CommentFirst(BaseEnv):
    # a comment does not stop the docstring
    '''Single-quoted docstring.'''

class NotFirst(BaseEnv):
    name = "notfirst"
    """Not a docstring: not the first statement."""

class RawDoc(BaseEnv):
    r"""Raw \n stays."""

class BlankDoc(BaseEnv):
    """

    """

class BytesDoc(BaseEnv):
    b"""bytes are not docstrings"""
"#,
        );
        let found = discover_one(&dir);
        let description = |class: &str| env(&found, class).description.clone();
        assert_eq!(description("NoDoc"), "Environment from docs.py");
        assert_eq!(description("CommentFirst"), "Single-quoted docstring.");
        assert_eq!(description("NotFirst"), "Environment from docs.py");
        assert_eq!(description("RawDoc"), r"Raw \n stays.");
        assert_eq!(description("BlankDoc"), "Environment from docs.py");
        assert_eq!(description("BytesDoc"), "Environment from docs.py");
    }

    #[test]
    fn env_config_cls_names_the_config_class() {
        let dir = TempDir::new().unwrap();
        write(
            dir.path(),
            "configs.py",
            r#"
class MyConfig(BaseEnvConfig):
    temperature: float = 0.7

class Custom(BaseEnv):
    env_config_cls = MyConfig

class DottedConfig(BaseEnv):
    env_config_cls: type = configs.OtherConfig

class Default(BaseEnv):
    pass
"#,
        );
        let found = discover_one(&dir);
        assert_eq!(env(&found, "Custom").config_class, "MyConfig");
        assert_eq!(env(&found, "DottedConfig").config_class, "OtherConfig");
        assert_eq!(env(&found, "Default").config_class, "BaseEnvConfig");
        assert!(found.environments.iter().all(|e| e.class_name != "MyConfig"));
    }

    #[test]
    fn indirect_subclasses_across_files_and_private_bases() {
        let dir = TempDir::new().unwrap();
        // The shared base lives in a `_` file: not listed, but still part of the graph.
        write(dir.path(), "_agent_base.py", "class HermesAgentBaseEnv(atroposlib.envs.BaseEnv):\n    pass\n");
        write(
            dir.path(),
            "agents/terminal.py",
            "from _agent_base import HermesAgentBaseEnv\n\nclass TerminalEnv(HermesAgentBaseEnv):\n    name = \"terminal\"\n",
        );
        write(dir.path(), "agents/deeper.py", "class DeeperEnv(mod.TerminalEnv):\n    pass\n");
        write(
            dir.path(),
            "middle.py",
            "class MiddleBase(BaseEnv):\n    pass\n\nclass Leaf(MiddleBase):\n    pass\n",
        );
        let found = discover_one(&dir);
        // Path order: agents/deeper.py, agents/terminal.py, middle.py.
        assert_eq!(class_names(&found), ["DeeperEnv", "TerminalEnv", "MiddleBase", "Leaf"]);
        assert_eq!(env(&found, "DeeperEnv").name, "deeper");
    }

    #[test]
    fn inheritance_cycles_terminate_and_are_not_environments() {
        let dir = TempDir::new().unwrap();
        write(
            dir.path(),
            "cycle.py",
            "class A(B):\n    pass\n\nclass B(A):\n    pass\n\nclass Selfish(Selfish):\n    pass\n\nclass C(A, BaseEnv):\n    pass\n",
        );
        let found = discover_one(&dir);
        assert_eq!(class_names(&found), ["C"]);
    }

    #[test]
    fn only_module_level_classes_count() {
        let dir = TempDir::new().unwrap();
        write(
            dir.path(),
            "nested.py",
            r#"
class Outer:
    class InnerEnv(BaseEnv):
        pass

def factory():
    class LocalEnv(BaseEnv):
        pass
    return LocalEnv

if HAVE_ATROPOS:
    class ConditionalEnv(BaseEnv):
        pass

class TopLevel(BaseEnv):
    pass
"#,
        );
        assert_eq!(class_names(&discover_one(&dir)), ["TopLevel"]);
    }

    #[test]
    fn a_class_named_base_env_is_not_listed_but_still_a_root() {
        let dir = TempDir::new().unwrap();
        write(
            dir.path(),
            "vendored.py",
            "class BaseEnv(object):\n    pass\n\nclass Real(BaseEnv):\n    pass\n",
        );
        assert_eq!(class_names(&discover_one(&dir)), ["Real"]);
    }

    #[test]
    fn unrelated_class_sharing_a_name_with_an_env_is_not_listed() {
        let dir = TempDir::new().unwrap();
        write(dir.path(), "a.py", "class Shared(BaseEnv):\n    pass\n");
        write(dir.path(), "b.py", "class Shared(object):\n    pass\n");
        let found = discover_one(&dir);
        assert_eq!(found.environments.len(), 1);
        assert!(found.environments[0].file_path.ends_with("a.py"));
    }

    #[test]
    fn syntax_error_skips_the_whole_file_with_its_line() {
        let dir = TempDir::new().unwrap();
        let broken = write(
            dir.path(),
            "broken.py",
            "class Before(BaseEnv):\n    pass\n\ndef oops(:\n    pass\n\nclass After(BaseEnv):\n    pass\n",
        );
        write(dir.path(), "fine.py", "class Fine(BaseEnv):\n    pass\n");
        let found = discover_one(&dir);
        assert_eq!(class_names(&found), ["Fine"]);
        assert_eq!(warning_for(&found, &broken).reason, "syntax error at line 4");
    }

    #[test]
    fn unterminated_string_reports_a_line() {
        let dir = TempDir::new().unwrap();
        let broken = write(dir.path(), "open.py", "x = 1\ny = 2\nclass E(BaseEnv):\n    name = \"oops\n");
        let found = discover_one(&dir);
        assert!(found.environments.is_empty());
        let reason = &warning_for(&found, &broken).reason;
        assert!(reason.starts_with("syntax error at line "), "{reason}");
    }

    #[test]
    fn python_3_12_syntax_is_discovered() {
        let dir = TempDir::new().unwrap();
        write(
            dir.path(),
            "modern.py",
            r#"
type Reward = float | None
type Pair[T] = tuple[T, T]

def first[T](items: list[T]) -> T:
    return items[0]

class ModernEnv[T: Item, *Ts, **P](BaseEnv):
    """Uses PEP 695 generics."""
    name = "modern"

    def label(self, d):
        return f"{d["key"]}: {f"{1 + 1}"}"

    def handle(self, x):
        match x:
            case {"kind": kind, **rest}:
                return kind
            case _:
                return None
"#,
        );
        let found = discover_one(&dir);
        assert!(found.warnings.is_empty(), "{:?}", found.warnings);
        assert_eq!(env(&found, "ModernEnv").name, "modern");
        assert_eq!(env(&found, "ModernEnv").description, "Uses PEP 695 generics.");
    }

    #[test]
    fn non_utf8_file_is_a_warning() {
        let dir = TempDir::new().unwrap();
        let mut bytes = b"class Latin(BaseEnv):\n    name = \"".to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe, 0xe9]);
        bytes.extend_from_slice(b"\"\n");
        let latin = write(dir.path(), "latin.py", bytes);
        write(dir.path(), "ok.py", "class Ok(BaseEnv):\n    pass\n");
        let found = discover_one(&dir);
        assert_eq!(class_names(&found), ["Ok"]);
        let reason = &warning_for(&found, &latin).reason;
        assert_eq!(reason, "not valid UTF-8 at line 2; only UTF-8 sources are scanned");
    }

    #[test]
    fn byte_order_mark_is_accepted() {
        let dir = TempDir::new().unwrap();
        write(dir.path(), "bom.py", "\u{feff}class Bom(BaseEnv):\n    name = \"bom\"\n");
        let found = discover_one(&dir);
        assert!(found.warnings.is_empty(), "{:?}", found.warnings);
        assert_eq!(env(&found, "Bom").name, "bom");
    }

    #[test]
    fn serializes_to_json() {
        let dir = TempDir::new().unwrap();
        write(dir.path(), "e.py", "class E(BaseEnv):\n    \"\"\"Doc.\"\"\"\n    name = \"e\"\n");
        let found = discover(&[dir.path().to_owned(), dir.path().join("missing")]);
        let json = serde_json::to_value(&found).expect("discovery serializes");
        assert_eq!(json["environments"][0]["name"], "e");
        assert_eq!(json["environments"][0]["description"], "Doc.");
        assert_eq!(json["environments"][0]["config_class"], "BaseEnvConfig");
        assert!(json["environments"][0]["file_path"].as_str().is_some_and(|p| p.ends_with("e.py")));
        assert_eq!(json["warnings"][0]["reason"], "directory does not exist");
    }

    /// Discovery cost over a realistic directory: ~200 environment files of ~60 lines each.
    #[test]
    fn two_hundred_files_timing() {
        let dir = TempDir::new().unwrap();
        write(dir.path(), "_base.py", "class SharedBase(BaseEnv):\n    pass\n");
        for i in 0..200 {
            let body = (0..12)
                .map(|m| format!("    async def step_{m}(self, item):\n        scores = [x * {m} for x in item]\n        return {{\"score\": sum(scores) / max(len(scores), 1)}}\n\n"))
                .collect::<String>();
            let base = if i % 2 == 0 { "BaseEnv" } else { "SharedBase" };
            write(
                dir.path(),
                &format!("group_{}/env_{i:03}.py", i % 10),
                format!(
                    "import math\nfrom atroposlib.envs.base import BaseEnv\n\nclass Env{i}({base}):\n    \"\"\"Generated environment {i}.\"\"\"\n    name = \"env_{i:03}\"\n\n{body}"
                ),
            );
        }
        let started = Instant::now();
        let found = discover_one(&dir);
        let elapsed = started.elapsed();
        println!("discovery over 201 files: {elapsed:?}");
        assert_eq!(found.environments.len(), 200);
        assert!(found.warnings.is_empty());
        assert!(found.find("env_123").is_ok());
    }
}
