//! The morning report over a night of mixed outcomes, laid out with fixtures (runs and tests
//! ended at chosen times) beside real runs (one failed, one still running): through the CLI
//! (`--json` and text), `GET /report` behind the token and the dashboard page; and the cron
//! post to a webhook, caught up once after downtime and never twice across a restart.

use std::time::Duration;

use lachesis::model::{
    FoundCheckpoint, InferenceTest, MetricRow, ProgressPoint, Run, RunParams, RunState, TestState,
    TestTrigger, now_millis,
};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Receiver, TestHome, stderr, wait_for};

const T: Duration = Duration::from_secs(30);
const HOUR: i64 = 3_600_000;
const TOKEN: &str = "report-test-token-0123";

/// A run that failed for real: its trainer prints seven lines and exits 3 while its api stage
/// is still up.
const BAD: &str = "name: bad\nstages:\n  - name: api\n    argv: [sh, -c, \"echo api up; exec sleep 600\"]\n    start_delay: 100ms\n  \
    - name: trainer\n    argv: [sh, -c, \"for i in 1 2 3 4 5 6 7; do echo line $i; done; echo broken; exit 3\"]\n\
    completion: {stages: [trainer]}\nstop_grace: 1s\n";

/// A run still running, reporting its step in its log.
const LONG: &str = "name: long\nstages:\n  - name: trainer\n    \
    argv: [sh, -c, \"i=0; while :; do i=$((i+1)); echo Step $i/1000; sleep 0.2; done\"]\nstop_grace: 1s\n\
    progress:\n  log: {stage: trainer, pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}\n";

const OK: &str = "name: ok\nstages:\n  - {name: main, argv: [sh, -c, \"exit 0\"]}\n\
    progress:\n  log: {stage: main, pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}\n";

fn model_result(model: &str, accuracy: f64) -> Value {
    json!({ "model": model, "output_file": "/dev/null", "steps_tested": 2, "total_completions": 8,
        "correct_completions": (accuracy * 8.0) as u64, "accuracy": accuracy, "steps_with_correct": 2,
        "step_success_rate": 1.0, "error": null, "steps": [] })
}

/// A fixture run of workflow `ok`, in `state`, started an hour before `ended_at`.
async fn fixture_run(home: &mut TestHome, state: RunState, ended_at: i64, reason: &str) -> Uuid {
    let spec = home.settings().catalog().unwrap().load("ok").unwrap();
    let service = home.service().await;
    let id = Uuid::new_v4();
    let mut run = Run::queued(id, spec, home.settings().run_dir(&id), 0, RunParams::default());
    run.env_name = Some("arith".into());
    run.state = state;
    run.started_at = Some(ended_at - 2 * HOUR);
    run.ended_at = Some(ended_at);
    run.reason = Some(reason.into());
    let stages = run.pending_stages();
    service.insert_runs_as_given(&[(run, stages)]).await.unwrap();
    id
}

/// A test of schedule `nightly` that ended with `accuracy` (and a regression below 0.8 when
/// `regressed`), moved through its table as the daemon would.
async fn fixture_test(home: &mut TestHome, accuracy: f64, regressed: bool) -> Uuid {
    let service = home.service().await;
    let schedule = service.schedules().await.unwrap().remove(0);
    let test = InferenceTest::queued(
        Uuid::new_v4(),
        schedule.spec.clone(),
        Some(schedule.id),
        &home.path().join("tests"),
    );
    service.insert_test_as_given(&test, &test.pending_tasks()).await.unwrap();
    let running = service.move_test(&test, TestTrigger::Claim, None, None).await.unwrap();
    let summary = json!({ "models_tested": 1, "models_succeeded": 1, "average_accuracy": accuracy });
    if regressed {
        let results = json!({ "models": [model_result("m1", accuracy)], "summary": summary, "regressions": [
            { "model": "m1", "baseline": 0.8, "current": accuracy, "reason": "fell below the baseline" }] });
        service
            .move_test(&running, TestTrigger::Regress, Some("regressed: m1 fell"), Some(&results))
            .await
            .unwrap();
    } else {
        let results = json!({ "models": [model_result("m1", accuracy)], "summary": summary });
        service
            .move_test(&running, TestTrigger::Succeed, Some("1 of 1 models produced results"), Some(&results))
            .await
            .unwrap();
    }
    test.id
}

