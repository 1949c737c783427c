//! Jobs in the reconciler: claim queued jobs, run one task per model (at most `concurrency` at
//! once, each under a shim, each killed with its process group at its timeout), then turn the
//! JSONL the environment wrote into results. Restart repair is the stages' own: status file,
//! re-attach, or lost — a job is never silently re-run.

use std::time::Duration;

use rustix::process::Signal;
use tokio::task::AbortHandle;
use tracing::{info, warn};
use uuid::Uuid;

use super::recover::{Found, examine};
use super::{Msg, Owner, Reconciler, Result, StageEnd};
use crate::jobs::inference::{log_path, output_path};
use crate::jobs::results::{ModelResult, read_model_result, stderr_tail, summarize};
use crate::jobs::{Job, JobEvent, JobState, JobTask};
use crate::launch::process::signal_group;
use crate::launch::spawn::SpawnError;
use crate::launch::status::{StageFiles, Started};
use crate::model::{NewEvent, StageState, now_millis};
use crate::store::StoreError;

/// Jobs run at once; each has its own per-model concurrency.
const MAX_JOBS: usize = 2;

pub struct SupervisedJob {
    pub job: Job,
    pub tasks: Vec<JobTask>,
    pub files: Vec<StageFiles>,
    pub timers: Vec<Option<AbortHandle>>,
}

impl SupervisedJob {
    fn new(job: Job, tasks: Vec<JobTask>) -> SupervisedJob {
        let files = tasks
            .iter()
            .map(|t| StageFiles::new(&job.job_dir, &crate::jobs::inference::file_stem(&t.model)))
            .collect();
        let n = tasks.len();
        SupervisedJob { job, tasks, files, timers: vec![None; n] }
    }
}

impl Reconciler {
    /// Claims queued jobs while fewer than `MAX_JOBS` run.
    pub(super) async fn schedule_jobs(&mut self) -> Result {
        let free = MAX_JOBS.saturating_sub(self.jobs.len());
        if free == 0 {
            return Ok(());
        }
        let Some(lease) = self.node.lease.clone() else { return Ok(()) };
        for job in self.store.claim_jobs(&lease, free as i64, &self.config.jobs_dir).await? {
            info!(job = %crate::model::short_id(&job.id), "job claimed");
            let id = job.id;
            let tasks = self.store.job_tasks(id).await?;
            let stems: Vec<String> =
                tasks.iter().map(|t| crate::jobs::inference::file_stem(&t.model)).collect();
            let problem = std::fs::create_dir_all(&job.job_dir)
                .and_then(|()| self.node.ledger.record_job(&job, lease.token, stems))
                .err()
                .map(|e| format!("cannot create {}: {e}", job.job_dir.display()));
            self.jobs.insert(id, SupervisedJob::new(job, tasks));
            if let Some(problem) = problem {
                self.finish_job(id, JobEvent::Fail, &problem, None).await?;
                continue;
            }
            self.drive_job(id).await?;
        }
        Ok(())
    }

    /// Adopts cancellations written by others.
    pub(super) async fn sync_jobs(&mut self) -> Result {
        let ids: Vec<Uuid> = self.jobs.keys().copied().collect();
        for id in ids {
            if let Some(job) = self.store.job(id).await?
                && let Some(sup) = self.jobs.get_mut(&id)
                && job.version > sup.job.version
            {
                sup.job = job;
                self.drive_job(id).await?;
            }
        }
        Ok(())
    }

    /// Starts tasks while the job's concurrency allows; finishes the job once all have ended;
    /// kills what runs of a cancelled job.
    async fn drive_job(&mut self, id: Uuid) -> Result {
        let Some(sup) = self.jobs.get_mut(&id) else { return Ok(()) };
        if sup.job.state == JobState::Running {
            let live = sup.tasks.iter().filter(|t| t.state.is_live()).count();
            let room = sup.job.spec.concurrency.max(1).saturating_sub(live);
            let pending: Vec<usize> = sup
                .tasks
                .iter()
                .enumerate()
                .filter(|(_, t)| t.state == StageState::Pending)
                .map(|(i, _)| i)
                .take(room)
                .collect();
            for idx in pending {
                self.spawn_task(id, idx).await?;
            }
        } else {
            for idx in 0..sup.tasks.len() {
                if let Some(process) =
                    sup.tasks[idx].process.as_ref().filter(|_| sup.tasks[idx].state.is_live())
                {
                    signal_group(process, Signal::KILL);
                }
            }
        }
        let Some(sup) = self.jobs.get(&id) else { return Ok(()) };
        if sup.tasks.iter().all(|t| !t.state.is_live() && t.state != StageState::Pending)
            || sup.job.state.is_terminal()
        {
            if sup.job.state == JobState::Running {
                return self.complete_job(id).await;
            }
            if !sup.tasks.iter().any(|t| t.state.is_live()) {
                self.jobs.remove(&id);
                self.node.ledger.forget(&id);
            }
        }
        Ok(())
    }

