//! The daemon's metric poller: while runs are running and W&B credentials are set, reads each
//! running run's W&B metric history every interval (5 min by default) and stores it per step.
//!
//! A task of its own beside the reconciler, not a reconciler worker: metric rows are not run
//! state (nothing decides on them), so they go straight to the store through the service, and a
//! slow or unreachable W&B (each request may wait its full timeout) never holds up the loop that
//! notices exits. A failed reading is logged (warn once per run, debug after) and never touches
//! the run.
//!
//! Each run is read for the keys results and the report show, and for the metrics the sweeps
//! being polled name (its own sweep's first), whatever their keys: a sweep's metric is what
//! decides its members, so it must never be one of the keys left out.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use uuid::Uuid;

use crate::model::Run;
use crate::service::{ReadingError, Service};
use crate::wandb::{MAX_NAMED_KEYS, WandbClient};

/// How long one W&B request of a reading may take.
const WANDB_TIMEOUT: Duration = Duration::from_secs(20);

/// Polls until the daemon stops; returns at once when no W&B API key is set.
pub async fn run(service: Service, node: String, interval: Duration) {
    let client = match WandbClient::from_env(WANDB_TIMEOUT) {
        Ok(Some(client)) => client,
        Ok(None) => {
            tracing::debug!("WANDB_API_KEY is not set: no training-metric history is recorded");
            return;
        }
        Err(err) => {
            tracing::warn!("no training-metric history is recorded: {err}");
            return;
        }
    };
    tracing::info!(every = %crate::workflow::Dur(interval), "recording training-metric history from W&B");
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Runs read last time: one that has since ended gets a last reading, for the steps logged
    // after the previous one.
    let mut watched: HashMap<Uuid, Run> = HashMap::new();
    // Runs whose last reading failed, so a W&B outage is warned about once per run.
    let mut failing: HashSet<Uuid> = HashSet::new();
    // The metric each polled sweep names (its file never changes once stored).
    let mut sweep_metrics: HashMap<Uuid, Option<String>> = HashMap::new();
    loop {
        ticker.tick().await;
        let running = match service.runs_to_read_metrics(&node).await {
            Ok(runs) => runs,
            Err(err) => {
                tracing::debug!("cannot list the runs to read metrics of: {err}");
                continue;
            }
        };
        let mut now_watched: HashMap<Uuid, Run> = running.into_iter().map(|run| (run.id, run)).collect();
        let ended: Vec<Run> =
            watched.drain().filter(|(id, _)| !now_watched.contains_key(id)).map(|(_, run)| run).collect();
        let polled: Vec<&Run> = now_watched.values().chain(&ended).collect();
        learn_sweep_metrics(&service, &polled, &mut sweep_metrics).await;
        let all: BTreeSet<&str> = sweep_metrics.values().flatten().map(String::as_str).collect();
        for run in polled {
            let own = run.params.sweep.and_then(|member| sweep_metrics.get(&member.sweep)?.as_deref());
            read_one(&service, &client, run, &named_keys(own, &all), &mut failing, interval).await;
        }
        for run in &ended {
            failing.remove(&run.id);
        }
        std::mem::swap(&mut watched, &mut now_watched);
    }
}

/// Keeps `known` to the sweeps of the `polled` runs, reading the metric of those not known yet
/// (one that cannot be read now is tried again next time).
async fn learn_sweep_metrics(service: &Service, polled: &[&Run], known: &mut HashMap<Uuid, Option<String>>) {
    let sweeps: HashSet<Uuid> = polled.iter().filter_map(|run| run.params.sweep.map(|m| m.sweep)).collect();
    known.retain(|sweep, _| sweeps.contains(sweep));
    for sweep in sweeps {
        if known.contains_key(&sweep) {
            continue;
        }
        match service.sweep_metric_name(sweep).await {
            Ok(metric) => {
                known.insert(sweep, metric);
            }
            Err(err) => {
                tracing::debug!(sweep = %crate::model::short_id(&sweep), "cannot read the sweep's metric: {err}")
            }
        }
    }
    if known.values().flatten().count() > MAX_NAMED_KEYS {
        tracing::debug!(
            "the polled sweeps name more than {MAX_NAMED_KEYS} metrics: each run is read for its own sweep's and the first others"
        );
    }
}

/// The keys a run is read for beyond the known ones: its own sweep's metric, then the other
/// polled sweeps' (`WandbClient::metric_readings` keeps the first `MAX_NAMED_KEYS`).
fn named_keys<'a>(own: Option<&'a str>, all: &BTreeSet<&'a str>) -> Vec<&'a str> {
    own.into_iter().chain(all.iter().copied().filter(|key| Some(*key) != own)).collect()
}

async fn read_one(
    service: &Service,
    client: &WandbClient,
    run: &Run,
    named: &[&str],
    failing: &mut HashSet<Uuid>,
    interval: Duration,
) {
    let run_id = run.short_id();
    match service.read_metric_history(run, client, named).await {
        Ok(steps) => {
            if failing.remove(&run.id) {
                tracing::info!(run = %run_id, steps, "reading W&B metric history again");
            } else {
                tracing::debug!(run = %run_id, steps, "stored W&B metric history");
            }
        }
        // Every run starts before it has logged anything: not worth a warning.
        Err(err @ ReadingError::NotYet { .. }) => tracing::debug!(run = %run_id, "{err}"),
        Err(err) if failing.insert(run.id) => tracing::warn!(
            run = %run_id,
            "cannot record W&B metric history ({err}); trying again every {}",
            crate::workflow::Dur(interval)
        ),
        Err(err) => tracing::debug!(run = %run_id, "cannot record W&B metric history: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_read_for_its_own_sweeps_metric_first_then_the_others() {
        let all: BTreeSet<&str> = ["a/score", "loss", "z/acc"].into_iter().collect();
        assert_eq!(named_keys(Some("z/acc"), &all), ["z/acc", "a/score", "loss"]);
        assert_eq!(named_keys(None, &all), ["a/score", "loss", "z/acc"]);
        assert!(named_keys(None, &BTreeSet::new()).is_empty());
    }
}
