//! The morning report: every run and inference test that ended in a window (the last 12 hours
//! by default) or is still going, in one screen, with counts by outcome and what still waits.
//! Rows come from indexed reads, at most [`REPORT_ROWS`] of each kind (the rest is counted, not
//! read), each run with its last recorded step, last checkpoint and last metric row in the same
//! read; what only some rows need (a retried run's first start, a failed run's stages, weights
//! older than the last checkpoint) from a set query over those runs, never one read per row; a
//! failed run's last log lines (the stage that decided it) from bounded reads through
//! `crate::logs`, all of them in one trip off the daemon's thread. Then the sweeps active in
//! the window, with their members by outcome, best member and what early termination saved
//! (`sweeps/report.rs`: two reads however many members).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

use super::logs::off_thread;
use super::{Result, Service};
use crate::engine::store::ListedRun;

use super::headline::HeadlineOf;
use crate::inference::regression::Regression;
use crate::model::{
    Checkpoint, CountedState, HeadlineValue, InferenceTest, Millis, Progress, ResumePoint, RunState, Stage,
    StateCounts, TestState,
};

/// The most runs (and, apart, tests) one report lists; more are counted and said.
pub const REPORT_ROWS: i64 = 1_000;
/// The window when none is given.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(12 * 3600);
/// Log lines shown for a failed run.
pub const LOG_LINES: usize = 5;
/// The most bytes those lines may take (one long line is cut to its end).
const LOG_TAIL_BYTES: u64 = 16 * 1024;
/// How far back a stage log's end is searched for trained weights when no checkpoint names
/// them: a trainer prints them as it ends.
const WEIGHTS_WINDOW: u64 = 256 * 1024;

/// The report: what ended in the window or is still going, and the counts.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The window, as people write it (`12h`).
    pub window: String,
    /// Its start and end (ms since the epoch): the end is when the report was made.
    pub since: Millis,
    pub until: Millis,
    /// Runs that ended in the window, by end time, then the runs still in flight.
    pub runs: Vec<ReportRun>,
    /// Runs of the window left out of `runs` (past [`REPORT_ROWS`]).
    pub more_runs: i64,
    /// Tests that ended in the window, by end time, then the tests still running.
    pub tests: Vec<ReportTest>,
    pub more_tests: i64,
    /// Runs of the window by outcome (terminal states) or state (in flight), all of them.
    pub run_outcomes: StateCounts<RunState>,
    /// Tests of the window by outcome, and `running`.
    pub test_outcomes: StateCounts<TestState>,
    /// What is still waiting, counted.
    pub waiting: Waiting,
    /// Preemptions of the runs listed, and the work they lost (ms).
    pub preemptions: i64,
    pub preempted_work_ms: i64,
    /// Sweeps not done yet or whose state moved in the window, newest first (at most
    /// [`super::REPORT_SWEEPS`]), and how many more there are.
    pub sweeps: Vec<super::ReportSweep>,
    pub more_sweeps: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// What is queued and not started, counted.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Waiting {
    /// Pending runs that are not held.
    pub pending: i64,
    /// Pending runs held out of the queue.
    pub held: i64,
    /// Inference tests queued.
    pub queued_tests: i64,
}

/// One run in the report.
#[derive(Clone, Debug, Serialize)]
pub struct ReportRun {
    pub id: Uuid,
    pub workflow: String,
    pub env_name: Option<String>,
    pub state: RunState,
    pub attempt: i64,
    pub reason: Option<String>,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    /// From its (current attempt's) start to its end, or to the report for a run still going.
    pub duration_ms: Option<i64>,
    /// When its first attempt started: `started_at` for a run on its first attempt.
    pub first_started_at: Option<Millis>,
    /// From its first attempt's start to its end (or the report): every attempt and the waits
    /// between them.
    pub total_ms: Option<i64>,
    /// The checkpoint its current attempt resumed from; none for an attempt from step 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<ResumePoint>,
    /// The step its attempt reached, of the total.
    pub progress: Option<Progress>,
    /// Its last checkpoint.
    pub checkpoint: Option<Checkpoint>,
    /// Its last weights: from a checkpoint, else (a completed run) the end of a stage log.
    pub weights: Option<String>,
    /// Its headline metrics' last values (its workflow's `report:`, else its sweep's metric,
    /// else the W&B keys), each with its step.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<HeadlineValue>,
    /// For a failed run: the stage whose end decided it, and that log's last lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_stage: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub log_tail: Vec<String>,
    /// Times it was preempted, and the work those stops lost (ms).
    #[serde(skip_serializing_if = "is_zero")]
    pub preemptions: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub preempted_work_ms: i64,
}

