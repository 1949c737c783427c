//! Tests in the reconciler: claim queued tests, run one task per model (at most `concurrency` at
//! once, each under a shim, each killed with its process group at its timeout), then turn the
//! JSONL the environment wrote into results. Restart repair is the stages' own: status file,
//! re-attach, or lost — a test is never silently re-run.

use std::time::Duration;

use rustix::process::Signal;
use tokio::task::AbortHandle;
use tracing::{info, warn};
use uuid::Uuid;

use super::core::test_tasks::{self, TestEnd};
use super::recover::{Found, examine};
use super::{Msg, Owner, ProcessEnd, Reconciler, Result};
use crate::engine::store::StoreError;
use crate::inference::results::{ModelResult, stderr_tail, summarize};
use crate::inference::spec::{PROVIDER_KEY_VAR, log_path, secret_config_path, write_secret_config};
use crate::launch::process::signal_group;
use crate::launch::spawn::SpawnError;
use crate::launch::status::{StageFiles, Started};
use crate::model::{EnvKind, InferenceTest, TestState, TestTask, TestTrigger};
use crate::model::{NewEvent, ProcessState, ProcessTrigger, now_millis};

/// Tests run at once; each has its own per-model concurrency.
const MAX_TESTS: usize = 2;

pub struct SupervisedTest {
    pub test: InferenceTest,
    pub tasks: Vec<TestTask>,
    pub files: Vec<StageFiles>,
    pub timers: Vec<Option<AbortHandle>>,
}

impl SupervisedTest {
    fn new(test: InferenceTest, tasks: Vec<TestTask>) -> SupervisedTest {
        let files = tasks
            .iter()
            .map(|t| StageFiles::new(&test.test_dir, &crate::inference::spec::file_stem(&t.model)))
            .collect();
        let n = tasks.len();
        SupervisedTest { test, tasks, files, timers: vec![None; n] }
    }
}

impl Reconciler {
    /// Claims queued tests while fewer than `MAX_TESTS` run.
    pub(super) async fn claim_tests(&mut self) -> Result {
        let free = MAX_TESTS.saturating_sub(self.tests.len());
        if free == 0 {
            return Ok(());
        }
        let Some(lease) = self.node.lease.clone() else { return Ok(()) };
        for test in self.store.claim_tests(&lease, free as i64, &self.config.tests_dir).await? {
            info!(test = %crate::model::short_id(&test.id), "test claimed");
            let id = test.id;
            let tasks = self.store.test_tasks(id).await?;
            let stems: Vec<String> =
                tasks.iter().map(|t| crate::inference::spec::file_stem(&t.model)).collect();
            let problem = std::fs::create_dir_all(&test.test_dir)
                .and_then(|()| self.node.ledger.record_test(&test, lease.token, stems))
                .err()
                .map(|e| format!("cannot create {}: {e}", test.test_dir.display()));
            self.tests.insert(id, SupervisedTest::new(test, tasks));
            if let Some(problem) = problem {
                self.finish_test(id, TestTrigger::Fail, &problem, None).await?;
                continue;
            }
            self.drive_test(id).await?;
        }
        Ok(())
    }

    /// Adopts cancellations written by others.
    pub(super) async fn sync_tests(&mut self) -> Result {
        let ids: Vec<Uuid> = self.tests.keys().copied().collect();
        for id in ids {
            if let Some(test) = self.store.test(id).await?
                && let Some(sup) = self.tests.get_mut(&id)
                && test.version > sup.test.version
            {
                sup.test = test;
                self.drive_test(id).await?;
            }
        }
        Ok(())
    }

    /// Starts tasks while the test's concurrency allows; finishes the test once all have ended;
    /// kills what runs of a cancelled test.
    async fn drive_test(&mut self, id: Uuid) -> Result {
        let Some(sup) = self.tests.get_mut(&id) else { return Ok(()) };
        if sup.test.state == TestState::Running {
            // Again while a task ended at once (its key file couldn't be written) and left room.
            loop {
                let Some(sup) = self.tests.get(&id) else { return Ok(()) };
                let states: Vec<ProcessState> = sup.tasks.iter().map(|t| t.record.state).collect();
                let pending = test_tasks::to_start(sup.test.state, &states, sup.test.spec.concurrency);
                if pending.is_empty() {
                    break;
                }
                for idx in pending {
                    self.spawn_task(id, idx).await?;
                }
            }
        } else {
            for idx in 0..sup.tasks.len() {
                if let Some(process) =
                    sup.tasks[idx].record.process.as_ref().filter(|_| sup.tasks[idx].record.state.is_live())
                {
                    signal_group(process, Signal::KILL);
                }
            }
        }
        let Some(sup) = self.tests.get(&id) else { return Ok(()) };
        let states: Vec<ProcessState> = sup.tasks.iter().map(|t| t.record.state).collect();
        match test_tasks::end(sup.test.state, &states) {
            TestEnd::Going => {}
            TestEnd::Complete => return self.complete_test(id).await,
            TestEnd::LetGo => {
                // Also the key files of tasks lost while the daemon was down.
                for task in &sup.tasks {
                    let _ = std::fs::remove_file(secret_config_path(&sup.test.test_dir, &task.model));
                }
                self.tests.remove(&id);
                self.node.ledger.forget(&id);
            }
        }
        Ok(())
    }

