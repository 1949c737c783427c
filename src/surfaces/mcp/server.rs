//! The tools' state (the service, the status rate limit's snapshots) and the stdio server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use serde_json::{Value, json};

use super::answers::{self, answer};
use crate::service::{Service, ServiceError};

/// How often an agent may get a fresh `rl_check_status` per run (the reference: 30 minutes);
/// inside the window it gets the last snapshot and when the next fresh one is allowed.
pub fn status_interval() -> Duration {
    std::env::var("LACHESIS_STATUS_INTERVAL")
        .ok()
        .and_then(|v| v.parse::<crate::workflow::Dur>().ok())
        .map_or(Duration::from_secs(1800), |d| d.0)
}

#[derive(Clone)]
pub struct RlTools {
    pub(super) service: Service,
    pub(super) interval: Duration,
    /// Last fresh status per run: when, and what it said.
    pub(super) snapshots: Arc<Mutex<HashMap<String, (Instant, Value)>>>,
}

impl RlTools {
    pub fn new(service: Service) -> RlTools {
        RlTools { service, interval: status_interval(), snapshots: Arc::default() }
    }

    /// The reference's answer for an id that names no run: the error and the runs still active.
    pub(super) async fn unknown_run(&self, err: &ServiceError) -> String {
        answer(json!({
            "error": answers::agent_error(&self.service, err),
            "active_runs": answers::active_runs(&self.service).await,
        }))
    }
}

/// Serves the tools on stdin/stdout until the client goes away. Logs go to stderr only.
pub async fn serve(service: Service) -> Result<(), Box<dyn std::error::Error>> {
    let running = RlTools::new(service).serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