/// One inference test in the report.
#[derive(Clone, Debug, Serialize)]
pub struct ReportTest {
    pub id: Uuid,
    pub env_name: String,
    /// The schedule that fired it, by name.
    pub schedule: Option<String>,
    pub state: TestState,
    pub reason: Option<String>,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub duration_ms: Option<i64>,
    /// Per model: its accuracy, or why it has none.
    pub models: Vec<ModelAccuracy>,
    pub average_accuracy: Option<f64>,
    /// The models that fell below their schedule's baseline.
    pub regressions: Vec<Regression>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelAccuracy {
    pub model: String,
    pub accuracy: Option<f64>,
    /// The first line of the model's error, when its process failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Report {
    /// `2 completed, 1 failed, 1 running`: the runs by outcome, outcomes first.
    pub fn run_tally(&self) -> String {
        tally(&self.run_outcomes, RUN_ORDER)
    }

    /// `1 succeeded, 1 regressed`: the tests by outcome.
    pub fn test_tally(&self) -> String {
        tally(&self.test_outcomes, TEST_ORDER)
    }
}

/// The order tallies name states in: how runs ended, then what is still going.
const RUN_ORDER: [RunState; 7] = [
    RunState::Completed,
    RunState::Failed,
    RunState::Stopped,
    RunState::Running,
    RunState::Starting,
    RunState::Stopping,
    RunState::Retrying,
];
const TEST_ORDER: [TestState; 5] =
    [TestState::Succeeded, TestState::Regressed, TestState::Failed, TestState::Cancelled, TestState::Running];

impl ReportRun {
    /// `120/120`, `step 40`, or none when no step was reported.
    pub fn step_line(&self) -> Option<String> {
        self.progress.as_ref().map(Progress::short)
    }

    /// `attempt 2, resumed from step 6` for a run past its first attempt (`attempt 2, from the
    /// start` when there was nothing to resume from); none on its first.
    pub fn attempt_line(&self) -> Option<String> {
        if self.attempt <= 1 {
            return None;
        }
        let line = match &self.resumed_from {
            Some(from) => format!("attempt {}, resumed from step {}", self.attempt, from.step),
            None => format!("attempt {}, from the start", self.attempt),
        };
        Some(match self.preemptions {
            0 => line,
            n => {
                let redone = std::time::Duration::from_millis(self.preempted_work_ms.max(0) as u64);
                format!("{line}; preempted {n}×, ≈ {} redone", crate::model::progress::span(redone))
            }
        })
    }

    /// What it saved: its weights and its last checkpoint's step (`step 100: tinker://…`).
    pub fn saved_line(&self) -> Option<String> {
        let step = self.checkpoint.as_ref().map(|c| format!("step {}", c.step));
        let what = self.weights.clone().or_else(|| self.checkpoint.as_ref()?.path.clone());
        match (step, what) {
            (Some(step), Some(what)) => Some(format!("{step}: {what}")),
            (step, what) => step.or(what),
        }
    }

    /// Its headline metrics: `env/all/reward/total 0.610 (step 120)`.
    pub fn metrics_line(&self) -> Option<String> {
        crate::model::headline_line(&self.metrics)
    }
}

impl ReportTest {
    /// `m1 0.400, m2 failed: exited with code 1`.
    pub fn accuracy_line(&self) -> String {
        let parts: Vec<String> = self
            .models
            .iter()
            .map(|m| match (m.accuracy, &m.error) {
                (Some(accuracy), _) => format!("{} {accuracy:.3}", m.model),
                (None, Some(error)) => format!("{} failed: {error}", m.model),
                (None, None) => format!("{} -", m.model),
            })
            .collect();
        parts.join(", ")
    }

