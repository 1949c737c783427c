//! The README, ARCHITECTURE.md and every page under `docs/` say what the code is: every
//! repository path they name exists, every `lachesis …` command they show parses, and every
//! relative link they make reaches a file and, with `#anchor`, a heading of it (GitHub's
//! anchors). The generated references are checked in `docs_reference.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::support::{TestHome, stderr};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents checked, relative to the repository: the README, ARCHITECTURE.md, and every
/// Markdown file under `docs/`, sorted.
fn documents() -> Vec<String> {
    let mut docs = vec!["README.md".to_string(), "ARCHITECTURE.md".to_string()];
    docs.extend(
        crate::support::files_under(&repo().join("docs"), "md")
            .into_iter()
            .map(|path| path.strip_prefix(repo()).unwrap().to_string_lossy().into_owned()),
    );
    docs[2..].sort();
    docs
}

fn doc(name: &str) -> String {
    std::fs::read_to_string(repo().join(name)).unwrap()
}

/// `migrations/{sqlite,postgres}` → both paths; a path without braces → itself.
fn expand_braces(path: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (path.find('{'), path.find('}')) else { return vec![path.to_string()] };
    if close < open {
        return vec![path.to_string()];
    }
    path[open + 1..close]
        .split(',')
        .flat_map(|alt| expand_braces(&format!("{}{alt}{}", &path[..open], &path[close + 1..])))
        .collect()
}

/// The repository paths a document names: words starting with one of the tree's top folders.
fn named_paths(text: &str) -> Vec<String> {
    const ROOTS: [&str; 8] =
        ["src/", "tests/", "benches/", "migrations/", "workflows/", "scripts/", ".ci/", "docs/"];
    let mut paths = Vec::new();
    for word in text.split(|c: char| c.is_whitespace() || "`()'\"[]<>*|".contains(c)) {
        if !ROOTS.iter().any(|root| word.starts_with(root)) {
            continue;
        }
        let word = word.trim_end_matches(['.', ',', ':', ';']);
        // Placeholders (`src/…`, `runs/ID`) name no file; `docs/x.md#anchor` names docs/x.md.
        if word.contains('…') || word.contains("NAME") || word.contains("ID") {
            continue;
        }
        let word = word.split('#').next().unwrap_or(word);
        paths.extend(expand_braces(word));
    }
    paths
}

#[test]
fn every_path_the_docs_name_exists() {
    let docs = documents();
    assert!(docs.len() > 20, "only {docs:?}");
    for name in docs {
        let missing: Vec<String> =
            named_paths(&doc(&name)).into_iter().filter(|p| !Path::new(&repo().join(p)).exists()).collect();
        assert!(missing.is_empty(), "{name} names paths that do not exist: {missing:?}");
    }
}

#[test]
fn the_path_finder_sees_braces_and_skips_placeholders() {
    let found = named_paths("see `src/store/sql.rs`, migrations/{sqlite,postgres} and src/… or runs/ID.");
    assert_eq!(found, ["src/store/sql.rs", "migrations/sqlite", "migrations/postgres"]);
    assert_eq!(named_paths("[x](docs/runs.md#a-run-request)"), ["docs/runs.md"]);
}

/// The command words of a shown `lachesis …` line: up to the first flag, choice or comment.
fn command_words(line: &str) -> Option<Vec<&str>> {
    let rest = line.trim().strip_prefix("lachesis ")?;
    let words: Vec<&str> = rest
        .split_whitespace()
        .take_while(|w| w.chars().next().is_some_and(|c| c.is_ascii_alphanumeric()))
        .collect();
    (!words.is_empty()).then_some(words)
}

/// Where a line of Markdown is.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    Text,
    /// In a fenced code block.
    Code,
    /// In a ```` ```console ```` block: commands after `$ `, their output on the other lines.
    Console,
}

/// The lines of a Markdown text with where each is (fence lines themselves are left out).
fn lines_placed(text: &str) -> Vec<(Place, &str)> {
    let mut place = Place::Text;
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            place = match (place, info.trim()) {
                (Place::Text, "console") => Place::Console,
                (Place::Text, _) => Place::Code,
                _ => Place::Text,
            };
            continue;
        }
        out.push((place, line));
    }
    out
}

/// The lines, and whether each is in a code block.
fn lines_fenced(text: &str) -> Vec<(bool, &str)> {
    lines_placed(text).into_iter().map(|(place, line)| (place != Place::Text, line)).collect()
}

/// Inline code spans of a line: `lachesis …`.
fn code_spans(line: &str) -> impl Iterator<Item = &str> {
    line.split('`').skip(1).step_by(2)
}