    async fn spawn_task(&mut self, id: Uuid, idx: usize) -> Result {
        let Some(sup) = self.tests.get_mut(&id) else { return Ok(()) };
        let provider = &sup.test.spec.provider;
        let key = match &provider.api_key_env {
            Some(var) => match crate::environ::var(var) {
                Some(key) if !key.is_empty() => key,
                _ => {
                    let reason = format!("the daemon's environment lacks {var}");
                    return self.finish_test(id, TestTrigger::Fail, &reason, None).await;
                }
            },
            // A local endpoint without auth still wants a non-empty key.
            None => "x".to_string(),
        };
        let task = &mut sup.tasks[idx];
        task.record.apply(ProcessTrigger::Spawn)?;
        self.store.update_task(task, None).await?;
        let mut plan = sup.test.spec.task_plan(&task.model, &sup.test.test_dir);
        // The key reaches an Atropos process through a 0600 file, vf-eval through the variable
        // its `--api-key-var` names, and the shim (to mask it in the log) through its
        // environment: never through an argv, which every user can read.
        let prepared = match sup.test.spec.env_kind {
            EnvKind::Atropos => {
                let secret_file = secret_config_path(&sup.test.test_dir, &task.model);
                write_secret_config(&secret_file, &key).map_err(|err| (secret_file, err))
            }
            // vf-eval saves under its working directory.
            EnvKind::Verifiers => std::fs::create_dir_all(&plan.cwd).map_err(|err| (plan.cwd.clone(), err)),
        };
        if let Err((path, err)) = prepared {
            let reason = format!("cannot write {}: {err}", path.display());
            let what = task.record.exited(None, Some(&reason), now_millis())?;
            let model = task.model.clone();
            self.store.update_task(task, Some(&NewEvent::stage(&model, what))).await?;
            return Ok(());
        }
        plan.environ.insert(PROVIDER_KEY_VAR.to_string(), key);
        let files = sup.files[idx].clone();
        self.launch(Owner::Task { test: id, idx }, plan, files);
        Ok(())
    }

    pub(super) async fn on_task_spawned(
        &mut self,
        id: Uuid,
        idx: usize,
        result: std::result::Result<Started, SpawnError>,
    ) -> Result {
        let Some(sup) = self.tests.get_mut(&id) else { return Ok(()) };
        let task = &mut sup.tasks[idx];
        let model = task.model.clone();
        match result {
            Ok(started) => {
                // A task waits for nothing: up as soon as it started.
                task.record.started(started.started_at, started.shim, started.process)?;
                task.record.apply(ProcessTrigger::Ready)?;
                let pid = task.record.process.as_ref().map_or(0, |p| p.pid);
                // The command as it may be shown: it holds no key (that is in the secret file).
                let argv = sup.test.spec.task_plan(&model, &sup.test.test_dir).argv;
                let event = NewEvent::stage(&model, format!("started (pid {pid}): {}", argv.join(" ")));
                self.store.update_task(task, Some(&event)).await?;
                let timeout = sup.test.spec.timeout.0;
                self.arm_timeout(id, idx, timeout);
            }
            Err(err) => {
                let _ = std::fs::remove_file(secret_config_path(&sup.test.test_dir, &model));
                let what = task.record.exited(None, Some(&err.to_string()), now_millis())?;
                self.store.update_task(task, Some(&NewEvent::stage(&model, what))).await?;
            }
        }
        self.drive_test(id).await
    }