    /// `m1 0.400 (baseline 0.800)`, one per regressed model.
    pub fn regressions_line(&self) -> String {
        let parts: Vec<String> = self
            .regressions
            .iter()
            .map(|r| match r.current {
                Some(current) => format!("{} {current:.3} (baseline {:.3})", r.model, r.baseline),
                None => format!("{} no results (baseline {:.3})", r.model, r.baseline),
            })
            .collect();
        parts.join(", ")
    }
}

fn tally<S: CountedState>(counts: &StateCounts<S>, order: impl IntoIterator<Item = S>) -> String {
    let parts: Vec<String> = order
        .into_iter()
        .map(|state| (state, counts.get(state)))
        .filter(|(_, n)| *n > 0)
        .map(|(state, n)| format!("{n} {}", state.name()))
        .collect();
    if parts.is_empty() { "none".into() } else { parts.join(", ") }
}

/// A window as people write it: `12h`, `30m`, `2d`, `90s` (`text::whole_units`).
pub fn window_text(window: Duration) -> String {
    crate::text::whole_units(window)
}

/// The stage whose end decided a failed run: the one its reason names (`stage 'trainer' …`),
/// else the first to end without success (a non-zero exit, a signal, lost), else the last one
/// that started.
pub fn deciding_stage<'a>(reason: Option<&str>, stages: &'a [Stage]) -> Option<&'a Stage> {
    let named = reason
        .and_then(|r| r.split_once("stage '"))
        .and_then(|(_, rest)| rest.split_once('\''))
        .and_then(|(name, _)| stages.iter().find(|s| s.name == name));
    let failed_first = || {
        stages
            .iter()
            .filter(|s| {
                s.record.state == crate::model::ProcessState::Lost
                    || s.record.exit.is_some_and(|exit| !exit.success())
            })
            .min_by_key(|s| (s.record.ended_at.unwrap_or(Millis::MAX), s.idx))
    };
    let last_started = || {
        stages.iter().filter(|s| s.record.started_at.is_some()).max_by_key(|s| (s.record.started_at, s.idx))
    };
    named.or_else(failed_first).or_else(last_started)
}

/// The per-model accuracy, average and regressions recorded in a test's results.
fn test_results(results: Option<&serde_json::Value>) -> (Vec<ModelAccuracy>, Option<f64>, Vec<Regression>) {
    let Some(results) = results else { return (Vec::new(), None, Vec::new()) };
    let models = results["models"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| ModelAccuracy {
            model: m["model"].as_str().unwrap_or("?").to_string(),
            // A verifiers test's figure is its mean reward.
            accuracy: m["reward"]
                .as_f64()
                .or_else(|| m["accuracy"].as_f64())
                .filter(|_| m["error"].is_null()),
            error: m["error"].as_str().and_then(|e| e.lines().next()).map(str::to_string),
        })
        .collect();
    let summary = &results["summary"];
    let average = summary["avg_reward"].as_f64().or_else(|| summary["average_accuracy"].as_f64());
    let regressions = serde_json::from_value(results["regressions"].clone()).unwrap_or_default();
    (models, average, regressions)
}

