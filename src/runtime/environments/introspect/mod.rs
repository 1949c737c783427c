//! Describes an environment's config fields by importing it in Python.
//!
//! Field names, types and defaults only exist once the environment module and its pydantic
//! config class are imported, and `config_init()` decides which config class and which values
//! apply. So this runs an embedded helper script (`introspect.py`) with the user's interpreter
//! and reads one JSON answer back. The helper is passed with `-c`: nothing is written to disk, no
//! temp file can go stale, and there is no stdin protocol to get wrong.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::fields::FieldInfo;
use tokio::process::Command;

use crate::launch::collect::{CollectError, collect};

mod error;
mod python_version;
mod reply;

pub use error::IntrospectError;
pub use python_version::{MIN_PYTHON, PythonVersion};

const HELPER: &str = include_str!("introspect.py");

/// The configurable part of an environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Introspection {
    /// The pydantic class the fields come from.
    pub config_class: String,
    /// Why the fields come from a fallback class instead of what `config_init()` built.
    pub fell_back: Option<String>,
    pub fields: Vec<FieldInfo>,
}

/// Imports `env_file` with `python`, calls `class_name.config_init()` and describes its config.
///
/// # Errors
///
/// Each [`IntrospectError`] names one cause: no interpreter, an interpreter older than
/// [`MIN_PYTHON`], no atroposlib, an environment file that does not import, a class that is not
/// in it, a helper that outlived `timeout` (it is killed with its process group), or an
/// unexpected failure quoting the end of the helper's stderr.
pub async fn introspect(
    python: &Path,
    env_file: &Path,
    class_name: &str,
    timeout: Duration,
) -> Result<Introspection, IntrospectError> {
    run_helper(python, env_file, class_name, timeout, MIN_PYTHON).await
}

async fn run_helper(
    python: &Path,
    env_file: &Path,
    class_name: &str,
    timeout: Duration,
    minimum: PythonVersion,
) -> Result<Introspection, IntrospectError> {
    let env_file = std::path::absolute(env_file).unwrap_or_else(|_| env_file.to_owned());
    // Checked here because the helper runs in the file's directory: a missing directory would
    // make the spawn fail and look like a missing interpreter.
    if !env_file.is_file() {
        return Err(IntrospectError::EnvImport { file: env_file, detail: "no such file".to_owned() });
    }
    let child = helper_command(&program(python), &env_file, class_name, minimum)
        .spawn()
        .map_err(|err| spawn_error(python, err))?;
    let output = collect(child, timeout).await.map_err(|err| match err {
        CollectError::Timeout => IntrospectError::Timeout { seconds: timeout.as_secs_f64() },
        CollectError::Wait(io) => {
            IntrospectError::Failed { detail: format!("cannot wait for the python helper: {io}") }
        }
    })?;
    tracing::debug!(status = %output.status, "config introspection helper exited");
    reply::interpret(python, &env_file, class_name, minimum, &output)
}

/// The program to spawn. The helper runs in another directory, so a relative path such as
/// `venv/bin/python` is anchored to ours first; a bare name is left for the `PATH` lookup.
fn program(python: &Path) -> PathBuf {
    if python.components().count() > 1 {
        std::path::absolute(python).unwrap_or_else(|_| python.to_owned())
    } else {
        python.to_owned()
    }
}

fn helper_command(python: &Path, env_file: &Path, class_name: &str, minimum: PythonVersion) -> Command {
    let mut command = Command::new(python);
    // -B: importing an environment must not leave __pycache__ in the user's tree.
    command
        .arg("-B")
        .arg("-c")
        .arg(HELPER)
        .arg(minimum.to_string())
        .arg(env_file)
        .arg(class_name)
        // Relative paths in an environment module resolve as they do next to the file.
        .current_dir(env_file.parent().unwrap_or(Path::new(".")))
        // Importing must not reach for the network: hub downloads retry for ~50 s offline, and
        // wandb may start a run.
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .env("WANDB_MODE", "disabled")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // If the caller stops waiting (its future is dropped), the helper must not live on.
        .kill_on_drop(true);
    // Own process group, so a timeout can also stop whatever the environment started.
    #[cfg(unix)]
    command.process_group(0);
    command
}

