//! The daemon's metric poller: while runs are running and W&B credentials are set, reads each
//! running run's W&B metric history every interval (5 min by default) and stores it per step.
//!
//! A task of its own beside the reconciler, not a reconciler worker: metric rows are not run
//! state (nothing decides on them), so they go straight to the store through the service, and a
//! slow or unreachable W&B (each request may wait its full timeout) never holds up the loop that
//! notices exits. A failed reading is logged (warn once per run, debug after) and never touches
//! the run.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use uuid::Uuid;

use crate::model::Run;
use crate::service::{ReadingError, Service};
use crate::wandb::WandbClient;

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
        for run in now_watched.values().chain(&ended) {
            read_one(&service, &client, run, &mut failing, interval).await;
        }
        for run in &ended {
            failing.remove(&run.id);
        }
        std::mem::swap(&mut watched, &mut now_watched);
    }
}

async fn read_one(
    service: &Service,
    client: &WandbClient,
    run: &Run,
    failing: &mut HashSet<Uuid>,
    interval: Duration,
) {
    let run_id = run.short_id();
    match service.read_metric_history(run, client).await {
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