impl Service {
    /// The report over the last `window`.
    pub async fn report(&self, window: Duration) -> Result<Report> {
        let until = crate::model::now_millis();
        let since = until.saturating_sub(window.as_millis().min(i64::MAX as u128) as i64);
        // The runs, their counts and the tests are read together (on PostgreSQL each on a
        // connection of its own: counting a crowded window takes about as long as its rows).
        let (runs, (run_outcomes, pending, held), (tests, test_outcomes, queued_tests)) = tokio::try_join!(
            self.report_runs(since, until),
            self.run_outcomes(since),
            self.report_tests(since, until),
        )?;
        let more_runs = (run_outcomes.total() - runs.len() as i64).max(0);
        let more_tests = (test_outcomes.total() - tests.len() as i64).max(0);
        let (sweeps, more_sweeps) = self.report_sweeps(since).await?;
        let (preemptions, preempted_work_ms) =
            (runs.iter().map(|r| r.preemptions).sum(), runs.iter().map(|r| r.preempted_work_ms).sum());
        Ok(Report {
            window: window_text(window),
            since,
            until,
            runs,
            more_runs,
            tests,
            more_tests,
            run_outcomes,
            test_outcomes,
            waiting: Waiting { pending: pending - held, held, queued_tests },
            preemptions,
            preempted_work_ms,
            sweeps,
            more_sweeps,
        })
    }

    /// The runs of the window by outcome and those in flight by state, and the pending and
    /// held runs counted.
    async fn run_outcomes(&self, since: Millis) -> Result<(StateCounts<RunState>, i64, i64)> {
        let mut run_outcomes = self.store.ended_run_counts(since).await?;
        run_outcomes.retain(RunState::is_terminal);
        let live_counts = self.store.live_run_counts().await?;
        let pending = live_counts.get(RunState::Pending);
        run_outcomes.add_all(&live_counts.without(RunState::Pending));
        let held = self.store.held_count().await?;
        Ok((run_outcomes, pending, held))
    }

    /// The tests' rows, the tests of the window by outcome (and `running`), and the queued
    /// tests counted.
    async fn report_tests(
        &self,
        since: Millis,
        until: Millis,
    ) -> Result<(Vec<ReportTest>, StateCounts<TestState>, i64)> {
        let schedules: BTreeMap<Uuid, String> =
            self.store.schedules().await?.into_iter().map(|s| (s.id, s.name)).collect();
        let running = self.store.tests_in(TestState::Running, REPORT_ROWS).await?;
        let room = (REPORT_ROWS - running.len() as i64).max(0);
        let mut finished = self.store.tests_ended_since(since, REPORT_ROWS).await?;
        finished.retain(|test| test.state.is_terminal());
        finished.truncate(room as usize);
        finished.reverse();
        let tests: Vec<ReportTest> =
            finished.iter().chain(&running).map(|t| report_test(t, &schedules, until)).collect();
        let mut test_outcomes = self.store.ended_test_counts(since).await?;
        test_outcomes.retain(TestState::is_terminal);
        let live_tests = self.store.live_test_counts().await?;
        let queued_tests = live_tests.get(TestState::Queued);
        test_outcomes.add_all(&live_tests.without(TestState::Queued));
        Ok((tests, test_outcomes, queued_tests))
    }

    /// When the daemon's cron post `name` last handled a due time (now, the first time).
    pub async fn report_post_since(&self, name: &str) -> Result<Millis> {
        Ok(self.store.report_post_since(name, crate::model::now_millis()).await?)
    }

    /// Moves the cron post's last handled time from `from` to `to`; false when another daemon
    /// of the store moved it first (and posts).
    pub async fn claim_report_post(&self, name: &str, from: Millis, to: Millis) -> Result<bool> {
        Ok(self.store.claim_report_post(name, from, to).await?)
    }

