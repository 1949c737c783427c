//! Describes an environment's config fields by importing it in Python.
//!
//! Field names, types and defaults only exist once the environment module and its pydantic
//! config class are imported, and `config_init()` decides which config class and which values
//! apply. So this runs an embedded helper script (`introspect.py`) with the user's interpreter
//! and reads one JSON answer back. The helper is passed with `-c`: nothing is written to disk, no
//! temp file can go stale, and there is no stdin protocol to get wrong.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::fields::FieldInfo;
use tokio::process::Command;

use crate::launch::collect::{CollectError, Collected, collect};

const HELPER: &str = include_str!("introspect.py");

/// Oldest Python that atroposlib supports.
pub const MIN_PYTHON: PythonVersion = PythonVersion { major: 3, minor: 11 };

/// Number of trailing stderr lines quoted in [`IntrospectError::Failed`].
const STDERR_TAIL_LINES: usize = 3;

/// The configurable part of an environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Introspection {
    /// The pydantic class the fields come from.
    pub config_class: String,
    /// Why the fields come from a fallback class instead of what `config_init()` built.
    pub fell_back: Option<String>,
    pub fields: Vec<FieldInfo>,
}

/// A `major.minor` Python version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PythonVersion {
    pub major: u32,
    pub minor: u32,
}

impl PythonVersion {
    /// Parses `3.9`, `3.9.18` or `Python 3.12.1rc1` (what `python --version` prints).
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let text = text.strip_prefix("Python").map_or(text, str::trim_start);
        let mut parts = text.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor_part = parts.next()?;
        let digits = minor_part.find(|c: char| !c.is_ascii_digit()).unwrap_or(minor_part.len());
        let minor = minor_part[..digits].parse().ok()?;
        Some(Self { major, minor })
    }
}

impl fmt::Display for PythonVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IntrospectError {
    #[error(
        "python interpreter '{}' not found: install Python {MIN_PYTHON} or newer, or set the interpreter with LACHESIS_PYTHON",
        .python.display()
    )]
    PythonMissing { python: PathBuf },
    #[error(
        "python interpreter '{}' is Python {version}; lachesis needs {required} or newer",
        .python.display()
    )]
    PythonTooOld { python: PathBuf, version: String, required: PythonVersion },
    #[error(
        "atroposlib is not installed for {}: run `{} -m pip install atroposlib`",
        .python.display(),
        .python.display()
    )]
    AtroposMissing { python: PathBuf },
    #[error("could not import environment file {}: {detail}", .file.display())]
    EnvImport { file: PathBuf, detail: String },
    #[error(
        "class '{class_name}' is not defined at module level in {} (defined there: {}); re-run discovery",
        .file.display(),
        or_none(.defined)
    )]
    ClassNotFound { file: PathBuf, class_name: String, defined: Vec<String> },
    #[error(
        "python helper did not finish within {seconds} s: importing the environment or its config_init() is too slow or waits on the network"
    )]
    Timeout { seconds: f64 },
    #[error("python helper failed unexpectedly: {detail}")]
    Failed { detail: String },
}

fn or_none(names: &[String]) -> String {
    if names.is_empty() { "no classes".to_owned() } else { names.join(", ") }
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
    interpret(python, &env_file, class_name, minimum, &output)
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

/// What the helper prints on stdout: one JSON object, tagged by `outcome`.
#[derive(Debug, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum Reply {
    Ok {
        config_class: String,
        fell_back: Option<String>,
        fields: Vec<FieldInfo>,
    },
    PythonTooOld {
        python: String,
    },
    AtroposMissing,
    AtroposBroken {
        detail: String,
    },
    EnvImport {
        detail: String,
    },
    ClassNotFound {
        #[serde(default)]
        defined: Vec<String>,
    },
    Failed {
        detail: String,
    },
}

