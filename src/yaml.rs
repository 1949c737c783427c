//! All YAML goes through here, so the parser (serde_yaml, archived upstream) can be swapped in
//! one place. Documents are bounded before parsing: a deeply nested file costs the parser
//! seconds to minutes before serde_yaml's own recursion limit refuses it.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::text::one_line;

/// The largest YAML document read (workflows are a few KiB).
pub const MAX_BYTES: usize = 1024 * 1024;
/// The deepest nesting accepted, as estimated by [`nesting_estimate`].
pub const MAX_DEPTH: usize = 64;

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    pub message: String,
    /// 1-based line of the problem, when the parser knows it.
    pub line: Option<usize>,
    /// Where in the document, e.g. `stages[0].start_delay`, when the problem is a value's.
    pub path: Option<String>,
}

pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    if text.len() > MAX_BYTES {
        return Err(YamlError {
            message: format!("the document is {} bytes; the most accepted is {MAX_BYTES}", text.len()),
            line: None,
            path: None,
        });
    }
    if let Some(line) = too_deep(text) {
        return Err(YamlError {
            message: format!("nested more than {MAX_DEPTH} levels deep"),
            line: Some(line),
            path: None,
        });
    }
    // serde_path_to_error names the field a bad value sits in (serde_yaml only gives a line).
    serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(text)).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let message = inner.to_string();
        // serde_yaml sometimes starts its message with the path itself.
        let message = message.strip_prefix(&format!("{path}: ")).map_or(message.clone(), str::to_string);
        YamlError {
            line: inner.location().map(|loc| loc.line()),
            // serde quotes the offending value whole: a file that is no YAML at all (a pipeline
            // named by mistake) must not come back as a screenful.
            message: one_line(&message),
            // A key from the document may hold a newline: errors stay on one line.
            path: (!["", ".", "?"].contains(&path.as_str())).then(|| one_line(&path)),
        }
    })
}

pub fn to_string<T: Serialize>(value: &T) -> Result<String, YamlError> {
    serde_yaml::to_string(value).map_err(|err| YamlError { line: None, message: err.to_string(), path: None })
}

/// The first 1-based line whose estimated nesting passes [`MAX_DEPTH`].
fn too_deep(text: &str) -> Option<usize> {
    let mut flow = 0usize;
    for (idx, line) in text.lines().enumerate() {
        if nesting_estimate(line, &mut flow) > MAX_DEPTH {
            return Some(idx + 1);
        }
    }
    None
}

/// A cheap over-estimate of the nesting at the deepest point of `line`: block nesting from the
/// indentation (two columns a level) and `- `/`? ` markers, plus open flow brackets (`[`, `{`),
/// which carry over to later lines in `flow`. Brackets inside quotes and comments don't count.
fn nesting_estimate(line: &str, flow: &mut usize) -> usize {
    let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
    let mut rest = &line[indent..];
    let mut markers = 0;
    while let Some(after) = rest.strip_prefix("- ").or_else(|| rest.strip_prefix("? ")) {
        markers += 1;
        rest = after.trim_start_matches(' ');
    }
    let block = indent / 2 + markers;
    let mut deepest = *flow;
    let mut quote: Option<char> = None;
    let mut previous = ' ';
    for c in rest.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') if previous == ' ' || previous == '\t' => break,
            (None, '[' | '{') => {
                *flow += 1;
                deepest = deepest.max(*flow);
            }
            (None, ']' | '}') => *flow = flow.saturating_sub(1),
            _ => {}
        }
        previous = c;
    }
    block + deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_and_large_documents_are_refused_quickly() {
        let began = std::time::Instant::now();
        let flow = format!("a: {}1{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let err = from_str::<serde_json::Value>(&flow).unwrap_err();
        assert_eq!(err.to_string(), "nested more than 64 levels deep");
        let block = "- ".repeat(20_000) + "x\n";
        assert!(from_str::<serde_json::Value>(&block).is_err());
        let indented: String = (0..2_000).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect();
        assert!(from_str::<serde_json::Value>(&indented).is_err());
        let big = format!("a: \"{}\"\n", "x".repeat(MAX_BYTES));
        assert!(from_str::<serde_json::Value>(&big).unwrap_err().to_string().contains("bytes"));
        assert!(began.elapsed() < std::time::Duration::from_secs(2), "{:?}", began.elapsed());
    }

    #[test]
    fn an_error_quoting_a_huge_value_stays_short_and_keeps_what_was_expected() {
        let text = format!("\"{}\"", "x".repeat(100_000));
        let err = from_str::<Vec<String>>(&text).unwrap_err();
        assert!(err.message.chars().count() <= crate::text::MAX_CHARS + 3, "{}", err.message.len());
        assert!(err.message.starts_with("invalid type: string"), "{}", err.message);
        assert!(err.message.ends_with("expected a sequence"), "{}", err.message);
    }

    #[test]
    fn ordinary_nesting_and_brackets_in_strings_pass() {
        let text = "a:\n  b:\n    - c: [1, {d: [2]}]\n    - \"[[[[\" # [[[[\n";
        let value: serde_json::Value = from_str(text).unwrap();
        assert_eq!(value["a"]["b"][1], "[[[[");
        let json_arg = format!("argv: ['{}']\n", "{".repeat(200));
        assert!(from_str::<serde_json::Value>(&json_arg).is_ok());
    }
}