    /// The runs' rows: those that ended in the window (the latest, as many as leave room for the
    /// runs in flight), then those in flight, each read with its extras; what only some rows
    /// need read for those at once (a set query per kind); the failed runs' log tails and the
    /// completed runs' weights from their logs in one trip off the daemon's thread.
    async fn report_runs(&self, since: Millis, now: Millis) -> Result<Vec<ReportRun>> {
        let live = self.store.runs_in_flight(REPORT_ROWS).await?;
        let room = (REPORT_ROWS - live.len() as i64).max(0);
        // The latest ends first: when the window holds more than a report shows, the oldest go.
        let mut runs: Vec<ListedRun> = self.store.runs_ended_since(since, REPORT_ROWS).await?;
        runs.retain(|run| run.state.is_terminal());
        runs.truncate(room as usize);
        runs.reverse();
        runs.extend(live);
        // Weights: the last checkpoint's, else (read for those alone) an earlier one's.
        let mut weights: std::collections::HashMap<Uuid, String> =
            runs.iter().filter_map(|run| Some((run.id, run.checkpoint.as_ref()?.weights.clone()?))).collect();
        let older: Vec<Uuid> = runs
            .iter()
            .filter(|run| run.checkpoint.as_ref().is_some_and(|c| c.weights.is_none()))
            .map(|run| run.id)
            .collect();
        weights.extend(self.store.last_weights_of(&older).await?);
        // Stages only where the row needs them: a failed run's deciding stage, a completed
        // run's logs when no checkpoint named its weights.
        let needs_stages = |run: &ListedRun| {
            run.state == RunState::Failed
                || (run.state == RunState::Completed && !weights.contains_key(&run.id))
        };
        let staged: Vec<Uuid> = runs.iter().filter(|r| needs_stages(r)).map(|r| r.id).collect();
        let mut stages = self.store.stages_of(&staged).await?;
        // A retried run's first attempt started before its current one: read it from its events.
        let retried: Vec<Uuid> = runs.iter().filter(|r| r.attempt > 1).map(|r| r.id).collect();
        let first_starts = self.store.first_starts_of(&retried).await?;
        let of: Vec<HeadlineOf> = runs
            .iter()
            .map(|run| HeadlineOf { id: run.id, report: &run.report, sweep: run.params.sweep.as_ref() })
            .collect();
        let mut headlines = self.headlines(&of).await?;

        // What the logs give, read together off the daemon's thread.
        let mut reads = Vec::new();
        for run in &runs {
            let Some(stages) = stages.get(&run.id) else { continue };
            if run.state == RunState::Failed {
                if let Some(stage) = deciding_stage(run.reason.as_deref(), stages) {
                    reads.push((run.id, LogRead::Tail(stage.name.clone(), stage.log_path.clone())));
                }
            } else {
                reads.push((run.id, LogRead::Weights(stages.iter().map(|s| s.log_path.clone()).collect())));
            }
        }
        let mut from_logs: BTreeMap<Uuid, LogFound> =
            off_thread(move || Ok(reads.into_iter().map(|(id, read)| (id, read.read())).collect())).await?;

        let mut rows = Vec::with_capacity(runs.len());
        for run in runs {
            let progress = if run.state.is_terminal() {
                // Ended: its last step, without a rate.
                run.progress.last().and_then(|last| Progress::of(std::slice::from_ref(last)))
            } else if run.reports_progress {
                // Still going: the rate and time left need the attempt's ends.
                Progress::of(&run.progress)
            } else {
                None
            };
            let (mut failed_stage, mut log_tail, mut weights) = (None, Vec::new(), weights.remove(&run.id));
            match from_logs.remove(&run.id) {
                Some(LogFound::Tail(stage, lines)) => (failed_stage, log_tail) = (Some(stage), lines),
                Some(LogFound::Weights(found)) => weights = weights.or(found),
                None => {}
            }
            stages.remove(&run.id);
            let end = run.ended_at.unwrap_or(now);
            let first_started_at = first_starts.get(&run.id).copied().or(run.started_at);
            rows.push(ReportRun {
                id: run.id,
                workflow: run.workflow,
                env_name: run.env_name,
                state: run.state,
                attempt: run.attempt,
                reason: run.reason,
                started_at: run.started_at,
                ended_at: run.ended_at,
                duration_ms: run.started_at.map(|start| (end - start).max(0)),
                first_started_at,
                total_ms: first_started_at.map(|start| (end - start).max(0)),
                resumed_from: crate::workflow::checkpoints::resume_of(&run.params.resolved).ok().flatten(),
                progress,
                checkpoint: run.checkpoint,
                weights,
                metrics: headlines.remove(&run.id).unwrap_or_default(),
                failed_stage,
                log_tail,
                preemptions: run.preemptions,
                preempted_work_ms: run.preempted_work,
            });
        }
        Ok(rows)
    }
}

