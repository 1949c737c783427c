//! What the helper answered: its one JSON line on stdout read into a result, or, without one,
//! the end of its stderr. Pure, so every outcome is testable without Python.

use std::path::Path;
use std::process::ExitStatus;

use serde::Deserialize;

use super::Introspection;
use super::error::IntrospectError;
use super::python_version::PythonVersion;
use crate::environments::fields::FieldInfo;
use crate::launch::collect::Collected;

/// Number of trailing stderr lines quoted in [`IntrospectError::Failed`].
const STDERR_TAIL_LINES: usize = 3;

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
pub(super) fn interpret(
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
    use std::process::ExitStatus;

    use serde_json::json;

    use super::*;
    use crate::environments::FieldKind;
    use crate::environments::introspect::MIN_PYTHON;

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
}