fn spawn_error(python: &Path, err: io::Error) -> IntrospectError {
    if err.kind() == io::ErrorKind::NotFound {
        IntrospectError::PythonMissing { python: python.to_owned() }
    } else {
        IntrospectError::Failed { detail: format!("cannot run '{}': {err}", python.display()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environments::{FieldKind, check_value};
    use serde_json::json;
    use std::fs;
    use std::time::Instant;
    use tempfile::TempDir;

    const LONG: Duration = Duration::from_secs(120);

    #[test]
    fn relative_interpreter_paths_are_anchored() {
        assert_eq!(program(Path::new("python3")), PathBuf::from("python3"));
        assert_eq!(program(Path::new("/usr/bin/python3")), PathBuf::from("/usr/bin/python3"));
        let relative = program(Path::new("venv/bin/python"));
        assert!(relative.is_absolute() && relative.ends_with("venv/bin/python"), "{relative:?}");
        assert!(program(Path::new("./python")).is_absolute());
    }

    // ---- the helper process, without atroposlib -----------------------------------------------

    /// `python3` from PATH, if it runs.
    fn system_python() -> Option<PathBuf> {
        let status = std::process::Command::new("python3")
            .args(["-c", "pass"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        status.is_ok_and(|s| s.success()).then(|| PathBuf::from("python3"))
    }

    fn has_atroposlib(python: &Path) -> bool {
        std::process::Command::new(python)
            .args(["-c", "import atroposlib"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn write_env(dir: &TempDir, name: &str, source: &str) -> PathBuf {
        let path = dir.path().join(name);
        fs::write(&path, source).expect("write env file");
        path
    }

    /// The helper promises to parse on old interpreters so the version check can run there.
    #[test]
    fn helper_keeps_old_syntax() {
        let Some(python) = system_python() else {
            println!("skipped: no python3 on PATH");
            return;
        };
        let check = "import ast, sys\n\
            src = sys.stdin.read()\n\
            ast.parse(src, feature_version=(3, 4))\n\
            assert not any(isinstance(n, ast.JoinedStr) for n in ast.walk(ast.parse(src))), 'f-string'\n";
        let mut child = std::process::Command::new(python)
            .args(["-c", check])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), HELPER.as_bytes()).unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }

    #[tokio::test]
    async fn missing_interpreter() {
        let dir = TempDir::new().unwrap();
        let env = write_env(&dir, "e.py", "");
        let python = Path::new("/nonexistent/bin/python3");
        let err = introspect(python, &env, "E", LONG).await.unwrap_err();
        assert!(matches!(&err, IntrospectError::PythonMissing { python: p } if p == python), "{err:?}");
    }

    #[tokio::test]
    async fn missing_env_file() {
        let dir = TempDir::new().unwrap();
        let env = dir.path().join("gone/e.py");
        let err = introspect(Path::new("python3"), &env, "E", LONG).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("could not import environment file {}: no such file", env.display())
        );
    }

    #[tokio::test]
    async fn interpreter_below_the_minimum() {
        let Some(python) = system_python() else {
            println!("skipped: no python3 on PATH");
            return;
        };
        let dir = TempDir::new().unwrap();
        let env = write_env(&dir, "e.py", "raise SystemExit('must not be imported')\n");
        // Real interpreters here are all new enough, so raise the bar instead.
        let future = PythonVersion { major: 3, minor: 99 };
        let err = run_helper(&python, &env, "E", LONG, future).await.unwrap_err();
        match err {
            IntrospectError::PythonTooOld { version, required, .. } => {
                assert!(PythonVersion::parse(&version).is_some_and(|v| v < future), "{version}");
                assert_eq!(required, future);
            }
            other => panic!("expected PythonTooOld, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn interpreter_without_atroposlib() {
        let Some(python) = system_python() else {
            println!("skipped: no python3 on PATH");
            return;
        };
        if has_atroposlib(&python) {
            println!("skipped: the system python3 has atroposlib");
            return;
        }
        let dir = TempDir::new().unwrap();
        let env = write_env(&dir, "e.py", "");
        let err = introspect(&python, &env, "E", LONG).await.unwrap_err();
        assert!(matches!(err, IntrospectError::AtroposMissing { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "atroposlib is not installed for python3: run `python3 -m pip install atroposlib`"
        );
    }

    /// A stand-in interpreter: a shell script, to exercise the process handling alone.
    fn fake_python(dir: &TempDir, script: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.path().join("fake-python");
        fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[tokio::test]
    async fn timeout_kills_the_process_group() {
        let dir = TempDir::new().unwrap();
        let env = write_env(&dir, "e.py", "");
        let pid_file = dir.path().join("grandchild.pid");
        let python = fake_python(&dir, &format!("sleep 60 &\necho $! > '{}'\nwait", pid_file.display()));
        let started = Instant::now();
        let err = introspect(&python, &env, "E", Duration::from_millis(500)).await.unwrap_err();
        assert!(matches!(err, IntrospectError::Timeout { seconds } if seconds == 0.5), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        let grandchild = fs::read_to_string(&pid_file).unwrap();
        let proc_dir = PathBuf::from(format!("/proc/{}", grandchild.trim()));
        // The grandchild was killed; give the kernel a moment to reap it (its parent is gone, so
        // init reaps it).
        let gone = (0..50).any(|_| {
            let state = fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
            let alive = !state.is_empty() && !state.contains(") Z ");
            if alive {
                std::thread::sleep(Duration::from_millis(20));
            }
            !alive
        });
        assert!(gone, "grandchild {} survived the timeout", grandchild.trim());
    }

    #[tokio::test]
    async fn crash_without_answer_is_failed() {
        let dir = TempDir::new().unwrap();
        let env = write_env(&dir, "e.py", "");
        let python = fake_python(&dir, "echo 'Fatal Python error: init failed' >&2\nexit 3");
        let err = introspect(&python, &env, "E", LONG).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "python helper failed unexpectedly: helper exited with status 3 without an answer: Fatal Python error: init failed"
        );
    }

    #[tokio::test]
    async fn lingering_stderr_does_not_hold_the_answer() {
        let dir = TempDir::new().unwrap();
        let env = write_env(&dir, "e.py", "");
        // Answers, then leaves a background process holding stderr open.
        let python = fake_python(
            &dir,
            r#"echo '{"outcome": "ok", "config_class": "C", "fell_back": null, "fields": []}'
sleep 4 &
exit 0"#,
        );
        let started = Instant::now();
        let got = introspect(&python, &env, "E", LONG).await.unwrap();
        assert_eq!(got.config_class, "C");
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    }

    // ---- against a real atroposlib ------------------------------------------------------------

    /// The interpreter of a venv with atroposlib, from LACHESIS_TEST_PYTHON.
    fn atropos_python() -> Option<PathBuf> {
        let python = std::env::var_os("LACHESIS_TEST_PYTHON").map(PathBuf::from);
        if python.is_none() {
            println!("skipped: LACHESIS_TEST_PYTHON not set");
        }
        python
    }

    const TEST_ENV: &str = r#"
import os
from typing import Dict, List, Literal, Optional

from pydantic import Field

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig
from _shared import SharedMixin

print("an environment that prints at import time")


class CountingConfig(BaseEnvConfig):
    tags: List[str] = Field(default_factory=lambda: ["math"], description="Dataset tags.")
    mode: Literal["fast", "slow"] = "fast"
    weights: Optional[Dict[str, float]] = None
    checkpoint: os.PathLike = None


class CountingEnv(SharedMixin, BaseEnv):
    """Counts things."""
    name = "counting"

    @classmethod
    def config_init(cls):
        if os.environ.get("LACHESIS_TEST_BREAK_CONFIG_INIT"):
            raise RuntimeError("no tokenizer here")
        env_config = BaseEnvConfig(group_size=6, tokenizer_name="./tokenizer", wandb_name="count")
        servers = [
            APIServerConfig(model_name="m", base_url="http://127.0.0.1:9001/v1", api_key="x"),
            APIServerConfig(model_name="m", base_url="http://127.0.0.1:9002/v1", api_key="x"),
        ]
        return env_config, servers


class CustomEnv(BaseEnv):
    env_config_cls = CountingConfig

    @classmethod
    def config_init(cls):
        return CountingConfig(tags=["a", "b"], mode="slow"), []


class BrokenEnv(BaseEnv):
    @classmethod
    def config_init(cls):
        raise RuntimeError("no tokenizer here")


if __name__ == "__main__":
    open(os.path.join(os.path.dirname(__file__), "main-ran"), "w").close()
"#;

    fn atropos_fixture() -> (TempDir, PathBuf) {
        let dir = TempDir::new().unwrap();
        write_env(&dir, "_shared.py", "class SharedMixin:\n    pass\n");
        let env = write_env(&dir, "counting_env.py", TEST_ENV);
        (dir, env)
    }

    fn by_name<'i>(got: &'i Introspection, name: &str) -> &'i FieldInfo {
        got.fields
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no field {name} in {:?}", got.fields))
    }

    #[tokio::test]
    async fn real_base_env_config() {
        let Some(python) = atropos_python() else {
            return;
        };
        let (dir, env) = atropos_fixture();
        let started = Instant::now();
        let got = introspect(&python, &env, "CountingEnv", LONG).await.unwrap();
        println!("introspection wall time: {:?}", started.elapsed());
        assert_eq!(got.config_class, "BaseEnvConfig");
        assert_eq!(got.fell_back, None);

        let group_size = by_name(&got, "group_size");
        assert_eq!((group_size.kind, group_size.optional), (FieldKind::Int, false));
        assert_eq!(group_size.type_name, "int");
        assert_eq!(group_size.default, json!(4));
        assert_eq!(group_size.value, json!(6));
        assert!(group_size.description.as_deref().is_some_and(|d| !d.is_empty()));

        let batch_size = by_name(&got, "batch_size");
        assert_eq!((batch_size.kind, &batch_size.default), (FieldKind::Int, &json!(-1)));
        let total_steps = by_name(&got, "total_steps");
        assert_eq!((total_steps.kind, &total_steps.value), (FieldKind::Int, &json!(1000)));

        let wandb_name = by_name(&got, "wandb_name");
        assert_eq!(wandb_name.type_name, "Optional[str]");
        assert_eq!((wandb_name.kind, wandb_name.optional), (FieldKind::Str, true));
        assert_eq!((&wandb_name.default, &wandb_name.value), (&json!(null), &json!("count")));

        let tokenizer = by_name(&got, "tokenizer_name");
        assert_eq!(tokenizer.kind, FieldKind::Str);
        assert!(tokenizer.default.is_string());
        assert_eq!(tokenizer.value, json!("./tokenizer"));

        let use_wandb = by_name(&got, "use_wandb");
        assert_eq!((use_wandb.kind, &use_wandb.default), (FieldKind::Bool, &json!(true)));
        let ratio = by_name(&got, "eval_limit_ratio");
        assert_eq!(ratio.kind, FieldKind::Float);
        // An enum field comes back as its value, the spelling a config file uses.
        let eval_handling = by_name(&got, "eval_handling");
        assert_eq!(eval_handling.default, json!("STOP_TRAIN"));

        assert!(!dir.path().join("main-ran").exists(), "the __main__ block ran");
        assert!(!dir.path().join("__pycache__").exists(), "bytecode was written");
        // What came back is valid input for check_value.
        assert_eq!(check_value(group_size, "8"), Ok(json!(8)));
    }

    #[tokio::test]
    async fn real_custom_config_class() {
        let Some(python) = atropos_python() else {
            return;
        };
        let (_dir, env) = atropos_fixture();
        let got = introspect(&python, &env, "CustomEnv", LONG).await.unwrap();
        assert_eq!(got.config_class, "CountingConfig");
        let tags = by_name(&got, "tags");
        assert_eq!((tags.type_name.as_str(), tags.kind), ("List[str]", FieldKind::List));
        assert_eq!((&tags.default, &tags.value), (&json!(["math"]), &json!(["a", "b"])));
        assert_eq!(tags.description.as_deref(), Some("Dataset tags."));
        let mode = by_name(&got, "mode");
        assert_eq!((mode.type_name.as_str(), mode.kind), ("Literal['fast', 'slow']", FieldKind::Str));
        assert_eq!(mode.value, json!("slow"));
        let weights = by_name(&got, "weights");
        assert_eq!(weights.type_name, "Optional[Dict[str, float]]");
        assert_eq!((weights.kind, weights.optional), (FieldKind::Dict, true));
        let checkpoint = by_name(&got, "checkpoint");
        assert_eq!(checkpoint.kind, FieldKind::Other);
        assert!(by_name(&got, "group_size").value == json!(4));
    }

    #[tokio::test]
    async fn real_config_init_failure_falls_back() {
        let Some(python) = atropos_python() else {
            return;
        };
        let (_dir, env) = atropos_fixture();
        let got = introspect(&python, &env, "BrokenEnv", LONG).await.unwrap();
        assert_eq!(got.config_class, "BaseEnvConfig");
        let reason = got.fell_back.as_deref().unwrap_or_default();
        assert_eq!(
            reason,
            "config_init() failed (RuntimeError: no tokenizer here); showing the defaults of BaseEnvConfig"
        );
        let group_size = by_name(&got, "group_size");
        assert_eq!((&group_size.default, &group_size.value), (&json!(4), &json!(4)));
        assert!(got.fields.iter().all(|f| f.value == f.default));
        for name in ["batch_size", "total_steps", "wandb_name", "tokenizer_name"] {
            by_name(&got, name);
        }
    }

    #[tokio::test]
    async fn real_import_errors_and_missing_class() {
        let Some(python) = atropos_python() else {
            return;
        };
        let (dir, env) = atropos_fixture();
        let err = introspect(&python, &env, "NoSuchEnv", LONG).await.unwrap_err();
        match &err {
            IntrospectError::ClassNotFound { defined, .. } => {
                assert_eq!(defined, &["BrokenEnv", "CountingConfig", "CountingEnv", "CustomEnv"]);
            }
            other => panic!("expected ClassNotFound, got {other:?}"),
        }

        let broken = write_env(&dir, "broken_env.py", "import not_a_real_module\n");
        let err = introspect(&python, &broken, "E", LONG).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "could not import environment file {}: ModuleNotFoundError: No module named 'not_a_real_module'",
                broken.display()
            )
        );

        let syntax = write_env(&dir, "syntax_env.py", "x = 1\ndef oops(:\n    pass\n");
        let err = introspect(&python, &syntax, "E", LONG).await.unwrap_err();
        assert!(
            matches!(&err, IntrospectError::EnvImport { detail, .. }
                if detail.starts_with("SyntaxError: ") && detail.ends_with("(syntax_env.py, line 2)")),
            "{err:?}"
        );

        let multiline = write_env(&dir, "multi_env.py", "raise ValueError('first\\n  second')\n");
        let err = introspect(&python, &multiline, "E", LONG).await.unwrap_err();
        assert!(
            matches!(&err, IntrospectError::EnvImport { detail, .. } if detail == "ValueError: first second"),
            "{err:?}"
        );

        let exits = write_env(&dir, "exits_env.py", "import sys\nsys.exit('bye')\n");
        let err = introspect(&python, &exits, "E", LONG).await.unwrap_err();
        assert!(
            matches!(&err, IntrospectError::EnvImport { detail, .. } if detail == "SystemExit: bye"),
            "{err:?}"
        );
    }
}