fn home_with_workflows() -> TestHome {
    let mut home = TestHome::new();
    home.environ.push(("LACHESIS_ENV_DIRS".into(), crate::atropos::envs_dir().display().to_string()));
    home.environ.push(("LACHESIS_PYTHON".into(), "false".into()));
    home.workflow("ok", OK);
    home.workflow("bad", BAD);
    home.workflow("long", LONG);
    home
}

/// The night: what the report must show and what it must leave out.
struct Night {
    completed: Uuid,
    stopped: Uuid,
    before_window: Uuid,
    failed: Uuid,
    running: Uuid,
    passed: Uuid,
    regressed: Uuid,
    old_test: Uuid,
}

async fn lay_out_the_night(home: &mut TestHome) -> Night {
    let now = now_millis();
    crate::dashboard::add_nightly_schedule(home);
    let completed = fixture_run(home, RunState::Completed, now - 3 * HOUR, "stage 'main' finished").await;
    let stopped = fixture_run(home, RunState::Stopped, now - 2 * HOUR, "stop requested").await;
    let before_window =
        fixture_run(home, RunState::Failed, now - 20 * HOUR, "stage 'main' exited with code 1").await;
    let service = home.service().await;
    // What the completed run left: its steps, a checkpoint with weights, its W&B metrics.
    let point = ProgressPoint { attempt: 1, step: 120, total: Some(120), at: now - 3 * HOUR - 1000 };
    service.record_progress_as_given(completed, &point).await.unwrap();
    let checkpoint = FoundCheckpoint {
        step: 120,
        path: Some("tinker://night/weights/120".into()),
        weights: Some("tinker://night/sampler_weights/120".into()),
        key: "line 120".into(),
    };
    service.record_checkpoint_as_given(completed, 1, &checkpoint, now - 3 * HOUR).await.unwrap();
    let row = |step, reward| MetricRow {
        step,
        reward_mean: Some(reward),
        percent_correct: Some(0.72),
        loss: Some(0.1),
        recorded_at: now,
        ..MetricRow::default()
    };
    service.put_metric_rows_as_given(completed, &[row(100, 0.5), row(120, 0.61)]).await.unwrap();
    let passed = fixture_test(home, 0.8, false).await;
    let regressed = fixture_test(home, 0.4, true).await;
    // A test that ended before the window.
    let schedule = service.schedules().await.unwrap().remove(0);
    let old = InferenceTest {
        state: TestState::Succeeded,
        started_at: Some(now - 21 * HOUR),
        ended_at: Some(now - 20 * HOUR),
        ..InferenceTest::queued(
            Uuid::new_v4(),
            schedule.spec.clone(),
            Some(schedule.id),
            &home.path().join("tests"),
        )
    };
    service.insert_test_as_given(&old, &old.pending_tasks()).await.unwrap();
    // One run held in the queue: counted as waiting, not listed.
    home.submit(&["-w", "ok", "--hold"]);

    // And two real runs: one fails, one keeps running.
    let failed = home.submit(&["-w", "bad"]);
    let running = home.submit(&["-w", "long"]);
    Night { completed, stopped, before_window, failed, running, passed, regressed, old_test: old.id }
}

/// The report row of `id` in a report's JSON.
fn row(rows: &Value, id: Uuid) -> &Value {
    let found = rows.as_array().unwrap().iter().find(|r| r["id"] == id.to_string());
    found.unwrap_or_else(|| panic!("{id} is not in the report: {rows:#}"))
}

fn listed(rows: &Value, id: Uuid) -> bool {
    rows.as_array().unwrap().iter().any(|r| r["id"] == id.to_string())
}