/// A read of a run's logs for its report row.
enum LogRead {
    /// The last lines of the stage (its name) that decided a failed run.
    Tail(String, std::path::PathBuf),
    /// Trained weights at the end of any of these logs (a completed run no checkpoint named).
    Weights(Vec<std::path::PathBuf>),
}

/// What a [`LogRead`] found.
enum LogFound {
    Tail(String, Vec<String>),
    Weights(Option<String>),
}

impl LogRead {
    /// Bounded reads: [`LOG_TAIL_BYTES`] of the tail, [`WEIGHTS_WINDOW`] of each log's end.
    fn read(self) -> LogFound {
        match self {
            LogRead::Tail(stage, log) => {
                let lines = match crate::logs::tail(&log, LOG_LINES, LOG_TAIL_BYTES) {
                    Ok(page) => {
                        let lines: Vec<&str> = page.text.lines().collect();
                        let from = lines.len().saturating_sub(LOG_LINES);
                        lines[from..].iter().map(|l| l.to_string()).collect()
                    }
                    Err(err) => vec![format!("(cannot read the log: {err})")],
                };
                LogFound::Tail(stage, lines)
            }
            LogRead::Weights(logs) => {
                for log in &logs {
                    // An unreadable log has no weights to show; the rest of the row stands.
                    match crate::logs::last_match(log, 0, WEIGHTS_WINDOW, super::runs::weights_in) {
                        Ok(Some(found)) => return LogFound::Weights(Some(found)),
                        Ok(None) => {}
                        Err(err) => tracing::debug!("report: {err}"),
                    }
                }
                LogFound::Weights(None)
            }
        }
    }
}

