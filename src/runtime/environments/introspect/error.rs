//! Why an environment's configuration could not be described: one cause per variant.

use std::path::PathBuf;

use super::python_version::{MIN_PYTHON, PythonVersion};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
