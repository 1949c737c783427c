//! All YAML goes through here, so the parser (serde_yaml, archived upstream) can be swapped in
//! one place.

use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    pub message: String,
    /// 1-based line of the problem, when the parser knows it.
    pub line: Option<usize>,
}

pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    serde_yaml::from_str(text)
        .map_err(|err| YamlError { line: err.location().map(|loc| loc.line()), message: err.to_string() })
}

pub fn to_string<T: Serialize>(value: &T) -> Result<String, YamlError> {
    serde_yaml::to_string(value).map_err(|err| YamlError { line: None, message: err.to_string() })
}
