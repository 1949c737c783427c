//! The README and ARCHITECTURE.md say what the code is: every source path they name exists, and
//! every `lachesis …` command they show parses.

use std::path::{Path, PathBuf};

use crate::support::{TestHome, stderr};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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
    const ROOTS: [&str; 7] = ["src/", "tests/", "benches/", "migrations/", "workflows/", "scripts/", ".ci/"];
    let mut paths = Vec::new();
    for word in text.split(|c: char| c.is_whitespace() || "`()'\"[]<>*|".contains(c)) {
        let start = ROOTS.iter().filter_map(|root| word.find(root).filter(|&i| i == 0)).next();
        if start.is_none() {
            continue;
        }
        let word = word.trim_end_matches(['.', ',', ':', ';']);
        // Placeholders (`src/…`, `runs/ID`) name no file.
        if word.contains('…') || word.contains("NAME") || word.contains("ID") {
            continue;
        }
        paths.extend(expand_braces(word));
    }
    paths
}

#[test]
fn every_path_the_docs_name_exists() {
    for name in ["README.md", "ARCHITECTURE.md"] {
        let missing: Vec<String> =
            named_paths(&doc(name)).into_iter().filter(|p| !Path::new(&repo().join(p)).exists()).collect();
        assert!(missing.is_empty(), "{name} names paths that do not exist: {missing:?}");
    }
}

#[test]
fn the_path_finder_sees_braces_and_skips_placeholders() {
    let found = named_paths("see `src/store/sql.rs`, migrations/{sqlite,postgres} and src/… or runs/ID.");
    assert_eq!(found, ["src/store/sql.rs", "migrations/sqlite", "migrations/postgres"]);
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

#[test]
fn every_command_the_readme_shows_parses() {
    let readme = doc("README.md");
    let mut commands: Vec<Vec<&str>> = Vec::new();
    let mut fenced = false;
    for line in readme.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            commands.extend(command_words(line));
        }
        // Inline code: `lachesis …`.
        for span in line.split('`').skip(1).step_by(2) {
            commands.extend(command_words(span));
        }
    }
    commands.sort();
    commands.dedup();
    assert!(commands.len() > 20, "only {} commands found: {commands:?}", commands.len());
    let home = TestHome::new();
    for words in commands {
        let mut args = words.clone();
        args.push("--help");
        let out = home.cli(&args);
        assert!(
            out.status.success(),
            "README shows `lachesis {}`, which does not parse: {}",
            words.join(" "),
            stderr(&out)
        );
    }
}
