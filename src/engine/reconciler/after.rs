//! A claimed run's dependency values: `{after.NAME.run_id}`, `{after.NAME.trained_weights}` and
//! `{after.NAME.run_dir}` of each named run it waited for, and `{after.NAME.best_run_id}`,
//! `{after.NAME.best_trained_weights}`, `{after.NAME.best_run_dir}` and
//! `{after.NAME.best_value}` of each named sweep (its recorded winner), read when it is claimed
//! (what it waited for has ended by then), checked, and written into its params before its plan
//! is made, so a restarted daemon expands the same values. The stage plan turns them into
//! `LACHESIS_AFTER_NAME_*` variables.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::core::dependencies;
use super::{Reconciler, Result};
use crate::model::dependency::{AFTER_VALUES, Awaited, SWEEP_VALUES, after_var, check_value};
use crate::model::sweep::python_float;
use crate::model::{Run, short_id};

impl Reconciler {
    /// Reads, checks and records `run`'s dependency values. The run as recorded, and the
    /// problem that must fail it when a value cannot be had or fails its check.
    pub(super) async fn resolve_after(&mut self, run: Run) -> Result<(Run, Option<String>)> {
        let named: Vec<_> =
            self.store.dependencies(run.id).await?.into_iter().filter(|d| d.name.is_some()).collect();
        if named.is_empty() {
            let problem = (!dependencies::after_templates(&run).is_empty())
                .then(|| "its values name dependencies it does not have".to_string());
            return Ok((run, problem));
        }
        let mut values: BTreeMap<String, String> = BTreeMap::new();
        // Where each dependency's values come from, for the problems that name it.
        let mut sources: BTreeMap<String, String> = BTreeMap::new();
        for dep in &named {
            let name = dep.name.as_deref().unwrap_or_default();
            let read = match dep.awaited {
                Awaited::Run { run: id, .. } => {
                    let source = format!("run {}", short_id(&id));
                    sources.insert(format!("after.{name}"), source.clone());
                    self.run_values(name, id, &AFTER_VALUES, &source, &mut values).await?
                }
                Awaited::Sweep { sweep: id, .. } => {
                    self.sweep_values(name, id, &mut values, &mut sources).await?
                }
            };
            if let Some(problem) = read {
                return Ok((run, Some(problem)));
            }
        }
        let (params, note) = match dependencies::with_values(&run, &values, &sources) {
            Ok(resolved) => resolved,
            Err(problem) => return Ok((run, Some(problem))),
        };
        let recorded = self.store.record_after_values(&run, &params, &note).await?;
        Ok((recorded, None))
    }

    /// The values of the run `id` for the dependency `name`, under `kinds` (its id, trained
    /// weights and run directory: a run's own names, or a sweep winner's `best_*`), each
    /// checked; `source` names where they come from in the problem, when there is one. Trained weights the run never
    /// reported are left out (a template that uses them fails then, saying so).
    async fn run_values(
        &self,
        name: &str,
        id: Uuid,
        kinds: &[&str],
        source: &str,
        values: &mut BTreeMap<String, String>,
    ) -> Result<Option<String>> {
        let [id_kind, weights_kind, dir_kind, ..] = kinds else {
            return Ok(Some(format!("after.{name}: no values for {source}")));
        };
        let Some(target) = self.store.run(id).await? else {
            return Ok(Some(format!("after.{name}: {source} no longer exists")));
        };
        values.insert(after_var(name, id_kind), target.id.to_string());
        let run_dir = target.run_dir.to_string_lossy().into_owned();
        if let Err(problem) = check_value(&run_dir) {
            return Ok(Some(format!("after.{name}.{dir_kind} from {source}: {problem}")));
        }
        values.insert(after_var(name, dir_kind), run_dir);
        let checkpoints = self.store.checkpoints(target.id).await?;
        let stages = self.store.stages(target.id).await?;
        let weights = super::trained_weights_of(&checkpoints, &stages).await.unwrap_or_else(|err| {
            tracing::warn!(run = %target.short_id(), "cannot read the trained weights of {source}: {err}");
            None
        });
        if let Some(weights) = weights {
            if let Err(problem) = check_value(&weights) {
                return Ok(Some(format!("after.{name}.{weights_kind} from {source}: {problem}")));
            }
            values.insert(after_var(name, weights_kind), weights);
        }
        Ok(None)
    }

    /// The values of the sweep `id`'s recorded winner for the dependency `name`: its run's
    /// (as `best_*`) and its best value.
    async fn sweep_values(
        &self,
        name: &str,
        id: Uuid,
        values: &mut BTreeMap<String, String>,
        sources: &mut BTreeMap<String, String>,
    ) -> Result<Option<String>> {
        let short = short_id(&id);
        let Some(sweep) = self.store.sweep(id).await? else {
            return Ok(Some(format!("after.{name}: sweep {short} no longer exists")));
        };
        let Some(winner) = sweep.winner else {
            return Ok(Some(format!("after.{name}: sweep {short} has no winner")));
        };
        let source =
            format!("run {} (member {} of sweep {short}, its winner)", short_id(&winner.run), winner.k);
        sources.insert(format!("after.{name}"), source.clone());
        let value = python_float(winner.value);
        if let Err(problem) = check_value(&value) {
            return Ok(Some(format!("after.{name}.{} from sweep {short}: {problem}", SWEEP_VALUES[3])));
        }
        values.insert(after_var(name, SWEEP_VALUES[3]), value);
        self.run_values(name, winner.run, &SWEEP_VALUES, &source, values).await
    }
}
