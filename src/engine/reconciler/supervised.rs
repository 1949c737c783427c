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

/// One stage of a supervised run, with everything the loop keeps about it.
pub struct SupervisedStage {
    /// Its row, as last committed.
    pub stage: Stage,
    pub plan: StagePlan,
    pub files: StageFiles,
    /// Its readiness wait while it starts, cancelled when no longer needed.
    pub readiness: Option<AbortHandle>,
    pub stop: StopStep,
    /// Its log's size when this daemon spawned it: where this attempt's lines begin (logs
    /// continue across attempts).
    pub log_start: Option<u64>,
    /// Transient failures to start it in a row (EAGAIN, EMFILE, ENOMEM): its next try waits
    /// longer.
    pub spawn_failures: u32,
    /// Not started again before this (a backoff after a transient failure to start).
    pub spawn_after: Option<std::time::Instant>,
}

pub struct Supervised {
    pub run: Run,
    pub stages: Vec<SupervisedStage>,
    /// Its progress reader and stall timer, once it runs.
    pub progress: Option<super::progress::ProgressWatch>,
    /// Its checkpoint source and follower, once looked up (it runs, or a stage ended).
    pub checkpoints: Option<super::checkpoints::CheckpointWatch>,
    /// Its time-limit timer, once its attempt is under way.
    pub time_limit: Option<super::time_limit::LimitTimer>,
    /// Its JSONL progress file as this daemon started the attempt's first stage: the lines
    /// after it are the attempt's (earlier attempts wrote the same file).
    pub progress_mark: Option<crate::logs::follow::FileMark>,
    /// Its metric worker, once it runs.
    pub metrics: Option<super::metrics::MetricWatch>,
    /// Its JSONL metrics file as this daemon started the attempt's first stage (as
    /// `progress_mark`).
    pub metrics_mark: Option<crate::logs::follow::FileMark>,
}

impl Supervised {
    pub fn new(run: Run, stages: Vec<Stage>) -> Result<Supervised, PlanError> {
        let plans = plan_stages(&run)?;
        let stages = stages
            .into_iter()
            .zip(plans)
            .map(|(stage, plan)| SupervisedStage {
                files: StageFiles::new(&run.run_dir, &stage.name),
                stage,
                plan,
                readiness: None,
                stop: StopStep::Running,
                log_start: None,
                spawn_failures: 0,
                spawn_after: None,
            })
            .collect();
        Ok(Supervised {
            run,
            stages,
            progress: None,
            checkpoints: None,
            time_limit: None,
            progress_mark: None,
            metrics: None,
            metrics_mark: None,
        })
    }

    /// What the run holds while supervised: its exclusive labels, ports and pool units (read
    /// back from its params, so a run re-attached after a restart holds the same).
    pub fn resources(&self) -> BTreeSet<String> {
        let resolved = &self.run.params.resolved;
        let mut held = self.run.spec.resources(&ports_of(resolved));
        held.extend(crate::model::pool::resources(&crate::model::pool::assigned(resolved)));
        held
    }

    pub fn cancel_readiness(&mut self, idx: usize) {
        if let Some(handle) = self.stages.get_mut(idx).and_then(|s| s.readiness.take()) {
            handle.abort();
        }
    }

    pub fn cancel_all_readiness(&mut self) {
        for idx in 0..self.stages.len() {
            self.cancel_readiness(idx);
        }
    }

    /// The stages' rows, as last committed.
    pub fn rows(&self) -> impl DoubleEndedIterator<Item = &Stage> + ExactSizeIterator {
        self.stages.iter().map(|s| &s.stage)
    }

    /// The stage to stop next: the live one started last (env before trainer before api).
    pub fn next_to_stop(&self) -> Option<usize> {
        self.rows().rposition(|s| matches!(s.record.state, ProcessState::Starting | ProcessState::Up))
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
