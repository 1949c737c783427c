//! What the reconciler keeps in memory about one run it looks after.

use std::collections::BTreeSet;

use tokio::task::AbortHandle;

pub use super::core::claim::ports_of;
use crate::launch::status::StageFiles;
use crate::model::{Run, Stage};
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
    /// Asked to checkpoint before its preemption (`preempt_signal`): stopped at its next
    /// checkpoint, or when the timer fires. In memory only: a restarted daemon decides again.
    pub preempt_ask: Option<super::preempt::Ask>,
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
            preempt_ask: None,
        })
    }

    /// What the run holds while supervised: its exclusive labels, ports and pool units (read
    /// back from its params, so a run re-attached after a restart holds the same).
    pub fn resources(&self) -> BTreeSet<String> {
        let mut held = self.run.spec.resources(&ports_of(&self.run.params.resolved));
        held.extend(crate::model::pool::resources(self.run.units()));
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
}

/// Expands every stage of `run` with the values resolved at submission and claim.
pub fn plan_stages(run: &Run) -> Result<Vec<StagePlan>, PlanError> {
    run.spec.stages.iter().map(|stage| stage.plan(&run.template_values(), &run.run_dir)).collect()
}
