//! Named dependencies' values at a claim: whether a run still needs them written (at its
//! claim, or after a crash cut its claim short), and its params once they are read — its own
//! values that use them expanded — or the problem that fails it, naming the dependency.

use std::collections::BTreeMap;

use crate::model::{Run, RunParams};
use crate::workflow::template;

/// The run's own values that use a dependency's: (var, its text as given).
pub fn after_templates(run: &Run) -> Vec<(String, String)> {
    run.spec
        .vars
        .iter()
        .map(|(name, default)| (name.clone(), run.params.vars.get(name).unwrap_or(default).clone()))
        .filter(|(_, raw)| {
            template::variables(raw).is_ok_and(|vars| vars.iter().any(|v| v.starts_with("after.")))
        })
        .collect()
}

/// Whether the run takes values from runs it waited for that were not written yet (at its
/// claim, or after a crash cut its claim short).
pub fn needs_after_values(run: &Run) -> bool {
    (!run.params.after.is_empty() || !after_templates(run).is_empty())
        && !run.params.resolved.keys().any(|k| k.starts_with("after."))
}

/// `run`'s params with the dependency `values` read for it (`after.NAME.KIND`) and its own
/// values that use them expanded, with the event that records them; or the problem that fails
/// it. `sources` name where each dependency's values came from (`after.NAME` → "run 1a2b3c4d").
pub fn with_values(
    run: &Run,
    values: &BTreeMap<String, String>,
    sources: &BTreeMap<String, String>,
) -> Result<(RunParams, String), String> {
    let mut params = run.params.clone();
    params.resolved.extend(values.clone());
    for (var, raw) in after_templates(run) {
        for used in template::variables(&raw).unwrap_or_default() {
            if used.starts_with("after.") && !params.resolved.contains_key(used) {
                let weights = used
                    .strip_suffix(".best_trained_weights")
                    .or_else(|| used.strip_suffix(".trained_weights"));
                let problem = match weights.and_then(|dep| sources.get(dep)) {
                    Some(source) => format!("{used}: {source} reported no trained weights"),
                    None => format!("vars.{var}: {{{used}}} names no dependency value"),
                };
                return Err(problem);
            }
        }
        match template::expand(&raw, &params.resolved) {
            Ok(value) => {
                params.resolved.insert(var, value);
            }
            Err(err) => return Err(format!("vars.{var}: {err}")),
        }
    }
    let names: Vec<&String> = values.keys().collect();
    let note =
        format!("dependency values: {}", names.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", "));
    Ok((params, note))
}

#[cfg(test)]
#[path = "dependencies_tests.rs"]
mod tests;