    fn arm_timeout(&mut self, id: Uuid, idx: usize, after: Duration) {
        let tx = self.tx.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = tx.send(Msg::TaskTimedOut { test: id, idx });
        });
        if let Some(sup) = self.tests.get_mut(&id) {
            sup.timers[idx] = Some(timer.abort_handle());
        }
    }

    pub(super) async fn on_task_timed_out(&mut self, id: Uuid, idx: usize) -> Result {
        let Some(sup) = self.tests.get_mut(&id) else { return Ok(()) };
        let task = &mut sup.tasks[idx];
        if !task.record.state.is_live() {
            return Ok(());
        }
        task.timed_out = true;
        // The environment waits forever on a dead inference server: kill, don't ask.
        let killed = task.record.process.as_ref().is_some_and(|p| signal_group(p, Signal::KILL));
        let message = format!(
            "timed out after {}: {}",
            sup.test.spec.timeout,
            if killed { "killed its process group" } else { "already exiting" }
        );
        self.store.update_task(task, Some(&NewEvent::stage(&task.model.clone(), message))).await?;
        Ok(())
    }

    pub(super) async fn on_task_ended(&mut self, id: Uuid, idx: usize, end: ProcessEnd) -> Result {
        let Some(sup) = self.tests.get_mut(&id) else { return Ok(()) };
        if let Some(timer) = sup.timers[idx].take() {
            timer.abort();
        }
        let task = &mut sup.tasks[idx];
        // The key's file lives no longer than the process that reads it.
        let _ = std::fs::remove_file(secret_config_path(&sup.test.test_dir, &task.model));
        if !task.record.state.is_live() {
            return Ok(());
        }
        let what = end.record_on(&mut task.record)?;
        let model = task.model.clone();
        self.store.update_task(task, Some(&NewEvent::stage(&model, what))).await?;
        self.drive_test(id).await
    }

    /// Every task has ended: read each model's results, summarise, and end the test.
    async fn complete_test(&mut self, id: Uuid) -> Result {
        let Some(sup) = self.tests.get(&id) else { return Ok(()) };
        let dir = &sup.test.test_dir;
        let models: Vec<ModelResult> = sup
            .tasks
            .iter()
            .map(|task| {
                let mut result = sup.test.spec.read_result(dir, &task.model);
                result.log_path = Some(log_path(dir, &task.model).display().to_string());
                let failure = match (task.timed_out, task.record.exit, task.record.state) {
                    (true, _, _) => Some(format!("timed out after {} and was killed", sup.test.spec.timeout)),
                    (false, Some(exit), _) if !exit.success() => Some(format!("process {exit}")),
                    (false, None, ProcessState::Lost) => {
                        Some("process lost while the daemon was down".into())
                    }
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
                result.exit = task.record.exit.map(|e| e.to_string());
                result
            })
            .collect();
        let summary = summarize(&models);
        let mut results = serde_json::json!({ "models": models, "summary": summary });
        let (mut trigger, mut reason) = if summary.models_succeeded > 0 {
            let produced =
                format!("{} of {} models produced results", summary.models_succeeded, summary.models_tested);
            (TestTrigger::Succeed, produced)
        } else {
            (TestTrigger::Fail, "no model produced results".to_string())
        };
        let test = sup.test.clone();
        if trigger == TestTrigger::Succeed
            && let Some((why, found)) = self.check_regression(&test, &results).await?
        {
            (trigger, reason) = (TestTrigger::Regress, why);
            results["regressions"] = found;
        }
        self.finish_test(id, trigger, &reason, Some(&results)).await
    }

    async fn finish_test(
        &mut self,
        id: Uuid,
        trigger: TestTrigger,
        reason: &str,
        results: Option<&serde_json::Value>,
    ) -> Result {
        let Some(sup) = self.tests.get_mut(&id) else { return Ok(()) };
        match self.store.transition_test(&sup.test, trigger, Some(reason), results).await {
            Ok(test) => {
                info!(test = %crate::model::short_id(&test.id), state = %test.state, reason, "test ended");
                sup.test = test;
                self.outbox_news = true;
            }
            Err(StoreError::TestConflict { .. }) => {
                if let Some(test) = self.store.test(id).await? {
                    sup.test = test;
                }
            }
            Err(err) => return Err(err),
        }
        // Boxed: finishing drives the test, which may finish it (a cycle the compiler must size).
        Box::pin(self.drive_test(id)).await
    }

    /// Restart repair for tests that were running when the daemon stopped.
    pub(super) async fn recover_tests(&mut self) -> Result {
        let token = self.store_token();
        for test in self.store.tests_in(TestState::Running, i64::MAX).await? {
            if test.fence != token {
                continue; // another node's
            }
            let id = test.id;
            let tasks = self.store.test_tasks(id).await?;
            self.tests.insert(id, SupervisedTest::new(test, tasks));
            let count = self.tests[&id].tasks.len();
            for idx in 0..count {
                let Some(sup) = self.tests.get_mut(&id) else { break };
                let task = &mut sup.tasks[idx];
                if !task.record.state.is_live() {
                    continue;
                }
                match examine(
                    &sup.files[idx],
                    &mut task.record.shim,
                    &mut task.record.process,
                    &mut task.record.started_at,
                    0,
                )
                .0
                {
                    Found::Ended(end) => self.on_task_ended(id, idx, end).await?,
                    // Given no more looks, a task without a trace has ended.
                    Found::LookAgain(_) => {}
                    Found::Alive(watch, _) => {
                        task.record.apply(ProcessTrigger::Reattach)?;
                        if task.record.state == ProcessState::Starting {
                            task.record.apply(ProcessTrigger::Ready)?;
                        }
                        let model = task.model.clone();
                        let event = NewEvent::stage(&model, "re-attached after a daemon restart");
                        self.store.update_task(task, Some(&event)).await?;
                        let elapsed = Duration::from_millis(
                            now_millis().saturating_sub(task.record.started_at.unwrap_or(0)).max(0) as u64,
                        );
                        let remaining = sup.test.spec.timeout.0.saturating_sub(elapsed);
                        let files = sup.files[idx].clone();
                        self.watch_reattached(Owner::Task { test: id, idx }, watch, files);
                        self.arm_timeout(id, idx, remaining);
                    }
                }
            }
            if let Err(err) = self.drive_test(id).await {
                warn!("cannot resume test {id}: {err}");
            }
        }
        Ok(())
    }
}
