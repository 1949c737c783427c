//! A claimed run's dependency values: `{after.NAME.run_id}`, `{after.NAME.trained_weights}` and
//! `{after.NAME.run_dir}` of each named run it waited for, read when it is claimed (the runs
//! have ended by then), checked, and written into its params before its plan is made, so a
//! restarted daemon expands the same values. The stage plan turns them into
//! `LACHESIS_AFTER_NAME_*` variables.

use std::collections::BTreeMap;

use super::{Reconciler, Result};
use crate::model::dependency::{AFTER_VALUES, after_var, check_value};
use crate::model::{Run, short_id};
use crate::workflow::template;

/// The run's own values that use a dependency's: (var, its text as given).
fn after_templates(run: &Run) -> Vec<(String, String)> {
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
pub(super) fn needs_after_values(run: &Run) -> bool {
    (!run.params.after.is_empty() || !after_templates(run).is_empty())
        && !run.params.resolved.keys().any(|k| k.starts_with("after."))
}

impl Reconciler {
    /// Reads, checks and records `run`'s dependency values. The run as recorded, and the
    /// problem that must fail it when a value cannot be had or fails its check.
    pub(super) async fn resolve_after(&mut self, run: Run) -> Result<(Run, Option<String>)> {
        let named: Vec<_> =
            self.store.dependencies(run.id).await?.into_iter().filter(|d| d.name.is_some()).collect();
        if named.is_empty() {
            let problem = (!after_templates(&run).is_empty())
                .then(|| "its values name dependencies it does not have".to_string());
            return Ok((run, problem));
        }
        let mut values: BTreeMap<String, String> = BTreeMap::new();
        let mut shorts: BTreeMap<String, String> = BTreeMap::new();
        for dep in &named {
            let name = dep.name.as_deref().unwrap_or_default();
            let short = short_id(&dep.run);
            shorts.insert(format!("after.{name}"), short.clone());
            let Some(target) = self.store.run(dep.run).await? else {
                return Ok((run, Some(format!("after.{name}: run {short} no longer exists"))));
            };
            values.insert(after_var(name, AFTER_VALUES[0]), target.id.to_string());
            let run_dir = target.run_dir.to_string_lossy().into_owned();
            if let Err(problem) = check_value(&run_dir) {
                return Ok((run, Some(format!("after.{name}.run_dir from run {short}: {problem}"))));
            }
            values.insert(after_var(name, AFTER_VALUES[2]), run_dir);
            let checkpoints = self.store.checkpoints(target.id).await?;
            let stages = self.store.stages(target.id).await?;
            let weights = crate::engine::service::trained_weights_of(&checkpoints, &stages).await.unwrap_or_else(|err| {
                tracing::warn!(run = %run.short_id(), "cannot read the trained weights of run {short}: {err}");
                None
            });
            if let Some(weights) = weights {
                if let Err(problem) = check_value(&weights) {
                    return Ok((
                        run,
                        Some(format!("after.{name}.trained_weights from run {short}: {problem}")),
                    ));
                }
                values.insert(after_var(name, AFTER_VALUES[1]), weights);
            }
        }
        let mut params = run.params.clone();
        params.resolved.extend(values.clone());
        for (var, raw) in after_templates(&run) {
            for used in template::variables(&raw).unwrap_or_default() {
                if used.starts_with("after.") && !params.resolved.contains_key(used) {
                    let problem = match used.strip_suffix(".trained_weights").and_then(|dep| shorts.get(dep))
                    {
                        Some(short) => format!("{used}: run {short} reported no trained weights"),
                        None => format!("vars.{var}: {{{used}}} names no dependency value"),
                    };
                    return Ok((run, Some(problem)));
                }
            }
            match template::expand(&raw, &params.resolved) {
                Ok(value) => {
                    params.resolved.insert(var, value);
                }
                Err(err) => return Ok((run, Some(format!("vars.{var}: {err}")))),
            }
        }
        let names: Vec<&String> = values.keys().collect();
        let note =
            format!("dependency values: {}", names.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", "));
        let recorded = self.store.record_after_values(&run, &params, &note).await?;
        Ok((recorded, None))
    }
}