/// What every surface's report must say of the night.
fn check_report(report: &Value, night: &Night) {
    let runs = &report["runs"];
    assert_eq!(report["window"], "12h");
    let completed = row(runs, night.completed);
    assert_eq!(completed["state"], "completed");
    assert_eq!(
        (completed["progress"]["step"].as_i64(), completed["progress"]["total"].as_i64()),
        (Some(120), Some(120))
    );
    assert_eq!(completed["duration_ms"], 2 * HOUR);
    assert_eq!(completed["weights"], "tinker://night/sampler_weights/120");
    assert_eq!(completed["checkpoint"]["step"], 120);
    // No `report:` and no sweep: the W&B keys, each with its last value, by name.
    let metric = |name: &str| {
        let found = completed["metrics"].as_array().and_then(|m| m.iter().find(|m| m["name"] == name));
        found.map(|m| (m["step"].as_i64(), m["value"].as_f64()))
    };
    assert_eq!(metric("train/reward_mean"), Some((Some(120), Some(0.61))), "{completed:#}");
    assert_eq!(metric("train/loss"), Some((Some(120), Some(0.1))), "{completed:#}");
    let failed = row(runs, night.failed);
    assert_eq!(failed["state"], "failed");
    assert!(failed["reason"].as_str().unwrap().starts_with("stage 'trainer' exited with code 3"), "{failed}");
    assert_eq!(failed["failed_stage"], "trainer", "the stage that decided it, not the api it stopped");
    assert_eq!(failed["log_tail"], json!(["line 4", "line 5", "line 6", "line 7", "broken"]));
    let stopped = row(runs, night.stopped);
    assert_eq!(
        (stopped["state"].as_str(), stopped["reason"].as_str()),
        (Some("stopped"), Some("stop requested"))
    );
    assert!(stopped.get("log_tail").is_none(), "only a failed run carries log lines");
    let running = row(runs, night.running);
    assert_eq!(running["state"], "running");
    assert!(
        running["progress"]["step"].as_i64().unwrap() >= 1 && running["progress"]["total"] == 1000,
        "{running}"
    );
    assert!(!listed(runs, night.before_window), "a run that ended before the window is left out");
    assert_eq!(runs.as_array().unwrap().len(), 4, "{runs:#}");
    assert_eq!(report["run_outcomes"], json!({ "completed": 1, "failed": 1, "stopped": 1, "running": 1 }));
    assert_eq!(report["more_runs"], 0);

    let tests = &report["tests"];
    let passed = row(tests, night.passed);
    assert_eq!((passed["state"].as_str(), passed["schedule"].as_str()), (Some("succeeded"), Some("nightly")));
    assert_eq!(passed["models"][0]["accuracy"], 0.8);
    let regressed = row(tests, night.regressed);
    assert_eq!(regressed["state"], "regressed");
    assert_eq!(regressed["models"][0]["accuracy"], 0.4);
    assert_eq!(regressed["regressions"][0]["model"], "m1");
    assert_eq!(regressed["regressions"][0]["baseline"], 0.8);
    assert!(!listed(tests, night.old_test), "a test that ended before the window is left out");
    assert_eq!(report["test_outcomes"], json!({ "succeeded": 1, "regressed": 1 }));
    assert_eq!(report["waiting"], json!({ "pending": 0, "held": 1, "queued_tests": 0 }));
    assert_eq!(
        (report["sweeps"].clone(), report["more_sweeps"].clone()),
        (json!([]), json!(0)),
        "no sweep tonight"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test]
async fn the_morning_report_shows_the_night_on_every_surface() {
    let mut home = home_with_workflows();
    let night = lay_out_the_night(&mut home).await;
    let addr = format!("127.0.0.1:{}", free_port());
    home.environ.push(("LACHESIS_API_TOKEN".into(), TOKEN.into()));
    home.start_daemon_with(&["--listen", &addr]);
    home.wait_settled(night.failed, T).await;
    home.wait_state(night.running, RunState::Running, T).await;
    let service = home.service().await;
    wait_for("the running run's first step", T, || {
        let service = service.clone();
        async move {
            let run = service.run(night.running).await.unwrap().unwrap();
            service.run_progress_of(&run).await.unwrap().map(drop)
        }
    })
    .await;

    // The CLI, as JSON.
    let report: Value = serde_json::from_str(&home.cli_ok(&["report", "--json"])).unwrap();
    check_report(&report, &night);
    // A wider window takes in the run and the test that ended 20 hours ago.
    let wide: Value = serde_json::from_str(&home.cli_ok(&["report", "--since", "24h", "--json"])).unwrap();
    assert!(listed(&wide["runs"], night.before_window) && listed(&wide["tests"], night.old_test));
    assert_eq!(wide["run_outcomes"]["failed"], 2);

    // The CLI, as text: one screen with the tables, the failed stage's lines and the counts.
    let text = home.cli_ok(&["report"]);
    eprintln!("lachesis report:\n{text}");
    for id in [night.completed, night.stopped, night.failed, night.running, night.passed, night.regressed] {
        assert!(text.contains(&id.to_string()[..8]), "{id} missing:\n{text}");
    }
    assert!(!text.contains(&night.before_window.to_string()[..8]), "{text}");
    assert!(text.contains("step 120: tinker://night/sampler_weights/120"), "{text}");
    assert!(
        text.contains("train/reward_mean 0.610, train/percent_correct 0.720, train/loss 0.100 (step 120)"),
        "{text}"
    );
    assert!(
        text.contains(
            "failed: last lines of trainer:\n    line 4\n    line 5\n    line 6\n    line 7\n    broken\n"
        ),
        "{text}"
    );
    assert!(text.contains("m1 0.400 (baseline 0.800)"), "{text}");
    assert!(text.contains("runs: 1 completed, 1 failed, 1 stopped, 1 running\n"), "{text}");
    assert!(text.contains("tests: 1 succeeded, 1 regressed\n"), "{text}");
    assert!(text.contains("waiting: 0 pending, 1 held, 0 tests queued\n"), "{text}");

    // A window that is not one is refused on one line.
    for bad in ["soon", "0", "40d"] {
        let out = home.cli(&["report", "--since", bad]);
        let err = stderr(&out);
        assert!(!out.status.success() && err.contains("--since"), "{bad}: {err}");
        assert_eq!(err.trim().lines().filter(|l| l.starts_with("error")).count(), 1, "{err}");
    }

    // GET /report, behind the token like every route.
    let http = lachesis::http_client::builder().build().unwrap();
    let base = format!("http://{addr}");
    let anonymous = http.get(format!("{base}/report")).send().await.unwrap();
    assert_eq!(anonymous.status(), reqwest::StatusCode::UNAUTHORIZED);
    let answer = http.get(format!("{base}/report?since=12h")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::OK);
    check_report(&serde_json::from_str(&answer.text().await.unwrap()).unwrap(), &night);
    let refused = http.get(format!("{base}/report?since=soon")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::BAD_REQUEST);
    let refusal: Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(refusal["error"], "invalid_query");
    assert!(refusal["message"].as_str().unwrap().starts_with("since: 'soon' is not a duration"), "{refusal}");

    // The dashboard page, linked from every page's navigation.
    let page = http.get(format!("{base}/ui/report")).send().await.unwrap();
    assert_eq!(page.status(), reqwest::StatusCode::UNAUTHORIZED, "the page wants the token too");
    let page = http.get(format!("{base}/ui/report")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(page.status(), reqwest::StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(html.contains("href=\"/ui/report\""), "the navigation links the report");
    for id in [night.completed, night.stopped, night.failed, night.running, night.passed, night.regressed] {
        assert!(
            html.contains(&format!(
                "data-{}=\"{id}\"",
                if listed(&report["runs"], id) { "run" } else { "test" }
            )),
            "{id}"
        );
    }
    assert!(!html.contains(&night.before_window.to_string()), "{html}");
    assert!(html.contains("failed: last lines of trainer</h3>"), "{html}");
    assert!(html.contains("line 4\nline 5\nline 6\nline 7\nbroken</pre>"), "{html}");
    assert!(html.contains("runs: 1 completed, 1 failed, 1 stopped, 1 running"), "{html}");
    assert!(html.contains("m1 0.400 (baseline 0.800)") && html.contains("badge bad\">regressed"), "{html}");
    let bad = http.get(format!("{base}/ui/report?since=0")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(bad.status(), reqwest::StatusCode::BAD_REQUEST);
    assert!(bad.text().await.unwrap().contains("since: must be longer than 0s"));

    // And in a real browser, when there is one (the dashboard's tier).
    if crate::dashboard::chromium().is_some() {
        let out = crate::dashboard::screenshot_dir();
        let shown =
            crate::dashboard::drive(&json!({ "mode": "screens", "base": base, "token": TOKEN, "out": out,
            "pages": { "report": "/ui/report" } }));
        let text = shown["report"]["text"].as_str().unwrap();
        eprintln!("screenshot: {}", shown["report"]["screenshot"]);
        assert!(text.contains("failed: last lines of trainer") && text.contains("broken"), "{text}");
        assert!(text.contains(&night.regressed.to_string()[..8]) && text.contains("1 held"), "{text}");
    }
}

#[tokio::test]
async fn the_report_is_posted_at_its_cron_time_caught_up_once_and_never_twice() {
    let receiver = Receiver::start(vec![]).await;
    let mut home = home_with_workflows();
    let completed =
        fixture_run(&mut home, RunState::Completed, now_millis() - HOUR, "stage 'main' finished").await;
    // The daemon was last up two days ago: two 07:00 posts were missed since.
    let service = home.service().await;
    let name = lachesis::report_poster::post_name("0 7 * * *", None);
    service.overwrite_report_post(&name, now_millis() - 48 * HOUR).await.unwrap();
    // The webhook carries a secret: it comes from the environment, never argv, and no log shows it.
    let hook = format!("{}?token=sekrit-report-token", receiver.url);
    home.environ.push(("LACHESIS_REPORT_WEBHOOK".into(), hook));
    home.start_daemon_with(&["--report-cron", "0 7 * * *", "--report-since", "12h"]);
    let posted = wait_for("the morning report's post", T, || {
        let found = receiver.of_kind("morning_report");
        async move { found.first().cloned() }
    })
    .await;
    assert_eq!(posted["ids"]["window"], "12h");
    assert_eq!(posted["state"], "1 completed");
    assert!(listed(&posted["summary"]["runs"], completed), "{posted:#}");
    assert_eq!(posted["summary"]["run_outcomes"], json!({ "completed": 1 }));
    let log_path = home.path().join("daemon.log");
    let log_says = |what: &'static str, times: usize| {
        let path = log_path.clone();
        move || {
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            std::future::ready((log.matches(what).count() >= times).then_some(log))
        }
    };
    let log = wait_for("the delivery in the daemon's log", T, log_says("morning report posted to", 1)).await;
    assert!(log.contains("2 due times passed while no daemon ran; posting one report"), "{log}");

    // A restart posts nothing again: the second daemon has decided once it names its next post.
    home.kill_daemon();
    home.start_daemon_with(&["--report-cron", "0 7 * * *", "--report-since", "12h"]);
    let log =
        wait_for("the second daemon's next post", T, log_says("morning report: next post due at", 2)).await;
    assert_eq!(receiver.of_kind("morning_report").len(), 1, "posted twice:\n{log}");
    assert!(!log.contains("sekrit-report-token"), "{log}");
    assert_eq!(
        crate::support::files_containing(home.path(), b"sekrit-report-token"),
        Vec::<std::path::PathBuf>::new()
    );

    // A secret on the command line, or a cron without a webhook, is refused before anything starts.
    home.kill_daemon();
    home.environ.retain(|(k, _)| k != "LACHESIS_REPORT_WEBHOOK");
    let out = home.cli(&[
        "daemon",
        "--report-cron",
        "0 7 * * *",
        "--report-webhook",
        "https://u:hunter2@h.example/x",
    ]);
    let err = stderr(&out);
    assert!(
        !out.status.success() && err.contains("carries credentials") && !err.contains("hunter2"),
        "{err}"
    );
    let out = home.cli(&["daemon", "--report-cron", "0 7 * * *"]);
    assert!(stderr(&out).contains("--report-cron needs a webhook"), "{}", stderr(&out));
}

#[tokio::test]
async fn the_report_reads_the_same_night_on_postgres() {
    let Some(url) = crate::support::fresh_postgres().await else { return };
    let mut home = home_with_workflows();
    home.database_url = Some(url);
    let now = now_millis();
    let completed =
        fixture_run(&mut home, RunState::Completed, now - 3 * HOUR, "stage 'main' finished").await;
    let old = fixture_run(&mut home, RunState::Completed, now - 20 * HOUR, "stage 'main' finished").await;
    let service = home.service().await;
    let checkpoint =
        FoundCheckpoint { step: 7, path: None, weights: Some("tinker://pg/7".into()), key: "k".into() };
    service.record_checkpoint_as_given(completed, 1, &checkpoint, now - 3 * HOUR).await.unwrap();
    let report: Value = serde_json::from_str(&home.cli_ok(&["report", "--json"])).unwrap();
    assert!(listed(&report["runs"], completed) && !listed(&report["runs"], old), "{report:#}");
    assert_eq!(row(&report["runs"], completed)["weights"], "tinker://pg/7");
    assert_eq!(report["run_outcomes"], json!({ "completed": 1 }));
}

/// Figures: a window of 1,500 ended runs in a store of 11,500 lists the newest 1,000 and says
/// how many more, counting them all; its cost follows the rows shown, not the history kept.
#[tokio::test]
async fn a_crowded_window_lists_a_thousand_and_counts_the_rest() {
    let mut home = home_with_workflows();
    let spec = home.settings().catalog().unwrap().load("ok").unwrap();
    let service = home.service().await;
    let now = now_millis();
    let mut batch = Vec::new();
    for i in 0..11_500i64 {
        let id = Uuid::new_v4();
        let mut run = Run::queued(id, spec.clone(), home.settings().run_dir(&id), 0, RunParams::default());
        // 1,500 in the last 12 hours (one a failure in ten), 10,000 in the days before.
        let ended = if i < 1_500 { now - 11 * HOUR + i * 1000 } else { now - 13 * HOUR - i * 60_000 };
        run.state = if i % 10 == 0 { RunState::Failed } else { RunState::Completed };
        run.started_at = Some(ended - 60_000);
        run.ended_at = Some(ended);
        run.reason = Some("stage 'main' exited with code 0".into());
        let stages = run.pending_stages();
        batch.push((run, stages));
    }
    service.insert_runs_as_given(&batch).await.unwrap();
    let started = std::time::Instant::now();
    let report = service.report(Duration::from_secs(12 * 3600)).await.unwrap();
    let took = started.elapsed();
    assert_eq!(report.runs.len(), 1_000);
    assert_eq!(report.more_runs, 500);
    assert_eq!(report.run_outcomes.get(RunState::Failed), 150);
    assert_eq!(report.run_outcomes.get(RunState::Completed), 1_350);
    // The newest thousand, oldest first.
    let newest: Vec<Uuid> = batch[500..1_500].iter().map(|(run, _)| run.id).collect();
    assert_eq!(report.runs.iter().map(|r| r.id).collect::<Vec<_>>(), newest);
    let text = home.cli_ok(&["report"]);
    assert!(text.contains("… and 500 more runs (see `lachesis run list`)"), "{}", &text[text.len() - 400..]);
    let started = std::time::Instant::now();
    home.cli_ok(&["report", "--json"]);
    eprintln!(
        "FIGURES report over 1,500 runs in the window (11,500 in the store): Service::report {took:?}, \
         `lachesis report --json` {:?} (debug build)",
        started.elapsed()
    );
}

/// Figures, run by hand (`cargo test --test it report_figures -- --ignored --nocapture`): the
/// report over a window of 1,000 and one of 100,000 ended runs, the newest thousand (the rows it
/// lists) each with 20 changes of step, 2 checkpoints and 10 metric rows, one in ten failed with
/// a log; on SQLite and, when a server answers, PostgreSQL. The median of 5 `Service::report`
/// calls, and one `lachesis report --json` (its process's open included).
#[tokio::test]
#[ignore = "a figure, not a check: run by hand"]
async fn report_figures() {
    for window in [1_000usize, 100_000] {
        report_figure(None, window).await;
        if let Some(url) = crate::support::fresh_postgres().await {
            report_figure(Some(url), window).await;
        }
    }
}

async fn report_figure(database_url: Option<String>, window: usize) {
    let mut home = home_with_workflows();
    let backend = if database_url.is_some() { "postgres" } else { "sqlite" };
    home.database_url = database_url;
    let spec = home.settings().catalog().unwrap().load("ok").unwrap();
    let service = home.service().await;
    let now = now_millis();
    let mut listed = Vec::new();
    for start in (0..window).step_by(5_000) {
        let mut batch = Vec::new();
        for i in start..window.min(start + 5_000) {
            let id = Uuid::new_v4();
            let mut run =
                Run::queued(id, spec.clone(), home.settings().run_dir(&id), 0, RunParams::default());
            // Spread over the last 11 hours, the newest last.
            let ended = now - 11 * HOUR + (i as i64 * 11 * HOUR) / window as i64;
            run.state = if i % 10 == 0 { RunState::Failed } else { RunState::Completed };
            run.started_at = Some(ended - HOUR);
            run.ended_at = Some(ended);
            run.reason = Some("stage 'main' exited with code 1".into());
            let stages = run.pending_stages();
            if i + 1_000 >= window {
                listed.push((run.clone(), stages.clone()));
            }
            batch.push((run, stages));
        }
        service.insert_runs_as_given(&batch).await.unwrap();
    }
    for (run, stages) in &listed {
        let start = run.started_at.unwrap();
        for step in 0..20 {
            let point = ProgressPoint { attempt: 1, step, total: Some(20), at: start + step * 1000 };
            service.record_progress_as_given(run.id, &point).await.unwrap();
        }
        for step in [10, 20] {
            let found = FoundCheckpoint {
                step,
                path: Some(format!("tinker://{}/weights/{step}", run.id)),
                weights: Some(format!("tinker://{}/sampler_weights/{step}", run.id)),
                key: format!("line {step}"),
            };
            service.record_checkpoint_as_given(run.id, 1, &found, start + step * 1000).await.unwrap();
        }
        let rows: Vec<MetricRow> = (1..=10)
            .map(|step| MetricRow {
                step: step * 2,
                reward_mean: Some(0.5),
                loss: Some(0.1),
                recorded_at: now,
                ..MetricRow::default()
            })
            .collect();
        service.put_metric_rows_as_given(run.id, &rows).await.unwrap();
        if run.state == RunState::Failed {
            std::fs::create_dir_all(&run.run_dir).unwrap();
            let log: String = (0..200).map(|i| format!("step {i} of a trainer's log line\n")).collect();
            std::fs::write(&stages[0].log_path, log).unwrap();
        }
    }
    let mut samples = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let cpu_before = process_cpu();
        let report = service.report(Duration::from_secs(12 * 3600)).await.unwrap();
        cpu.push(process_cpu() - cpu_before);
        samples.push(started.elapsed());
        assert_eq!(report.runs.len(), 1_000);
        assert_eq!(report.more_runs, window as i64 - 1_000);
    }
    samples.sort();
    cpu.sort();
    let started = std::time::Instant::now();
    home.cli_ok(&["report", "--json"]);
    eprintln!(
        "FIGURES report, {backend}, {window} runs in the window (1,000 listed): Service::report p50 {:?} \
         (max {:?}; CPU of this process p50 {:?}: the SQL of SQLite, the client's share of \
         PostgreSQL's), `lachesis report --json` {:?}",
        samples[2],
        samples[4],
        cpu[2],
        started.elapsed()
    );
}

/// The CPU time this process has used (every thread), for figures on a shared machine.
fn process_cpu() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given, and nothing else.
    let done = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    assert_eq!(done, 0, "clock_gettime: {}", std::io::Error::last_os_error());
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// A sweep the daemon ran to its end overnight (one member stopped by hyperband after 3 of the
/// 6 readings its siblings made): on every surface, its members by outcome, its best member
/// with value and parameters, and the member time early termination saved.
#[tokio::test]
async fn the_report_shows_each_sweep_its_best_member_and_what_early_termination_saved() {
    let mut home = home_with_workflows();
    let addr = format!("127.0.0.1:{}", free_port());
    home.environ.push(("LACHESIS_API_TOKEN".into(), TOKEN.into()));
    home.start_daemon_with(&["--listen", &addr]);
    let night = crate::sweeps::finished_sweep(&mut home).await;
    let stopped = home.run(night.members[2]).await;
    let ran = stopped.ended_at.unwrap() - stopped.started_at.unwrap();

    let check = |report: &Value| {
        assert_eq!(report["more_sweeps"], 0);
        let sweeps = report["sweeps"].as_array().unwrap();
        assert_eq!(sweeps.len(), 1, "{sweeps:#?}");
        let sweep = &sweeps[0];
        assert_eq!(sweep["id"], night.sweep.to_string());
        assert_eq!(
            (sweep["workflow"].as_str(), sweep["state"].as_str(), sweep["members"].as_u64()),
            (Some("gated"), Some("done"), Some(4))
        );
        assert_eq!(
            (sweep["metric"].as_str(), sweep["goal"].as_str()),
            (Some("train/loss"), Some("minimize"))
        );
        assert_eq!(
            sweep["outcomes"],
            json!({ "completed": 3, "early_terminated": 1, "failed": 0, "stopped": 0, "running": 0, "pending": 0 })
        );
        assert_eq!(
            sweep["best"],
            json!({ "k": 3, "run": night.members[3], "state": "completed", "value": 0.05, "parameters": { "lr": 0.4 } })
        );
        // The stopped member made 3 readings of the 6 a member makes: the 3 it did not make, at
        // its own pace, are what it ran again.
        assert_eq!(
            sweep["early_termination"],
            json!({ "members": 1, "run_ms": ran, "full_readings": 6, "saved_ms": ran }),
            "{sweep:#}"
        );
    };
    let report: Value = serde_json::from_str(&home.cli_ok(&["report", "--json"])).unwrap();
    check(&report);
    let text = home.cli_ok(&["report"]);
    eprintln!("lachesis report:\n{text}");
    let short = &night.sweep.to_string()[..8];
    let (_, sweeps) = text.split_once("\nSweeps:\n").unwrap_or_else(|| panic!("{text}"));
    let line = sweeps.lines().find(|l| l.trim_start().starts_with(short)).unwrap_or_else(|| panic!("{text}"));
    for says in [
        "gated",
        "done",
        "3 completed, 1 early-terminated",
        "member 3: train/loss 0.05 (lr=0.4)",
        "1 stopped after",
    ] {
        assert!(line.contains(says), "{says}: {line}");
    }
    assert!(line.contains("of member time saved"), "{line}");

    let http = lachesis::http_client::builder().build().unwrap();
    let base = format!("http://{addr}");
    let answer = http.get(format!("{base}/report")).bearer_auth(TOKEN).send().await.unwrap();
    check(&serde_json::from_str(&answer.text().await.unwrap()).unwrap());
    let page = http.get(format!("{base}/ui/report")).bearer_auth(TOKEN).send().await.unwrap();
    let html = page.text().await.unwrap();
    assert!(
        html.contains(&format!(
            "<tr data-sweep=\"{}\"><td><a href=\"/ui/sweeps/{}\">{short}</a>",
            night.sweep, night.sweep
        )),
        "{html}"
    );
    assert!(
        html.contains("3 completed, 1 early-terminated")
            && html.contains("member 3: train/loss 0.05 (lr=0.4)"),
        "{html}"
    );
}

/// A report lists 50 sweeps at most and says how many more there are; a sweep with no member
/// started yet is in it with its members pending.
#[tokio::test]
async fn a_report_lists_fifty_sweeps_and_counts_the_rest() {
    let mut home = home_with_workflows();
    let service = home.service().await;
    let file = "method: grid\nworkflow: demo-tune\nmetric: {name: reward, goal: maximize}\nparameters:\n  lr: {values: [0.1, 0.01]}\n";
    for _ in 0..51 {
        service.submit_sweep(file, None, Default::default()).await.unwrap();
    }
    let report = service.report(Duration::from_secs(12 * 3600)).await.unwrap();
    assert_eq!((report.sweeps.len(), report.more_sweeps), (50, 1));
    let sweep = &report.sweeps[0];
    assert_eq!((sweep.outcomes["pending"], sweep.best.as_ref()), (2, None));
    assert_eq!(sweep.members_line(), "2 pending");
    assert!(sweep.early_termination_line().is_none());
    let text = home.cli_ok(&["report"]);
    assert!(text.contains("… and 1 more sweeps (see `lachesis sweep list`)"), "{text}");
}