fn report_test(test: &InferenceTest, schedules: &BTreeMap<Uuid, String>, now: Millis) -> ReportTest {
    let (models, average_accuracy, regressions) = test_results(test.results.as_ref());
    let end = test.ended_at.unwrap_or(now);
    ReportTest {
        id: test.id,
        env_name: test.env_name.clone(),
        schedule: test.schedule_id.and_then(|id| schedules.get(&id).cloned()),
        state: test.state,
        reason: test.reason.clone(),
        started_at: test.started_at,
        ended_at: test.ended_at,
        duration_ms: test.started_at.map(|start| (end - start).max(0)),
        models,
        average_accuracy,
        regressions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Exit, ProcessRecord, ProcessState};

    fn stage(idx: i64, name: &str, state: ProcessState, exit: Option<Exit>, ended: Option<Millis>) -> Stage {
        Stage {
            run_id: Uuid::nil(),
            idx,
            name: name.into(),
            record: ProcessRecord {
                state,
                started_at: (state != ProcessState::Pending).then_some(10 + idx),
                ended_at: ended,
                exit,
                ..ProcessRecord::default()
            },
            ready_at: None,
            log_path: format!("/runs/r/{name}.log").into(),
            slurm_job: None,
        }
    }

    /// Which stage decided a failed run, for each way runs fail.
    #[test]
    fn the_deciding_stage_is_the_one_named_else_the_first_failure_else_the_last_started() {
        use ProcessState::{Exited, Lost, Pending, Up};
        let killed = Some(Exit::Signal(15));
        /// What the case is, the run's reason, its stages, the stage that decided it.
        type Case = (&'static str, Option<&'static str>, Vec<Stage>, Option<&'static str>);
        let cases: [Case; 6] = [
            (
                "the reason names it",
                Some("stage 'trainer' exited with code 1 while the run was running"),
                vec![
                    stage(0, "api", Exited, killed, Some(30)),
                    stage(1, "trainer", Exited, Some(Exit::Code(1)), Some(20)),
                    stage(2, "env", Exited, killed, Some(25)),
                ],
                Some("trainer"),
            ),
            (
                "a name that is no stage falls back to the first failure",
                Some("stage 'ghost' vanished"),
                vec![
                    stage(0, "api", Exited, killed, Some(30)),
                    stage(1, "env", Exited, Some(Exit::Code(2)), Some(20)),
                ],
                Some("env"),
            ),
            (
                "a stall: the first stage to end without success",
                Some("no new step for 30m (stalled)"),
                vec![
                    stage(0, "api", Exited, killed, Some(40)),
                    stage(1, "trainer", Exited, killed, Some(35)),
                    stage(2, "env", Exited, killed, Some(30)),
                ],
                Some("env"),
            ),
            (
                "a lost stage counts as a failure",
                None,
                vec![
                    stage(0, "api", Exited, Some(Exit::Code(0)), Some(5)),
                    stage(1, "trainer", Lost, None, None),
                ],
                Some("trainer"),
            ),
            (
                "nothing failed: the last stage that started",
                Some("time limit 10h reached"),
                vec![
                    stage(0, "api", Up, None, None),
                    stage(1, "trainer", Up, None, None),
                    stage(2, "env", Pending, None, None),
                ],
                Some("trainer"),
            ),
            ("no stage ever started", Some("cancelled"), vec![stage(0, "api", Pending, None, None)], None),
        ];
        for (what, reason, stages, want) in cases {
            let got = deciding_stage(reason, &stages).map(|s| s.name.as_str());
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn windows_read_in_their_largest_whole_unit() {
        let cases = [(12 * 3600, "12h"), (2 * 86_400, "2d"), (90 * 60, "90m"), (90, "90s"), (0, "0s")];
        for (secs, text) in cases {
            assert_eq!(window_text(Duration::from_secs(secs)), text);
        }
    }

    #[test]
    fn test_results_give_accuracy_per_model_and_regressions() {
        let results = serde_json::json!({
            "models": [
                { "model": "m1", "accuracy": 0.4, "error": null },
                { "model": "m2", "accuracy": 0.0, "error": "exited with code 1\nTraceback…" },
            ],
            "summary": { "average_accuracy": 0.4 },
            "regressions": [{ "model": "m1", "baseline": 0.8, "current": 0.4, "reason": "fell" }],
        });
        let (models, average, regressions) = test_results(Some(&results));
        assert_eq!(models[0], ModelAccuracy { model: "m1".into(), accuracy: Some(0.4), error: None });
        assert_eq!(models[1].accuracy, None);
        assert_eq!(models[1].error.as_deref(), Some("exited with code 1"));
        assert_eq!(average, Some(0.4));
        assert_eq!(regressions.len(), 1);
        assert_eq!(regressions[0].baseline, 0.8);
        // Results of another shape give what they hold and nothing else.
        let (models, average, regressions) = test_results(Some(&serde_json::json!({ "models": 3 })));
        assert!(models.is_empty() && average.is_none() && regressions.is_empty());
        assert!(test_results(None).0.is_empty());
        // A verifiers test's figure is its mean reward.
        let results = serde_json::json!({
            "models": [{ "model": "m1", "reward": 0.75, "accuracy": 1.0, "error": null }],
            "summary": { "avg_accuracy": 1.0, "avg_reward": 0.75 },
        });
        let (models, average, _) = test_results(Some(&results));
        assert_eq!((models[0].accuracy, average), (Some(0.75), Some(0.75)));
    }

    #[test]
    fn tallies_follow_the_state_order_and_skip_zeros() {
        let counts: StateCounts<RunState> =
            [(RunState::Running, 1), (RunState::Completed, 2), (RunState::Failed, 0)].into_iter().collect();
        assert_eq!(tally(&counts, RUN_ORDER), "2 completed, 1 running");
        assert_eq!(tally(&StateCounts::<RunState>::default(), RUN_ORDER), "none");
        // Every state a report counts has its place.
        for state in RunState::ALL.iter().filter(|s| **s != RunState::Pending) {
            assert!(RUN_ORDER.contains(state), "{state}");
        }
        for state in TestState::ALL.iter().filter(|s| **s != TestState::Queued) {
            assert!(TEST_ORDER.contains(state), "{state}");
        }
    }
}
