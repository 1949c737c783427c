//! Layers point one way: no module names one of a higher layer. The layers are the table in
//! ARCHITECTURE.md ("Layers"), read here, so the drawing and the rule cannot drift apart.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Upward names that remain, each a module pair (lower, higher) with what it is. The test fails
/// on any pair not listed, and on a listed pair that is gone (so the list only shrinks).
const KNOWN: &[(&str, &str, &str)] = &[];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Module → layer number, from the rows `| N name | `a`, `b` |` of ARCHITECTURE.md's "Layers".
fn layers() -> BTreeMap<String, u32> {
    let text = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let section = text.split("\n## Layers").nth(1).expect("ARCHITECTURE.md has a \"## Layers\" section");
    let section = section.split("\n## ").next().unwrap();
    let mut layers = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let Some(level) = cells.get(1).and_then(|c| c.split_whitespace().next()?.parse::<u32>().ok()) else {
            continue;
        };
        for module in cells[2].split('`').skip(1).step_by(2) {
            assert!(layers.insert(module.to_string(), level).is_none(), "{module} is in two layers");
        }
    }
    layers
}

/// The top-level modules a source text names through `prefix` (`crate::` or `lachesis::`):
/// `prefix::x::…` and every first name of a `prefix::{a, b::c, …}` group, across lines.
/// Comment lines name nothing.
fn named(text: &str, prefix: &str) -> BTreeSet<String> {
    let code: String =
        text.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        // `lachesis::` inside `my_lachesis::` is another path.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_alphanumeric() || c == '_') => {
                        found.insert(ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

#[test]
fn a_path_group_names_each_of_its_first_segments() {
    let text = "use crate::{\n    model::Run,\n    workflow::{Dur, StagePlan},\n    self as _,\n};\n\
                // crate::api is only a comment\nlet x = crate::text::one_line(\"\"); my_crate::yaml::x();\n";
    let found: Vec<String> = named(text, "crate::").into_iter().collect();
    assert_eq!(found, ["model", "self", "text", "workflow"]);
}

#[test]
fn no_module_names_a_higher_layer() {
    let layers = layers();
    let src = repo().join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    // lib.rs declares the ground's modules and the layers' folders (`pub mod runtime;`), and
    // re-exports each folder's modules (`pub use runtime::{launch, workflow, …};`), so a path
    // names a module, not its layer. A re-export from a module the table places
    // (`pub use engine::{reconciler, service, …};`) is a part of it: it names that module's layer.
    let mut declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';').map(str::to_string))
        .collect();
    let mut folders: BTreeSet<String> = BTreeSet::new();
    let mut alias: BTreeMap<String, String> = BTreeMap::new();
    // (A statement may span lines: rustfmt breaks a long group.)
    let statements = lib.split(';').map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "));
    for statement in statements {
        let Some(line) = statement.strip_prefix("pub use ") else { continue };
        let (module, rest) = line.split_once("::").unwrap();
        for name in named(&format!("x::{rest}"), "x::") {
            if layers.contains_key(module) {
                alias.insert(name, module.to_string());
            } else {
                folders.insert(module.to_string());
                declared.insert(name);
            }
        }
    }
    declared.retain(|m| !folders.contains(m));
    // Every module lib.rs declares has a layer, and the table names no module that is gone.
    let unplaced: Vec<_> = declared.iter().filter(|m| !layers.contains_key(*m)).collect();
    assert!(unplaced.is_empty(), "modules with no layer in ARCHITECTURE.md: {unplaced:?}");
    let gone: Vec<_> = layers.keys().filter(|m| *m != "cli" && !declared.contains(*m)).collect();
    assert!(gone.is_empty(), "ARCHITECTURE.md places modules src/lib.rs lacks: {gone:?}");
    // The crate's root holds lib.rs, main.rs and the ground; every other layer is a folder.
    for entry in std::fs::read_dir(&src).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let module = name.trim_end_matches(".rs");
        let ground = layers.get(module) == Some(&1);
        let fine =
            ground || folders.contains(module) || ["lib", "main", "bin", "engine", "model"].contains(&module);
        assert!(fine, "src/{name} is neither the ground nor a layer's folder");
    }

    let files = crate::support::files_under(&src, "rs");
    let mut upward: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let mut parts = relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned());
        let mut top = parts.next().unwrap();
        if folders.contains(&top) {
            match parts.next() {
                Some(inner) if inner != "mod.rs" => top = inner,
                _ => continue,
            }
        }
        let (module, prefix) = match top.trim_end_matches(".rs") {
            "lib" => continue,
            // The binaries are the CLI surface; they reach the library as `lachesis::`.
            "main" | "cli" | "bin" => ("cli".to_string(), "lachesis::"),
            other => (other.to_string(), "crate::"),
        };
        let own = layers[&module];
        let text = std::fs::read_to_string(&file).unwrap();
        for name in named(&text, prefix) {
            let name = alias.get(&name).cloned().unwrap_or(name);
            let Some(&level) = layers.get(&name) else { continue };
            if level > own {
                upward.entry((module.clone(), name)).or_default().push(relative.display().to_string());
            }
        }
    }
    let known: BTreeSet<(String, String)> =
        KNOWN.iter().map(|(low, high, _)| (low.to_string(), high.to_string())).collect();
    let new: Vec<_> = upward.iter().filter(|(pair, _)| !known.contains(*pair)).collect();
    assert!(new.is_empty(), "lower modules name higher ones (module, named): {new:?}");
    let fixed: Vec<_> = known.iter().filter(|pair| !upward.contains_key(*pair)).collect();
    assert!(fixed.is_empty(), "no longer upward, take them off KNOWN: {fixed:?}");
}

/// Inside the engine the direction is one way too: the service may name the reconciler and the
/// store, the reconciler only the store, the store neither (ARCHITECTURE.md: surfaces →
/// service → reconciler → store). Comment lines name nothing.
#[test]
fn inside_the_engine_the_service_calls_the_reconciler_and_both_the_store() {
    let engine = repo().join("src/engine");
    // The daemon's tasks (metric poller, report poster, sweep decider) act through the service:
    // nothing beneath them names them.
    let tasks = ["metric_poller", "report_poster", "sweep_decider"];
    let rules: [(&str, Vec<&str>); 3] = [
        ("service", tasks.to_vec()),
        ("reconciler", [&["service"][..], &tasks].concat()),
        ("store", [&["service", "reconciler"][..], &tasks].concat()),
    ];
    let mut upward = Vec::new();
    for (module, higher) in rules {
        for file in crate::support::files_under(&engine.join(module), "rs") {
            let text = std::fs::read_to_string(&file).unwrap();
            let code: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with("//")).collect();
            for name in &higher {
                let paths = [format!("engine::{name}"), format!("crate::{name}::"), format!("super::{name}")];
                for line in &code {
                    if paths.iter().any(|path| line.contains(path.as_str())) {
                        upward.push(format!("{}: {name}: {}", file.display(), line.trim()));
                    }
                }
            }
        }
    }
    assert!(upward.is_empty(), "engine modules name a higher one:\n{}", upward.join("\n"));
}
