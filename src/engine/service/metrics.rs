//! Training metrics from W&B: read fresh when W&B answers, stored as the run's snapshot, and
//! answered from that snapshot (saying how old it is) when it doesn't.

use std::time::Duration;

use serde::Serialize;

use serde_json::{Map, Value};

use crate::model::{Run, now_millis};
use crate::wandb::{Snapshot, WandbClient, age_text, snapshot_from};

use super::Service;

/// How long a status or results call waits for W&B before answering from the snapshot.
const WANDB_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, Serialize)]
pub struct RunMetrics {
    pub wandb_project: String,
    pub wandb_run_name: String,
    pub snapshot: Option<Snapshot>,
    /// "fresh", or how old the stored snapshot is ("12m old").
    pub age: Option<String>,
    pub wandb_error: Option<String>,
}

/// The W&B run a training run logs to: `{env}-{short id}`, as the trainer is told.
pub fn wandb_run_name(env_name: Option<&str>, id: &uuid::Uuid) -> String {
    format!("{}-{}", env_name.unwrap_or("run"), crate::model::short_id(id))
}

/// The W&B project a run logs to: its `wandb_project` config field, else the `WANDB_PROJECT`
/// its workflow gives a stage (a W&B program sweep's project), else `atropos-tinker`.
pub fn wandb_project(run: &Run) -> String {
    let configured = run.params.config.get("wandb_project").and_then(|v| v.as_str());
    let staged = || run.spec.stages.iter().find_map(|s| s.environ.get("WANDB_PROJECT").map(String::as_str));
    configured.or_else(staged).unwrap_or("atropos-tinker").to_string()
}

/// How many rows of history `run_history` samples (as the reference does).
const HISTORY_SAMPLES: u32 = 10;

impl Service {
    /// Up to ten sampled rows of the run's W&B history, every logged key, oldest first; `Ok(None)`
    /// when W&B is not configured or has no such run yet.
    pub async fn run_history(
        &self,
        run: &Run,
    ) -> std::result::Result<Option<Vec<Map<String, Value>>>, String> {
        let (project, name) = (wandb_project(run), wandb_run_name(run.env_name.as_deref(), &run.id));
        let Some(client) = WandbClient::from_env(WANDB_TIMEOUT).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let Some(found) = client.find_run(&project, &name).await.map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let keys: Vec<&str> = found.history_keys.iter().map(String::as_str).collect();
        client.history(&project, &found.id, &keys, HISTORY_SAMPLES).await.map(Some).map_err(|e| e.to_string())
    }

    /// The run's training metrics: fresh from W&B when it answers, else the last snapshot.
    pub async fn run_metrics(&self, run: &Run) -> RunMetrics {
        let (project, name) = wandb_names(run);
        let now = now_millis();
        let fetched = match WandbClient::from_env(WANDB_TIMEOUT) {
            Ok(Some(client)) => match client.find_run(&project, &name).await {
                Ok(Some(found)) => Ok(Some(snapshot_from(&found, now))),
                Ok(None) => Err(format!("W&B has no run named {name} in {project} yet")),
                Err(err) => Err(err.to_string()),
            },
            Ok(None) => Ok(None),
            Err(err) => Err(err.to_string()),
        };
        match fetched {
            Ok(Some(snapshot)) => {
                if let Ok(value) = serde_json::to_value(&snapshot) {
                    let _ = self.store.put_snapshot(run.id, now, &value).await;
                }
                RunMetrics {
                    wandb_project: project,
                    wandb_run_name: name,
                    snapshot: Some(snapshot),
                    age: Some("fresh".into()),
                    wandb_error: None,
                }
            }
            other => {
                let stored = self.store.snapshot(run.id).await.ok().flatten();
                let snapshot =
                    stored.as_ref().and_then(|(_, v)| serde_json::from_value::<Snapshot>(v.clone()).ok());
                let age = stored.map(|(at, _)| age_text(at, now));
                let wandb_error = match other {
                    Err(err) => Some(err),
                    _ => Some("WANDB_API_KEY is not set: no metrics".into()),
                };
                RunMetrics { wandb_project: project, wandb_run_name: name, snapshot, age, wandb_error }
            }
        }
    }
}

/// The W&B project a run logs to and the display name it logs under: (project, name).
pub(super) fn wandb_names(run: &Run) -> (String, String) {
    (wandb_project(run), wandb_run_name(run.env_name.as_deref(), &run.id))
}