/// Turns the helper's output into a result. Pure, so every outcome is testable without Python.
fn interpret(
    python: &Path,
    env_file: &Path,
    class_name: &str,
    minimum: PythonVersion,
    output: &Collected,
) -> Result<Introspection, IntrospectError> {
    let Some(reply) = parse_reply(&output.stdout) else {
        return Err(IntrospectError::Failed { detail: no_answer_detail(output) });
    };
    match reply {
        Reply::Ok { config_class, fell_back, fields } => {
            Ok(Introspection { config_class, fell_back, fields })
        }
        Reply::PythonTooOld { python: version } => Err(IntrospectError::PythonTooOld {
            python: python.to_owned(),
            version: PythonVersion::parse(&version).map_or(version, |v| v.to_string()),
            required: minimum,
        }),
        Reply::AtroposMissing => Err(IntrospectError::AtroposMissing { python: python.to_owned() }),
        Reply::AtroposBroken { detail } => Err(IntrospectError::Failed {
            detail: format!(
                "atroposlib is installed but does not import ({detail}): reinstall it with `{} -m pip install --force-reinstall atroposlib`",
                python.display()
            ),
        }),
        Reply::EnvImport { detail } => Err(IntrospectError::EnvImport { file: env_file.to_owned(), detail }),
        Reply::ClassNotFound { defined } => Err(IntrospectError::ClassNotFound {
            file: env_file.to_owned(),
            class_name: class_name.to_owned(),
            defined,
        }),
        Reply::Failed { detail } => Err(IntrospectError::Failed { detail }),
    }
}

/// The last non-empty stdout line that is a reply. Only one is expected, but a stray line before
/// it (from an interpreter wrapper, say) should not hide the answer.
fn parse_reply(stdout: &[u8]) -> Option<Reply> {
    String::from_utf8_lossy(stdout)
        .lines()
        .rev()
        .filter(|line| !line.trim().is_empty())
        .find_map(|line| serde_json::from_str(line).ok())
}

fn no_answer_detail(output: &Collected) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..].join(" | ");
    if tail.is_empty() {
        format!("helper {} without an answer", describe_status(output.status))
    } else {
        format!("helper {} without an answer: {tail}", describe_status(output.status))
    }
}

