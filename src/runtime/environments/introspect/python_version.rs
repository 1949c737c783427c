//! A Python version as `major.minor`, and the oldest the environments' library supports.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Oldest Python that atroposlib supports.
pub const MIN_PYTHON: PythonVersion = PythonVersion { major: 3, minor: 11 };

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
