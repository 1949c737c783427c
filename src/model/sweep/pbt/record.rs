//! A PBT exploit as the store keeps it: decided with its loser's stop, applied with its
//! loser's requeue from the donor's checkpoint.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::Exploit;
use crate::model::sweep::{Parameter, Target, var_text};
use crate::model::{Millis, ResumePoint, RunParams};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExploitRecord {
    pub sweep: Uuid,
    /// The loser, and its run.
    pub k: u64,
    pub run: Uuid,
    /// The interval n and its boundary (a step of the metric).
    pub interval: i64,
    pub boundary: i64,
    pub donor: u64,
    pub donor_run: Uuid,
    /// The donor's checkpoint the loser continues from.
    pub step: i64,
    pub path: String,
    /// The loser's values before, and those it continues with.
    pub before: BTreeMap<String, Value>,
    pub values: BTreeMap<String, Value>,
    /// The latest readings compared.
    pub score: Option<f64>,
    pub donor_score: Option<f64>,
    /// The loser's attempt the exploit stopped; it continues as attempt + 1.
    pub attempt: i64,
    pub decided_at: Millis,
    /// When the loser was queued again from the donor's checkpoint; None until then.
    pub applied_at: Option<Millis>,
}

impl ExploitRecord {
    /// The record of `exploit`, decided now about the loser's run at `attempt`.
    pub fn of(sweep: Uuid, exploit: &Exploit, run: Uuid, donor_run: Uuid, attempt: i64, at: Millis) -> Self {
        ExploitRecord {
            sweep,
            k: exploit.k,
            run,
            interval: exploit.interval,
            boundary: exploit.boundary,
            donor: exploit.donor,
            donor_run,
            step: exploit.step,
            path: exploit.path.clone(),
            before: exploit.before.clone(),
            values: exploit.values.clone(),
            score: exploit.score.is_finite().then_some(exploit.score),
            donor_score: exploit.donor_score.is_finite().then_some(exploit.donor_score),
            attempt,
            decided_at: at,
            applied_at: None,
        }
    }

    /// `member 3 continues from member 1's checkpoint at step 40: lr 1e-05 → 1.2e-05`.
    pub fn describe(&self) -> String {
        format!(
            "member {} continues from member {}'s checkpoint at step {}: {}",
            self.k,
            self.donor,
            self.step,
            super::changes(&self.before, &self.values)
        )
    }

    /// The donor's checkpoint the loser's next attempt starts at.
    pub fn resume_point(&self) -> ResumePoint {
        ResumePoint { step: self.step, path: self.path.clone() }
    }

    /// The loser's params for its next attempt: `resumed` (its params with
    /// [`Self::resume_point`] as the point it starts at) with the explored values where its
    /// sweep's `parameters` put them, and no longer stopping for this exploit.
    pub fn continuation(&self, mut resumed: RunParams, parameters: &[Parameter]) -> RunParams {
        for param in parameters {
            let Some(value) = self.values.get(&param.path) else { continue };
            match &param.target {
                Target::Var(name) => {
                    // The stages expand the values resolved at submission: both change.
                    resumed.vars.insert(name.clone(), var_text(value));
                    resumed.resolved.insert(name.clone(), var_text(value));
                }
                Target::Set(key) => {
                    resumed.config.insert(key.clone(), value.clone());
                }
            }
        }
        resumed.exploit_interval = None;
        resumed
    }

    /// What the loser's next attempt starts from, for its event: "attempt 4 resumes from member
    /// 1's checkpoint at step 40 (PATH) with lr 1e-05 → 1.2e-05".
    pub fn continuation_note(&self) -> String {
        format!(
            "attempt {} resumes from member {}'s checkpoint at step {} ({}) with {}",
            self.attempt + 1,
            self.donor,
            self.step,
            self.path,
            super::changes(&self.before, &self.values)
        )
    }
}
