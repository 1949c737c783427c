//! A run's headline metrics: the last values of the metrics its workflow's `report:` names, else
//! of its sweep's metric, else of the W&B keys (`model::headline`), read by name like any other
//! metric. For a page of runs at once: one read per sweep among them, one per metric name.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

use crate::model::sweep::MemberOf;
use crate::model::{HeadlineValue, Run, headline_names};

use super::{Result, Service};

/// What says which metrics are a run's headline.
pub(super) struct HeadlineOf<'a> {
    pub id: Uuid,
    /// Its workflow's `report:` list (its snapshot's).
    pub report: &'a [String],
    pub sweep: Option<&'a MemberOf>,
}

impl Service {
    /// One run's headline values.
    pub(super) async fn headline_of(&self, run: &Run) -> Result<Vec<HeadlineValue>> {
        let of = HeadlineOf { id: run.id, report: &run.spec.report, sweep: run.params.sweep.as_ref() };
        Ok(self.headlines(&[of]).await?.remove(&run.id).unwrap_or_default())
    }

    /// Each run's headline values, in the order its names are; a run with none is left out.
    pub(super) async fn headlines(
        &self,
        runs: &[HeadlineOf<'_>],
    ) -> Result<HashMap<Uuid, Vec<HeadlineValue>>> {
        // The sweeps' metrics, only for members whose workflow names no headline of its own.
        let mut sweep_metrics: HashMap<Uuid, Option<String>> = HashMap::new();
        for run in runs.iter().filter(|r| r.report.is_empty()) {
            if let Some(member) = run.sweep
                && !sweep_metrics.contains_key(&member.sweep)
            {
                let metric = self.store.sweep(member.sweep).await?.and_then(|s| s.metric_name());
                sweep_metrics.insert(member.sweep, metric);
            }
        }
        let names: Vec<(Uuid, Vec<String>)> = runs
            .iter()
            .map(|run| {
                let sweep_metric = run.sweep.and_then(|m| sweep_metrics.get(&m.sweep)?.as_deref());
                (run.id, headline_names(run.report, sweep_metric))
            })
            .collect();
        let mut by_name: BTreeMap<&str, Vec<Uuid>> = BTreeMap::new();
        for (id, run_names) in &names {
            for name in run_names {
                by_name.entry(name).or_default().push(*id);
            }
        }
        let mut found: HashMap<(Uuid, &str), HeadlineValue> = HashMap::new();
        for (name, ids) in by_name {
            for (id, value) in self.store.last_values(&ids, name).await? {
                found.insert((id, name), value);
            }
        }
        let mut headlines = HashMap::new();
        for (id, run_names) in &names {
            let values: Vec<HeadlineValue> =
                run_names.iter().filter_map(|name| found.remove(&(*id, name.as_str()))).collect();
            if !values.is_empty() {
                headlines.insert(*id, values);
            }
        }
        Ok(headlines)
    }
}
