//! Stages of `launcher: slurm` workflows: submitted with sbatch, tracked by job id (recorded
//! before anything else happens to the stage), watched by polling scontrol/sacct, stopped with
//! scancel, and re-attached by job id after a daemon restart. Slurm, not a shim, outlives the
//! daemon here; the job id is what the store keeps.

use std::time::Duration;

use tracing::warn;
use uuid::Uuid;

use super::core::slurm_jobs::{self, Answer, Step};
use super::{Msg, Owner, ProcessEnd, Reconciler, Result};
use crate::launch::slurm::{JobState, Slurm, SlurmJobId, SlurmLog};
use crate::launch::status::Finished;
use crate::model::{NewEvent, ProcessState, ProcessTrigger, RunState, now_millis};

/// How often a Slurm job is looked at: exit detection is this coarse for Slurm stages.
const POLL: Duration = Duration::from_millis(250);

impl Reconciler {
    /// Submits stage `idx` of run `id`; its job id, its start and its end come back as messages.
    pub(super) fn submit_slurm(&self, id: Uuid, idx: usize) {
        let Some(sup) = self.runs.get(&id) else { return };
        let plan = sup.stages[idx].plan.clone();
        let options = sup.run.spec.slurm.clone().unwrap_or_default();
        let job_name = format!("lachesis-{}-{}", sup.run.short_id(), plan.name);
        // Output goes through `lachesis mask` only when there is something to mask.
        let mask = (!crate::secrets::secrets_for(&plan.argv).is_empty()).then(|| self.config.exe.clone());
        let log = SlurmLog::new(plan.log_path.clone(), plan.log_limits.over(self.config.log_rotation));
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let slurm = Slurm::default();
            match slurm.submit(&plan, &options, &job_name, mask.as_deref()).await {
                Ok(job) => {
                    let _ = tx.send(Msg::Submitted { run: id, idx, result: Ok(job.0) });
                    watch(slurm, id, idx, job, true, log, tx).await;
                }
                Err(err) => {
                    let _ = tx.send(Msg::Submitted { run: id, idx, result: Err(err.to_string()) });
                }
            }
        });
    }

    pub(super) async fn on_submitted(
        &mut self,
        id: Uuid,
        idx: usize,
        result: std::result::Result<u64, String>,
    ) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        let argv = crate::secrets::redact_argv(&sup.stages[idx].plan.argv);
        let stage = &mut sup.stages[idx].stage;
        let name = stage.name.clone();
        match result {
            Ok(job) => {
                stage.record.apply(ProcessTrigger::Launch)?;
                stage.slurm_job = Some(job);
                let event = NewEvent::stage(&name, format!("submitted as Slurm job {job}: {argv}"));
                self.store.update_stage(stage, Some(&event)).await?;
            }
            Err(err) => {
                stage.record.exited(None, Some(err.as_str()), now_millis())?;
                let event = NewEvent::stage(&name, format!("failed to submit: {err}"));
                self.store.update_stage(stage, Some(&event)).await?;
                self.fail(id, &format!("stage '{name}' failed to start: {err}")).await?;
            }
        }
        self.drive(id).await
    }

    /// The job left the queue: from now on its start delay and probe count.
    pub(super) async fn on_slurm_running(&mut self, id: Uuid, idx: usize) -> Result {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(()) };
        let stage = &mut sup.stages[idx].stage;
        if stage.record.state != ProcessState::Starting || stage.record.started_at.is_some() {
            return Ok(());
        }
        stage.record.started_at = Some(now_millis());
        let job = stage.slurm_job.unwrap_or_default();
        let event = NewEvent::stage(&stage.name, format!("Slurm job {job} is running"));
        self.store.update_stage(stage, Some(&event)).await?;
        if sup.run.state == RunState::Starting {
            let plan = &sup.stages[idx].plan;
            if plan.up_at_once() {
                let how = plan.up_at_once_how();
                return self.on_ready(id, idx, how.into()).await;
            }
            self.start_readiness(id, idx, Duration::ZERO);
        }
        Ok(())
    }

    /// After a restart: watch the recorded job again. True if the stage had a job to watch.
    pub(super) async fn reattach_slurm(&mut self, id: Uuid, idx: usize) -> Result<bool> {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(false) };
        let plan = &sup.stages[idx].plan;
        let log = SlurmLog::new(plan.log_path.clone(), plan.log_limits.over(self.config.log_rotation));
        let stage = &mut sup.stages[idx].stage;
        let Some(job) = stage.slurm_job.filter(|_| stage.record.state.is_live()) else { return Ok(false) };
        let event =
            NewEvent::stage(&stage.name, format!("re-attached to Slurm job {job} after a daemon restart"));
        self.store.update_stage(stage, Some(&event)).await?;
        let waiting_to_run =
            stage.record.state == ProcessState::Starting && stage.record.started_at.is_none();
        if stage.record.state == ProcessState::Starting
            && !waiting_to_run
            && sup.run.state == RunState::Starting
        {
            let since = stage.record.started_at.unwrap_or_else(now_millis);
            let elapsed = Duration::from_millis(now_millis().saturating_sub(since).max(0) as u64);
            self.start_readiness(id, idx, elapsed);
        }
        let tx = self.tx.clone();
        tokio::spawn(watch(Slurm::default(), id, idx, SlurmJobId(job), waiting_to_run, log, tx));
        Ok(true)
    }
}

/// scancel: SIGTERM to the job's main process (the stage); Slurm sends SIGKILL to what remains
/// after its KillWait. Fire and forget: the watcher reports the end.
pub(super) fn cancel(job: u64) {
    tokio::spawn(async move {
        if let Err(err) = Slurm::default().cancel(SlurmJobId(job), None).await {
            warn!(job, "scancel failed: {err}");
        }
    });
}

/// Polls the job until it ends, reporting when it starts running (if asked) and how it ended,
/// and keeps its log within the stage's rotation meanwhile (Slurm writes it, not a shim).
async fn watch(
    slurm: Slurm,
    run: Uuid,
    idx: usize,
    job: SlurmJobId,
    report_running: bool,
    mut log: SlurmLog,
    tx: tokio::sync::mpsc::UnboundedSender<Msg>,
) {
    let owner = Owner::Stage { run, idx };
    let mut poll = slurm_jobs::Poll { failures: 0, report_running };
    let end = loop {
        let answer = match slurm.query(job).await {
            Ok(JobState::Pending) => Answer::Pending,
            Ok(JobState::Running) => Answer::Running,
            Ok(JobState::Ended { exit, .. }) => Answer::Ended(exit),
            Ok(JobState::Vanished(why)) => Answer::Vanished(why),
            Err(err) => Answer::Unanswered(err.to_string()),
        };
        match poll.step(job.0, answer) {
            Step::Wait => {}
            Step::ReportRunning => {
                let _ = tx.send(Msg::SlurmRunning { run, idx });
            }
            Step::Retry { error } => warn!(%job, "cannot query Slurm (will retry): {error}"),
            Step::Exited(exit) => {
                let ended_at = now_millis();
                break ProcessEnd::Finished(Finished { exit: Some(exit), spawn_error: None, ended_at });
            }
            Step::Lost(why) => break ProcessEnd::Vanished(why),
        }
        log.keep_bounded(false).await;
        tokio::time::sleep(POLL).await;
    };
    log.keep_bounded(true).await;
    let _ = tx.send(Msg::Ended { owner, end });
}
