//! An installed distribution's metadata, read from its `*.dist-info` directory: the name and
//! version of `METADATA`, its summary, and the top-level modules it installs (`top_level.txt`,
//! else the first components of `RECORD`'s paths). Nothing is imported; every read is bounded.

use std::fs;
use std::io::Read;
use std::path::Path;

/// The most read of one metadata file: a RECORD of a large package runs to megabytes, and only
/// its top-level names are wanted.
const MAX_METADATA_BYTES: u64 = 1 << 20;

/// What discovery needs of one distribution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DistInfo {
    pub(super) name: String,
    pub(super) version: String,
    pub(super) summary: Option<String>,
}

/// Reads at most [`MAX_METADATA_BYTES`] of `path` as text (invalid UTF-8 replaced).
pub(super) fn read_bounded(path: &Path) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    fs::File::open(path)?.take(MAX_METADATA_BYTES).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The `Name`, `Version` and `Summary` headers of a `METADATA` (or `PKG-INFO`) text: email-style
/// headers up to the first blank line. `None` without a name and a version.
pub(super) fn parse_metadata(text: &str) -> Option<DistInfo> {
    let (mut name, mut version, mut summary) = (None, None, None);
    for line in text.lines() {
        if line.trim().is_empty() {
            break; // the body (the long description) follows
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim().to_ascii_lowercase().as_str() {
            "name" if name.is_none() && !value.is_empty() => name = Some(value.to_owned()),
            "version" if version.is_none() && !value.is_empty() => version = Some(value.to_owned()),
            "summary" if summary.is_none() && !value.is_empty() && value != "UNKNOWN" => {
                summary = Some(value.to_owned());
            }
            _ => {}
        }
    }
    Some(DistInfo { name: name?, version: version?, summary })
}

/// The module names of `top_level.txt`: one a line, blanks and paths skipped.
pub(super) fn parse_top_level(text: &str) -> Vec<String> {
    let mut names: Vec<String> =
        text.lines().map(str::trim).filter(|name| is_module_name(name)).map(str::to_owned).collect();
    names.dedup();
    names
}

/// The top-level modules a `RECORD` installs: `NAME.py` and `NAME/__init__.py` at the root of
/// the site directory (its first CSV column; paths outside it, `..` or absolute, are skipped).
pub(super) fn parse_record(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let path = record_path(line);
        let module = match path.split_once('/') {
            Some((dir, "__init__.py")) => dir,
            Some(_) => continue,
            None => match path.strip_suffix(".py") {
                Some(stem) => stem,
                None => continue,
            },
        };
        if is_module_name(module) && !names.iter().any(|n| n == module) {
            names.push(module.to_owned());
        }
    }
    names
}

/// The first column of a RECORD line: a path, quoted when it holds a comma.
fn record_path(line: &str) -> &str {
    match line.strip_prefix('"') {
        Some(rest) => rest.split_once('"').map_or(rest, |(path, _)| path),
        None => line.split(',').next().unwrap_or_default(),
    }
}

/// A Python identifier of ASCII letters, digits and `_`, not starting with a digit: what an
/// import statement can name (wider Unicode names are not worth the risk of a wrong listing).
pub(super) fn is_module_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A distribution or project name as PEP 508 allows it: letters, digits, `.`, `_`, `-`, starting
/// and ending with a letter or digit (so never `..`, `/` or a NUL).
pub(super) fn is_project_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 200
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !name.contains("..")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn metadata_headers_until_the_body() {
        let text = "Metadata-Version: 2.4\nName: reverse-text\nVersion: 0.1.2\nSummary: Reverse a text.\nRequires-Dist: verifiers>=0.1.9\n\nName: not-this\n";
        assert_eq!(
            parse_metadata(text),
            Some(DistInfo {
                name: "reverse-text".into(),
                version: "0.1.2".into(),
                summary: Some("Reverse a text.".into())
            })
        );
        assert_eq!(parse_metadata("Name: x\n"), None, "a version is needed");
        assert_eq!(parse_metadata("Version: 1\n\nName: x\n"), None, "the body is not headers");
        assert_eq!(parse_metadata("Name: x\nVersion: 1\nSummary: UNKNOWN\n").unwrap().summary, None);
    }

    #[test]
    fn top_level_and_record_name_modules() {
        assert_eq!(parse_top_level("reverse_text\n\n../evil\nbad name\nother\n"), ["reverse_text", "other"]);
        let record = "reverse_text.py,sha256=abc,120\nreverse_text-0.1.dist-info/METADATA,,\npkg/__init__.py,,\npkg/sub.py,,\n\"odd,name.py\",,\n../../etc/x.py,,\n/abs.py,,\n__pycache__/x.pyc,,\n";
        assert_eq!(parse_record(record), ["reverse_text", "pkg"]);
    }

    #[test]
    fn names_that_cannot_be_imported_or_installed() {
        assert!(is_module_name("reverse_text") && is_module_name("_private") && !is_module_name("9x"));
        assert!(!is_module_name("") && !is_module_name("a-b") && !is_module_name("a.b"));
        assert!(is_project_name("reverse-text") && is_project_name("a.b_c-1"));
        for bad in ["", "..", "a/b", "a\0b", "-a", "a-", "a..b", "é"] {
            assert!(!is_project_name(bad), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn metadata_parsers_never_panic(text in "\\PC*(\n\\PC*){0,8}") {
            let _ = parse_metadata(&text);
            for name in parse_top_level(&text).into_iter().chain(parse_record(&text)) {
                prop_assert!(is_module_name(&name));
            }
        }
    }
}