/// The long flags a shown command line passes (`--needs gpu=2`, `[--json]`), before any comment.
fn shown_flags(line: &str) -> Vec<&str> {
    let line = line.split(" #").next().unwrap_or(line);
    line.split(|c: char| c.is_whitespace() || "[]|()".contains(c))
        .filter_map(|word| word.strip_prefix("--"))
        .map(|flag| flag.split('=').next().unwrap_or(flag))
        .filter(|flag| flag.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
        .collect()
}

#[test]
fn every_command_the_docs_show_parses_with_its_flags() {
    // Each command's words, and the flags shown with it anywhere.
    let mut commands: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    let mut readme = 0;
    for name in documents() {
        let text = doc(&name);
        for (place, line) in lines_placed(&text) {
            let shown: Vec<&str> = match place {
                Place::Text => code_spans(line).filter(|span| command_words(span).is_some()).collect(),
                Place::Code => vec![line.trim()],
                Place::Console => line.strip_prefix("$ ").into_iter().collect(),
            };
            for line in shown {
                let Some(words) = command_words(line) else { continue };
                readme += usize::from(name == "README.md");
                let flags = commands.entry(words.into_iter().map(String::from).collect()).or_default();
                flags.extend(shown_flags(line).into_iter().map(String::from));
            }
        }
    }
    assert!(readme >= 8, "the README shows only {readme} commands");
    assert!(commands.len() > 40, "only {} commands found: {commands:?}", commands.len());
    let home = TestHome::new();
    for (words, flags) in commands {
        let mut args: Vec<&str> = words.iter().map(String::as_str).collect();
        args.push("--help");
        let out = home.cli(&args);
        let shown = format!("lachesis {}", words.join(" "));
        assert!(out.status.success(), "the docs show `{shown}`, which does not parse: {}", stderr(&out));
        let help = String::from_utf8_lossy(&out.stdout);
        let unknown: Vec<&String> = flags
            .iter()
            .filter(|flag| {
                !help.split(|c: char| c.is_whitespace() || c == ',').any(|w| w == format!("--{flag}"))
            })
            .collect();
        assert!(unknown.is_empty(), "the docs show `{shown}` with flags it does not take: {unknown:?}");
    }
}

#[test]
fn shown_flags_are_the_long_flags_before_a_comment() {
    assert_eq!(
        shown_flags("lachesis gc --older-than 30d [--dry-run] [--json]  # forget"),
        ["older-than", "dry-run", "json"]
    );
    assert_eq!(shown_flags("lachesis run start --needs gpu=2 --var=a # --not-this"), ["needs", "var"]);
}

/// GitHub's anchor for a heading: its text as rendered (code spans, emphasis and link targets
/// dropped), lower-cased, without what is not a letter, digit, space, `-` or `_`, spaces as `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // [text](target) → text.
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|i| open + i) else { break };
        let Some(end) = rest[close..].find(')').map(|i| close + i) else { break };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a document's headings, GitHub's way: a repeated one gets `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (fenced, line) in lines_fenced(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if fenced || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim());
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The targets of a line's Markdown links (`[text](target)`), outside code spans.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 1 {
            continue;
        }
        let mut rest = part;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].trim().to_string());
            rest = &after[end..];
        }
    }
    targets
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for name in documents() {
        let text = doc(&name);
        let dir = Path::new(&name).parent().unwrap_or(Path::new("")).to_path_buf();
        for (fenced, line) in lines_fenced(&text) {
            if fenced {
                continue;
            }
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file, anchor) = match target.split_once('#') {
                    Some((file, anchor)) => (file, Some(anchor)),
                    None => (target.as_str(), None),
                };
                let path = if file.is_empty() { PathBuf::from(&name) } else { normalize(&dir.join(file)) };
                let full = repo().join(&path);
                if !full.exists() {
                    broken.push(format!("{name}: {target} (no {})", path.display()));
                    continue;
                }
                if let Some(anchor) = anchor {
                    let target_text =
                        if full.is_dir() { String::new() } else { doc(&path.to_string_lossy()) };
                    if !anchors(&target_text).contains(anchor) {
                        broken.push(format!(
                            "{name}: {target} (no heading of {} has that anchor)",
                            path.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} links checked");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `docs/reference/../runs.md` → `docs/runs.md`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn anchors_follow_githubs_rules() {
    assert_eq!(slug("Checking a box: `doctor`"), "checking-a-box-doctor");
    assert_eq!(slug("W&B identity"), "wb-identity");
    assert_eq!(slug("A workflow's metrics"), "a-workflows-metrics");
    assert_eq!(
        slug("The shim fork server (2026-11-24, 04:27 UTC)"),
        "the-shim-fork-server-2026-11-24-0427-utc"
    );
    assert_eq!(slug("See [Sweeps](sweeps.md) now"), "see-sweeps-now");
    let found = anchors("# A\n## B\n```\n# not a heading\n```\n## B\n#hashtag\n");
    assert_eq!(found, ["a", "b", "b-1"].into_iter().map(String::from).collect());
    assert_eq!(
        link_targets("see [a](x.md#y) and `[b](not.md)` and [c](https://e.org)"),
        ["x.md#y", "https://e.org"]
    );
    assert_eq!(normalize(Path::new("docs/reference/../runs.md")), PathBuf::from("docs/runs.md"));
}
