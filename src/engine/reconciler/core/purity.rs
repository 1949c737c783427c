//! The core stays pure: no file of it names the store, the runtime, the clock, a process, the
//! file system or the network, or reaches back into the shell. Comment lines name nothing.

/// What a pure decision never names; paths with '/' for '::', so that the layer test, which
/// reads this file too, does not take the list for uses.
const FORBIDDEN: &[&str] = &[
    "engine/store",
    "engine/service",
    "super/super",
    "crate/launch",
    "crate/daemon",
    "crate/logs",
    "crate/webhooks",
    "crate/failpoint",
    "crate/environ",
    "tokio",
    "sqlx",
    "reqwest",
    "rustix",
    "procfs",
    "tracing",
    "async ",
    "now_millis",
    "Utc/now",
    "Instant",
    "SystemTime",
    "std/fs",
    "std/process",
    "std/net",
    "std/env",
    "std/thread",
    "rand/",
];

#[test]
fn the_core_names_no_store_runtime_clock_or_process() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine/reconciler/core");
    let mut found = Vec::new();
    // A module split into a folder (`sim_nodes/`) is read file by file.
    let mut paths: Vec<std::path::PathBuf> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    while let Some(path) = paths.pop() {
        if path.is_dir() {
            paths.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let name = path.strip_prefix(&dir).unwrap().to_string_lossy().into_owned();
        // This file lists the names; the tables and the simulation may use a test's tools.
        if name == "purity.rs" || name == "sim.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for word in FORBIDDEN.iter().map(|w| w.replace('/', "::")).filter(|w| line.contains(w.as_str())) {
                found.push(format!("{name}:{}: {word}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "the reconciler's core must stay pure:\n{}", found.join("\n"));
}
