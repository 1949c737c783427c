//! What the reconciler keeps in memory about one run it looks after.

use std::collections::{BTreeMap, BTreeSet};

use tokio::task::AbortHandle;

use crate::launch::status::StageFiles;
use crate::model::{ProcessState, Run, Stage};
use crate::workflow::{PlanError, StagePlan};

/// Where a stage is in being stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopStep {
    Running,
    Termed,
    Killed,
}

pub struct Supervised {
    pub run: Run,
    pub stages: Vec<Stage>,
    pub plans: Vec<StagePlan>,
    pub files: Vec<StageFiles>,
    /// The readiness wait of a starting stage, cancelled when it is no longer needed.
    pub readiness: Vec<Option<AbortHandle>>,
    pub stop: Vec<StopStep>,
    /// Its progress reader and stall timer, once it runs.
    pub progress: Option<super::progress::ProgressWatch>,
    /// Each stage's log size when this daemon spawned it: where this attempt's lines begin
    /// (logs continue across attempts).
    pub log_starts: Vec<Option<u64>>,
}

impl Supervised {
    pub fn new(run: Run, stages: Vec<Stage>) -> Result<Supervised, PlanError> {
        let plans = plan_stages(&run)?;
        let files = run.spec.stages.iter().map(|s| StageFiles::new(&run.run_dir, &s.name)).collect();
        let n = stages.len();
        Ok(Supervised {
            run,
            stages,
            plans,
            files,
            readiness: vec![None; n],
            stop: vec![StopStep::Running; n],
            progress: None,
            log_starts: vec![None; n],
        })
    }

    pub fn resources(&self) -> BTreeSet<String> {
        self.run.spec.resources(&ports_of(&self.run.params.resolved))
    }

    pub fn cancel_readiness(&mut self, idx: usize) {
        if let Some(handle) = self.readiness.get_mut(idx).and_then(Option::take) {
            handle.abort();
        }
    }

    pub fn cancel_all_readiness(&mut self) {
        for idx in 0..self.readiness.len() {
            self.cancel_readiness(idx);
        }
    }

    /// The stage to stop next: the live one started last (env before trainer before api).
    pub fn next_to_stop(&self) -> Option<usize> {
        self.stages.iter().rposition(|s| matches!(s.record.state, ProcessState::Starting | ProcessState::Up))
    }
}

/// Expands every stage of `run` with the values resolved at submission and claim.
pub fn plan_stages(run: &Run) -> Result<Vec<StagePlan>, PlanError> {
    run.spec.stages.iter().map(|stage| stage.plan(&run.params.resolved, &run.run_dir)).collect()
}

/// The `port.NAME` values among resolved variables.
pub fn ports_of(resolved: &BTreeMap<String, String>) -> BTreeMap<String, u16> {
    resolved
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("port.")?.to_string(), v.parse().ok()?)))
        .collect()
}