    async fn spawn_task(&mut self, id: Uuid, idx: usize) -> Result {
        let Some(sup) = self.jobs.get_mut(&id) else { return Ok(()) };
        let provider = &sup.job.spec.provider;
        let key = match &provider.api_key_env {
            Some(var) => match std::env::var(var) {
                Ok(key) if !key.is_empty() => key,
                _ => {
                    let reason = format!("the daemon's environment lacks {var}");
                    return self.finish_job(id, JobEvent::Fail, &reason, None).await;
                }
            },
            // A local endpoint without auth still wants a non-empty key.
            None => "x".to_string(),
        };
        let task = &mut sup.tasks[idx];
        task.state = StageState::Spawning;
        self.store.update_task(task, None).await?;
        let plan = sup.job.spec.task_plan(&task.model, &sup.job.job_dir, &key);
        let files = sup.files[idx].clone();
        self.launch(Owner::Task { job: id, idx }, plan, files);
        Ok(())
    }

    pub(super) async fn on_task_spawned(
        &mut self,
        id: Uuid,
        idx: usize,
        result: std::result::Result<Started, SpawnError>,
    ) -> Result {
        let Some(sup) = self.jobs.get_mut(&id) else { return Ok(()) };
        let task = &mut sup.tasks[idx];
        let model = task.model.clone();
        match result {
            Ok(started) => {
                task.state = StageState::Up;
                task.started_at = Some(started.started_at);
                task.shim = Some(started.shim);
                task.process = started.process;
                let pid = task.process.as_ref().map_or(0, |p| p.pid);
                // The command as it may be shown: the provider's key stands as ***.
                let argv = sup.job.spec.task_plan(&model, &sup.job.job_dir, "***").argv;
                let event = NewEvent::stage(&model, format!("started (pid {pid}): {}", argv.join(" ")));
                self.store.update_task(task, Some(&event)).await?;
                let timeout = sup.job.spec.timeout.0;
                self.arm_timeout(id, idx, timeout);
            }
            Err(err) => {
                task.state = StageState::Exited;
                task.ended_at = Some(now_millis());
                self.store
                    .update_task(task, Some(&NewEvent::stage(&model, format!("failed to start: {err}"))))
                    .await?;
            }
        }
        self.drive_job(id).await
    }

