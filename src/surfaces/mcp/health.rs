//! `rl_health_check`: the doctor's report with the daemon and the queue.

use serde_json::json;

use super::RlTools;
use super::answers::{self, answer};
use crate::model::RunQuery;

impl RlTools {
    pub(super) async fn health_check(&self) -> String {
        let mut out = crate::doctor::checkup(&self.service).await.to_json();
        let running = answers::daemon_running(&self.service);
        let filter = RunQuery { state: Some(crate::model::RunState::Pending), limit: Some(100) };
        let queued = self.service.runs(&filter).await.map(|r| r.len()).unwrap_or(0);
        out["daemon_running"] = json!(running);
        out["queued_runs"] = json!(queued);
        out["active_runs"] = json!(answers::active_runs(&self.service).await);
        if !running {
            out["note"] = json!(answers::start_note(&self.service, crate::model::RunState::Pending, None));
        } else if queued > 0 {
            out["note"] = json!(format!("{queued} run(s) queued, waiting for a free slot."));
        }
        answer(out)
    }
}