fn describe_status(status: ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => format!("was stopped ({status})"),
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

    // ---- versions and replies -----------------------------------------------------------------

    #[test]
    fn relative_interpreter_paths_are_anchored() {
        assert_eq!(program(Path::new("python3")), PathBuf::from("python3"));
        assert_eq!(program(Path::new("/usr/bin/python3")), PathBuf::from("/usr/bin/python3"));
        let relative = program(Path::new("venv/bin/python"));
        assert!(relative.is_absolute() && relative.ends_with("venv/bin/python"), "{relative:?}");
        assert!(program(Path::new("./python")).is_absolute());
    }

    #[test]
    fn python_version_parsing() {
        let v = |major, minor| Some(PythonVersion { major, minor });
        assert_eq!(PythonVersion::parse("3.9.18"), v(3, 9));
        assert_eq!(PythonVersion::parse("3.11"), v(3, 11));
        assert_eq!(PythonVersion::parse("Python 3.12.1rc1\n"), v(3, 12));
        assert_eq!(PythonVersion::parse("3.13rc2"), v(3, 13));
        assert_eq!(PythonVersion::parse("2.7.18"), v(2, 7));
        for text in ["", "3", "three.one", "3.x", "Python", "-3.1"] {
            assert_eq!(PythonVersion::parse(text), None, "{text}");
        }
        assert!(PythonVersion::parse("3.9.18") < Some(MIN_PYTHON));
        assert!(PythonVersion { major: 3, minor: 12 } > MIN_PYTHON);
        assert!(PythonVersion { major: 4, minor: 0 } > MIN_PYTHON);
        assert!(PythonVersion { major: 3, minor: 11 } >= MIN_PYTHON);
        assert_eq!(MIN_PYTHON.to_string(), "3.11");
    }

    fn output(code: i32, stdout: &str, stderr: &str) -> Collected {
        use std::os::unix::process::ExitStatusExt;
        Collected {
            status: ExitStatus::from_raw(code << 8),
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    fn interpret_reply(code: i32, stdout: &str, stderr: &str) -> Result<Introspection, IntrospectError> {
        interpret(
            Path::new("/opt/py/bin/python"),
            Path::new("/envs/gsm8k.py"),
            "GSM8kEnv",
            MIN_PYTHON,
            &output(code, stdout, stderr),
        )
    }

    #[test]
    fn reply_ok() {
        let stdout =
            r#"{"outcome": "ok", "python": "3.11.7", "config_class": "BaseEnvConfig", "fell_back": null,
            "fields": [{"name": "group_size", "type_name": "int", "kind": "int", "optional": false,
            "required": false, "default": 4, "value": 8, "description": "How many"},
            {"name": "mode", "type_name": "Weird", "kind": "someday", "optional": true,
            "default": null, "value": "x", "description": null}]}"#
                .replace('\n', " ");
        let got = interpret_reply(0, &format!("stray line\n{stdout}\n"), "").unwrap();
        assert_eq!(got.config_class, "BaseEnvConfig");
        assert_eq!(got.fell_back, None);
        assert_eq!(got.fields[0].value, json!(8));
        assert_eq!(got.fields[0].default, json!(4));
        assert_eq!(got.fields[0].description.as_deref(), Some("How many"));
        // Kinds unknown to this version degrade to Other; `required` may be absent.
        assert_eq!(got.fields[1].kind, FieldKind::Other);
        assert!(!got.fields[1].required);
    }

    #[test]
    fn reply_python_too_old() {
        let err =
            interpret_reply(10, r#"{"outcome": "python_too_old", "python": "3.9.18"}"#, "").unwrap_err();
        assert!(
            matches!(&err, IntrospectError::PythonTooOld { version, required, .. } if version == "3.9" && *required == MIN_PYTHON),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "python interpreter '/opt/py/bin/python' is Python 3.9; lachesis needs 3.11 or newer"
        );
    }

    #[test]
    fn reply_errors() {
        let msg = |stdout: &str| interpret_reply(1, stdout, "").unwrap_err().to_string();
        assert_eq!(
            msg(r#"{"outcome": "atropos_missing", "python": "3.11.7"}"#),
            "atroposlib is not installed for /opt/py/bin/python: run `/opt/py/bin/python -m pip install atroposlib`"
        );
        assert_eq!(
            msg(r#"{"outcome": "env_import", "detail": "ModuleNotFoundError: No module named 'datasets'"}"#),
            "could not import environment file /envs/gsm8k.py: ModuleNotFoundError: No module named 'datasets'"
        );
        assert_eq!(
            msg(r#"{"outcome": "class_not_found", "defined": ["A", "B"]}"#),
            "class 'GSM8kEnv' is not defined at module level in /envs/gsm8k.py (defined there: A, B); re-run discovery"
        );
        assert!(msg(r#"{"outcome": "class_not_found"}"#).contains("(defined there: no classes)"));
        assert_eq!(
            msg(r#"{"outcome": "atropos_broken", "detail": "ImportError: cannot import name 'X'"}"#),
            "python helper failed unexpectedly: atroposlib is installed but does not import (ImportError: cannot import name 'X'): reinstall it with `/opt/py/bin/python -m pip install --force-reinstall atroposlib`"
        );
        assert_eq!(
            msg(r#"{"outcome": "failed", "detail": "KeyError: 'x'"}"#),
            "python helper failed unexpectedly: KeyError: 'x'"
        );
    }

    #[test]
    fn no_reply_quotes_the_end_of_stderr() {
        let stderr = "Traceback (most recent call last):\n  File \"<string>\", line 1\n\n    print 'x'\n          ^\nSyntaxError: invalid syntax\n";
        let err = interpret_reply(1, "", stderr).unwrap_err();
        assert_eq!(
            err.to_string(),
            "python helper failed unexpectedly: helper exited with status 1 without an answer: print 'x' | ^ | SyntaxError: invalid syntax"
        );
        let err = interpret_reply(0, "not json\n{\"outcome\": \"martian\"}\n", "").unwrap_err();
        assert_eq!(
            err.to_string(),
            "python helper failed unexpectedly: helper exited with status 0 without an answer"
        );
    }

    #[test]
    fn other_error_messages() {
        let missing = IntrospectError::PythonMissing { python: "python3.12".into() };
        assert_eq!(
            missing.to_string(),
            "python interpreter 'python3.12' not found: install Python 3.11 or newer, or set the interpreter with LACHESIS_PYTHON"
        );
        let timeout = IntrospectError::Timeout { seconds: 30.0 };
        assert_eq!(
            timeout.to_string(),
            "python helper did not finish within 30 s: importing the environment or its config_init() is too slow or waits on the network"
        );
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