    fn arm_timeout(&mut self, id: Uuid, idx: usize, after: Duration) {
        let tx = self.tx.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = tx.send(Msg::TaskTimedOut { job: id, idx });
        });
        if let Some(sup) = self.jobs.get_mut(&id) {
            sup.timers[idx] = Some(timer.abort_handle());
        }
    }

    pub(super) async fn on_task_timed_out(&mut self, id: Uuid, idx: usize) -> Result {
        let Some(sup) = self.jobs.get_mut(&id) else { return Ok(()) };
        let task = &mut sup.tasks[idx];
        if !task.state.is_live() {
            return Ok(());
        }
        task.timed_out = true;
        // The environment waits forever on a dead inference server: kill, don't ask.
        let killed = task.process.as_ref().is_some_and(|p| signal_group(p, Signal::KILL));
        let message = format!(
            "timed out after {}: {}",
            sup.job.spec.timeout,
            if killed { "killed its process group" } else { "already exiting" }
        );
        self.store.update_task(task, Some(&NewEvent::stage(&task.model.clone(), message))).await?;
        Ok(())
    }

    pub(super) async fn on_task_ended(&mut self, id: Uuid, idx: usize, end: StageEnd) -> Result {
        let Some(sup) = self.jobs.get_mut(&id) else { return Ok(()) };
        if let Some(timer) = sup.timers[idx].take() {
            timer.abort();
        }
        let task = &mut sup.tasks[idx];
        if !task.state.is_live() {
            return Ok(());
        }
        let what = match &end {
            StageEnd::Finished(finished) => {
                task.state = StageState::Exited;
                task.exit = finished.exit;
                task.ended_at = Some(finished.ended_at);
                match (finished.exit, &finished.spawn_error) {
                    (Some(exit), _) => format!("exited with {exit}"),
                    (None, Some(error)) => format!("failed to start: {error}"),
                    (None, None) => "exited".into(),
                }
            }
            StageEnd::Vanished(why) => {
                task.state = StageState::Lost;
                task.ended_at = Some(now_millis());
                format!("lost: {why}")
            }
        };
        let model = task.model.clone();
        self.store.update_task(task, Some(&NewEvent::stage(&model, what))).await?;
        self.drive_job(id).await
    }

    /// Every task has ended: read each model's JSONL, summarise, and end the job.
    async fn complete_job(&mut self, id: Uuid) -> Result {
        let Some(sup) = self.jobs.get(&id) else { return Ok(()) };
        let dir = &sup.job.job_dir;
        let models: Vec<ModelResult> = sup
            .tasks
            .iter()
            .map(|task| {
                let mut result = read_model_result(&task.model, &output_path(dir, &task.model));
                result.log_path = Some(log_path(dir, &task.model).display().to_string());
                let failure = match (task.timed_out, task.exit, task.state) {
                    (true, _, _) => Some(format!("timed out after {} and was killed", sup.job.spec.timeout)),
                    (false, Some(exit), _) if !exit.success() => Some(format!("process {exit}")),
                    (false, None, StageState::Lost) => Some("process lost while the daemon was down".into()),
                    (false, None, _) => Some("process did not start".into()),
                    _ => None,
                };
                if let Some(failure) = failure {
                    let tail = stderr_tail(&log_path(dir, &task.model), 5);
                    result.error = Some(if tail.is_empty() {
                        failure
                    } else {
                        format!("{failure}; last lines:\n{tail}")
                    });
                }
                result.exit = task.exit.map(|e| e.to_string());
                result
            })
            .collect();
        let summary = summarize(&models);
        let mut results = serde_json::json!({ "models": models, "summary": summary });
        let (mut event, mut reason) = if summary.models_succeeded > 0 {
            let produced =
                format!("{} of {} models produced results", summary.models_succeeded, summary.models_tested);
            (JobEvent::Succeed, produced)
        } else {
            (JobEvent::Fail, "no model produced results".to_string())
        };
        let job = sup.job.clone();
        if event == JobEvent::Succeed
            && let Some((why, found)) = self.check_regression(&job, &results).await?
        {
            (event, reason) = (JobEvent::Regress, why);
            results["regressions"] = found;
        }
        self.finish_job(id, event, &reason, Some(&results)).await
    }

    async fn finish_job(
        &mut self,
        id: Uuid,
        event: JobEvent,
        reason: &str,
        results: Option<&serde_json::Value>,
    ) -> Result {
        let Some(sup) = self.jobs.get_mut(&id) else { return Ok(()) };
        match self.store.transition_job(&sup.job, event, Some(reason), results).await {
            Ok(job) => {
                info!(job = %crate::model::short_id(&job.id), state = %job.state, reason, "job ended");
                sup.job = job.clone();
                self.notify_job(&job).await;
            }
            Err(StoreError::JobConflict { .. }) => {
                if let Some(job) = self.store.job(id).await? {
                    sup.job = job;
                }
            }
            Err(err) => return Err(err),
        }
        // Boxed: finishing drives the job, which may finish it (a cycle the compiler must size).
        Box::pin(self.drive_job(id)).await
    }

    /// Restart repair for jobs that were running when the daemon stopped.
    pub(super) async fn recover_jobs(&mut self) -> Result {
        let token = self.store_token();
        for job in self.store.jobs_in(JobState::Running, i64::MAX).await? {
            if job.fence != token {
                continue; // another node's
            }
            let id = job.id;
            let tasks = self.store.job_tasks(id).await?;
            self.jobs.insert(id, SupervisedJob::new(job, tasks));
            let count = self.jobs[&id].tasks.len();
            for idx in 0..count {
                let Some(sup) = self.jobs.get_mut(&id) else { break };
                let task = &mut sup.tasks[idx];
                if !task.state.is_live() {
                    continue;
                }
                match examine(&sup.files[idx], &mut task.shim, &mut task.process, &mut task.started_at) {
                    Found::Ended(end) => self.on_task_ended(id, idx, end).await?,
                    Found::Alive(watch) => {
                        task.state = StageState::Up;
                        let model = task.model.clone();
                        let event = NewEvent::stage(&model, "re-attached after a daemon restart");
                        self.store.update_task(task, Some(&event)).await?;
                        let elapsed = Duration::from_millis(
                            now_millis().saturating_sub(task.started_at.unwrap_or(0)).max(0) as u64,
                        );
                        let remaining = sup.job.spec.timeout.0.saturating_sub(elapsed);
                        let files = sup.files[idx].clone();
                        self.watch_reattached(Owner::Task { job: id, idx }, watch, files);
                        self.arm_timeout(id, idx, remaining);
                    }
                }
            }
            if let Err(err) = self.drive_job(id).await {
                warn!("cannot resume job {id}: {err}");
            }
        }
        Ok(())
    }
}
