//! What differs from one run of the suite to the next, replaced by a name in brackets before an
//! output is compared with its golden file: the ids the test made (by the role it gave them),
//! any other uuid, the scratch home and the repository, times, spans, ports and pids.
//!
//! Tables are compared with their columns' padding collapsed to two spaces: a column holding a
//! time or a path is as wide as the longest value of this run, so its padding varies too. A line
//! that ended in spaces still ends in spaces.

use std::path::Path;

use regex::Regex;
use serde_json::Value;

pub struct Redactions {
    /// Exact text and the name that stands for it.
    known: Vec<(String, String)>,
    patterns: Vec<(Regex, &'static str)>,
}

/// JSON keys whose numbers are spans, pids, ports or a process's start time (a moment, in ms
/// since the epoch, is told by its size whatever its key).
fn varies(key: &str) -> bool {
    key.ends_with("_ms")
        || key.ends_with("_s")
        || key.ends_with("_secs")
        || key.ends_with("pid")
        || key.ends_with("port")
        || key == "start_time"
}

/// JSON keys whose value, a number or none, depends on how fast the machine ran the test.
fn timing(key: &str) -> bool {
    ["steps_per_min", "eta_seconds"].contains(&key)
}

/// The smallest number read as a moment: 2001-09-09 in ms since the epoch.
const EPOCH_MS: u64 = 1_000_000_000_000;

impl Redactions {
    /// The scratch home and the repository by name, and the patterns every output shares.
    pub fn new(home: &Path) -> Redactions {
        let pattern = |re: &str| Regex::new(re).unwrap();
        let mut redactions = Redactions {
            known: Vec::new(),
            patterns: vec![
                (pattern(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "[uuid]"),
                (pattern(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?"), "[time]"),
                // A name stamped with its moment (`arith-20261128-061431`).
                (pattern(r"\b\d{8}-\d{6}\b"), "[stamp]"),
                (pattern(r"(127\.0\.0\.1|localhost|0\.0\.0\.0|\[::1\]):\d+"), "$1:[port]"),
                (pattern(r"\b\d+(\.\d+)?(ms|s|m|h|d)( \d+(s|m))?\b"), "[span]"),
                (pattern(r"\b\d+(\.\d+)? (B|KiB|MiB|GiB|TiB)\b"), "[size]"),
            ],
        };
        let home = home.display().to_string();
        // The home's canonical path too: a process may show either.
        if let Ok(canonical) = std::fs::canonicalize(&home) {
            redactions.value(canonical.display().to_string(), "[home]");
        }
        redactions.value(home, "[home]");
        redactions.value(env!("CARGO_MANIFEST_DIR"), "[repo]");
        if let Some(user_home) = std::env::var_os("HOME").filter(|h| h.len() > 1) {
            redactions.value(user_home.to_string_lossy(), "[user-home]");
        }
        if let Ok(host) = rustix::system::uname().nodename().to_str().map(str::to_string)
            && !host.is_empty()
        {
            redactions.value(host, "[host]");
        }
        redactions.value(env!("CARGO_PKG_VERSION"), "[version]");
        redactions
    }

    /// An id the test made, by its role: the whole id and its short form (its first 8).
    pub fn id(&mut self, id: impl ToString, role: &str) {
        let id = id.to_string();
        let name = format!("[{role}]");
        self.value(id[..8].to_string(), &name);
        self.value(id, &name);
    }

    /// An exact value (a pid, a path) and its name.
    pub fn value(&mut self, value: impl ToString, name: &str) {
        let value = value.to_string();
        if !value.is_empty() && !self.known.iter().any(|(known, _)| *known == value) {
            self.known.push((value, name.to_string()));
            // Longest first: a path before the home it lies in.
            self.known.sort_by_key(|(known, _)| std::cmp::Reverse(known.len()));
        }
    }

    /// `text` with what varies replaced (ids, paths, times, spans, ports), padding kept.
    pub fn words(&self, text: &str) -> String {
        let mut text = text.to_string();
        for (known, name) in &self.known {
            text = replace_word(&text, known, name);
        }
        for (pattern, name) in &self.patterns {
            text = pattern.replace_all(&text, *name).into_owned();
        }
        text
    }

    /// A command's text output: `words`, with runs of spaces inside a line collapsed to two.
    pub fn text(&self, text: &str) -> String {
        let spaces = Regex::new(r" {2,}").unwrap();
        self.words(text)
            .lines()
            .map(|line| spaces.replace_all(line, "  ").into_owned())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A JSON document, pretty-printed, with its varying numbers and strings replaced.
    pub fn json(&self, text: &str) -> String {
        let mut value: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        self.redact_value(None, &mut value);
        serde_json::to_string_pretty(&value).unwrap()
    }

    fn redact_value(&self, key: Option<&str>, value: &mut Value) {
        match value {
            _ if key.is_some_and(timing) => *value = Value::String("[timing]".into()),
            Value::Number(n) if n.as_u64().is_some_and(|n| n >= EPOCH_MS) => {
                *value = Value::String("[moment]".into())
            }
            Value::Number(_) if key.is_some_and(varies) => *value = Value::String("[number]".into()),
            Value::String(text) => *text = self.words(text),
            Value::Array(items) => items.iter_mut().for_each(|item| self.redact_value(key, item)),
            Value::Object(map) => {
                for (key, item) in map.iter_mut() {
                    self.redact_value(Some(key), item);
                }
            }
            _ => {}
        }
    }
}

/// `text` with `known` replaced where it is not part of a longer word (a short id inside a hex
/// string stays).
fn replace_word(text: &str, known: &str, name: &str) -> String {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(known) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + known.len()..].chars().next();
        let bounded = |c: Option<char>| c.is_none_or(|c| !is_word(c));
        let starts_word = known.chars().next().is_some_and(is_word);
        let ends_word = known.chars().next_back().is_some_and(is_word);
        out.push_str(&rest[..at]);
        if (!starts_word || bounded(before)) && (!ends_word || bounded(after)) {
            out.push_str(name);
        } else {
            out.push_str(known);
        }
        rest = &rest[at + known.len()..];
    }
    out.push_str(rest);
    out
}
