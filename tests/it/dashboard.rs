//! The web dashboard in real headless Chromium (Debian's `chromium`), driven over the DevTools
//! protocol by `tests/python/dashboard_driver.py` (stdlib only): login, badges, live refresh
//! without reload, stage timeline, a log line written after the page opened, the regression
//! marker; screenshots of every page are kept under a temp dir whose path is printed.

use std::path::PathBuf;
use std::time::Duration;

use lachesis::model::{InferenceTest, Run, RunParams, RunState, TestTrigger, now_millis};
use serde_json::{Value, json};

use crate::support::{TestHome, wait_for};

const T: Duration = Duration::from_secs(30);
const TOKEN: &str = "dashboard-test-token";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Chromium, or None (saying so) when it is missing; `LACHESIS_REQUIRE_CHROMIUM=1` (set by
/// tests/run.sh once it is installed) turns the skip into a failure.
pub fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join("chromium")).find(|p| p.exists()));
    if found.is_none() {
        assert!(
            std::env::var_os("LACHESIS_REQUIRE_CHROMIUM").is_none(),
            "chromium is required (apt-get install chromium)"
        );
        eprintln!("skipped: no chromium on PATH (tests/run.sh installs it)");
    }
    found
}

/// A directory that outlives the test, for its screenshots.
pub fn screenshot_dir() -> PathBuf {
    let dir = tempfile::Builder::new().prefix("lachesis-dashboard-").tempdir().unwrap().keep();
    eprintln!("dashboard screenshots: {}", dir.display());
    dir
}

/// Runs the driver with `plan` and returns its report.
pub fn drive(plan: &Value) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.json");
    std::fs::write(&plan_path, plan.to_string()).unwrap();
    let python = std::env::var("LACHESIS_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/dashboard_driver.py");
    let out = std::process::Command::new(python).arg(script).arg(&plan_path).output().unwrap();
    assert!(out.status.success(), "driver failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn serve(home: &mut TestHome, extra: &[&str]) -> String {
    let addr = format!("127.0.0.1:{}", free_port());
    home.environ.push(("LACHESIS_API_TOKEN".into(), TOKEN.into()));
    let mut args = vec!["--listen", &addr];
    args.extend_from_slice(extra);
    home.start_daemon_with(&args);
    let url = format!("http://{addr}/health");
    wait_for("the API to answer", T, || {
        let url = url.clone();
        async move { http_get(url).await.ok().map(drop) }
    })
    .await;
    format!("http://{addr}")
}

fn model_result(model: &str, accuracy: f64) -> Value {
    json!({ "model": model, "output_file": "/dev/null", "steps_tested": 2, "total_completions": 8,
        "correct_completions": (accuracy * 8.0) as u64, "accuracy": accuracy, "steps_with_correct": 2,
        "step_success_rate": 1.0, "error": null,
        "steps": [{ "step": 1, "completions": 4, "correct": 3, "scores": [1.0, 1.0, 1.0, 0.0], "mean_score": 0.75 },
                  { "step": 2, "completions": 4, "correct": 2, "scores": [1.0, 1.0, 0.0, 0.0], "mean_score": accuracy }] })
}

/// The schedule `nightly` (03:00, so never due in a test) of model m1 on `arith`, at a provider
/// nobody serves: its tests are written by the test itself.
pub fn add_nightly_schedule(home: &mut TestHome) {
    home.cli_ok(&[
        "schedule",
        "add",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--env",
        "arith",
        "--provider",
        "http://127.0.0.1:9/v1",
        "--models",
        "m1",
    ]);
}

/// A schedule with five succeeded tests at 0.8 and a sixth that regressed to 0.4, written
/// before the daemon starts (its 03:00 cron is not due during the test).
async fn regressed_schedule(home: &mut TestHome) {
    add_nightly_schedule(home);
    let service = home.service().await;
    let schedule = service.schedules().await.unwrap().remove(0);
    let hour = 3_600_000;
    for i in 0..6 {
        let mut test = InferenceTest::queued(
            uuid::Uuid::new_v4(),
            schedule.spec.clone(),
            Some(schedule.id),
            &home.path().join("tests"),
        );
        test.created_at = now_millis() - (6 - i) * hour;
        service.insert_test_as_given(&test, &test.pending_tasks()).await.unwrap();
        let running = service.move_test(&test, TestTrigger::Claim, None, None).await.unwrap();
        if i < 5 {
            let results = json!({ "models": [model_result("m1", 0.8)] });
            service
                .move_test(
                    &running,
                    TestTrigger::Succeed,
                    Some("1 of 1 models produced results"),
                    Some(&results),
                )
                .await
                .unwrap();
        } else {
            let results = json!({ "models": [model_result("m1", 0.4)], "regressions": [
                { "model": "m1", "baseline": 0.8, "current": 0.4, "reason": "accuracy 0.400 is 0.400 below the baseline 0.800" }] });
            service
                .move_test(&running, TestTrigger::Regress, Some("m1 regressed"), Some(&results))
                .await
                .unwrap();
        }
    }
}

#[tokio::test]
async fn the_dashboard_shows_runs_timelines_live_logs_and_regressions_behind_the_token() {
    if chromium().is_none() {
        return;
    }
    let mut home = TestHome::new();
    home.environ.push(("LACHESIS_ENV_DIRS".into(), crate::atropos::envs_dir().display().to_string()));
    home.environ.push(("LACHESIS_PYTHON".into(), "false".into()));
    home.workflow("ok", "name: ok\nstages:\n  - {name: main, argv: [sh, -c, \"echo finished; exit 0\"]}\n");
    home.workflow(
        "bad",
        "name: bad\nstages:\n  - {name: main, argv: [sh, -c, \"echo broken >&2; exit 3\"]}\n",
    );
    home.workflow(
        "long",
        "name: long\nstages:\n  - name: api\n    argv: [sh, -c, \"echo api listening; exec sleep 600\"]\n    start_delay: 100ms\n  \
         - name: trainer\n    argv: [sh, -c, \"i=0; while :; do i=$((i+1)); echo Step $i/1000; sleep 0.4; done\"]\n\
         completion: {stages: [trainer]}\nstop_grace: 2s\n\
         progress:\n  log: {stage: trainer, pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}\n",
    );
    regressed_schedule(&mut home).await;
    let base = serve(&mut home, &[]).await;
    let completed = home.submit(&["--workflow", "ok"]);
    let failed = home.submit(&["--workflow", "bad"]);
    let running = home.submit(&["--workflow", "long"]);
    home.wait_state(completed, RunState::Completed, T).await;
    home.wait_state(failed, RunState::Failed, T).await;
    home.wait_state(running, RunState::Running, T).await;
    let log_path = home.stages(running).await[1].log_path.clone();
    wait_for("the trainer's first line", T, || {
        let log_path = log_path.clone();
        async move { std::fs::read_to_string(&log_path).ok().filter(|t| t.contains("Step 2/1000")).map(drop) }
    })
    .await;

    // The JSON API still wants the bearer token; the pages answer with the login prompt.
    let anonymous = http_get(format!("{base}/runs")).await.unwrap();
    assert_eq!(anonymous.status(), reqwest::StatusCode::UNAUTHORIZED);
    let page = http_get(format!("{base}/ui/runs/{running}")).await.unwrap();
    assert_eq!(page.status(), reqwest::StatusCode::UNAUTHORIZED);
    let text = page.text().await.unwrap();
    assert!(text.contains("Sign in") && !text.contains(&running.to_string()[..8]), "{text}");

    for page in ["/ui/runs", "/ui/schedules", "/ui/tests", "/ui/nodes"] {
        let started = std::time::Instant::now();
        let answer = lachesis::http_client::builder()
            .build()
            .unwrap()
            .get(format!("{base}{page}"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        eprintln!("{page}: {} in {:?}", answer.status(), started.elapsed());
    }
    let out = screenshot_dir();
    let report = drive(&json!({
        "mode": "check", "base": base, "token": TOKEN, "out": out,
        "run_ids": [completed, failed, running], "running": running, "failed": failed,
        "log_path": log_path, "log_tab": 1, "log_opening": "Step 1/1000", "live_workflow": "ok",
    }));
    eprintln!("dashboard report: {report:#}");
    assert_eq!(report["anonymous_login"], true);
    assert_eq!(report["anonymous_leaks"], json!([]));
    let rows = &report["rows"];
    assert_eq!(rows[completed.to_string()], "completed");
    assert_eq!(rows[failed.to_string()], "failed");
    assert_eq!(rows[running.to_string()], "running");
    assert_eq!(report["live_without_reload"], true, "the new run's row came by a reload");
    let (first, later) = (&report["progress_first"], &report["progress_later"]);
    assert!(first.as_f64().unwrap() > 0.0, "the running run shows its progress: {report}");
    assert!(later.as_f64().unwrap() > first.as_f64().unwrap(), "{report}");
    assert_eq!(report["progress_without_reload"], true, "the progress bar advanced by a reload");
    assert!(report["step_chart_series"].as_u64().unwrap() >= 1, "a step chart is drawn: {report}");
    assert_eq!(report["stages"], 2);
    assert_eq!(report["stage_bars"], 2, "one bar per started stage");
    assert_eq!(report["failed_stage_bars"], 1);
    assert!(report["log_delay_ms"].as_u64().unwrap() < 2_000, "{report}");
    let regression = &report["regression"];
    assert!(
        regression["marker_y"].as_f64().unwrap() > regression["baseline_y"].as_f64().unwrap(),
        "the regression marker is below the baseline (SVG y grows downwards): {regression}"
    );
    assert_eq!(report["accuracy_bars"], 1);
    // Actions: POST forms with the cookie only, from the same origin; re-queue makes a new run.
    let http = lachesis::http_client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let post = |path: &str, cookie: Option<&str>, origin: Option<&str>| {
        let mut request = http.post(format!("{base}{path}"));
        if let Some(cookie) = cookie {
            request = request.header("cookie", format!("lachesis_token={cookie}"));
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    let requeue = format!("/ui/runs/{failed}/requeue");
    let refused = post(&requeue, Some("wrong"), None).await.unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::UNAUTHORIZED);
    assert!(refused.text().await.unwrap().contains("Sign in"));
    let cross = post(&requeue, Some(TOKEN), Some("http://elsewhere.example")).await.unwrap();
    assert_eq!(cross.status(), reqwest::StatusCode::FORBIDDEN);
    let moved = post(&requeue, Some(TOKEN), Some(&base)).await.unwrap();
    assert_eq!(moved.status(), reqwest::StatusCode::SEE_OTHER);
    let location = moved.headers()["location"].to_str().unwrap().to_string();
    let again = uuid::Uuid::parse_str(location.strip_prefix("/ui/runs/").unwrap()).unwrap();
    assert_ne!(again, failed);
    assert_eq!(home.run(again).await.workflow, "bad");
    let paused = post("/ui/schedules/nightly/pause", Some(TOKEN), None).await.unwrap();
    assert_eq!(paused.status(), reqwest::StatusCode::SEE_OTHER);
    assert!(home.service().await.schedules().await.unwrap()[0].paused);
    let login_with = |token: &str| {
        http.post(format!("{base}/ui/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
    };
    assert_eq!(login_with("wrong").await.unwrap().status(), reqwest::StatusCode::UNAUTHORIZED);
    let login = login_with(TOKEN).await.unwrap();
    let cookie = login.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");

    for key in ["login", "runs", "run", "failed_run", "schedules", "tests", "nodes"] {
        let path = report[format!("screenshot_{key}")].as_str().unwrap();
        assert!(std::fs::metadata(path).unwrap().len() > 1_000, "{path}");
        eprintln!("screenshot: {path}");
    }
}

#[tokio::test]
async fn the_nodes_page_on_postgres_lists_each_node_with_its_labels_and_runs() {
    if chromium().is_none() {
        return;
    }
    let Some(url) = crate::support::fresh_postgres().await else { return };
    let mut home = TestHome::new();
    home.database_url = Some(url);
    home.workflow(
        "long",
        "name: long\nstages:\n  - {name: main, argv: [sh, -c, \"exec sleep 600\"]}\nstop_grace: 1s\n",
    );
    let base = serve(&mut home, &["--label", "gpu=a100"]).await;
    let id = home.submit(&["--workflow", "long"]);
    home.wait_state(id, RunState::Running, T).await;
    // A run pinned to labels no node has waits in the queue, saying for what.
    home.workflow(
        "nowhere",
        "name: nowhere\nnode_labels: {gpu: b200}\nstages:\n  - {name: main, argv: [\"true\"]}\n",
    );
    let waiting = home.submit(&["--workflow", "nowhere"]);
    let out = screenshot_dir();
    let report = drive(&json!({ "mode": "screens", "base": base, "token": TOKEN, "out": out,
        "pages": { "nodes-postgres": "/ui/nodes", "runs-queue": "/ui/runs" } }));
    let queue = report["runs-queue"]["text"].as_str().unwrap();
    eprintln!("screenshot: {}", report["runs-queue"]["screenshot"]);
    assert!(queue.contains("Queue (1)") && queue.contains(&waiting.to_string()[..8]), "{queue}");
    assert!(queue.contains("a node labelled gpu=b200"), "{queue}");
    let page = &report["nodes-postgres"];
    eprintln!("screenshot: {}", page["screenshot"]);
    let text = page["text"].as_str().unwrap();
    let node = lachesis::daemon::hostname();
    assert!(text.contains(&node) && text.contains("up") && text.contains("gpu=a100"), "{text}");
    assert!(text.contains(&id.to_string()[..8]), "the node holds the running run: {text}");
}

/// Figures: the runs page with 1,000 runs (time to first byte and full load in Chromium, median
/// of 5). Asserts a loose bound; the figures are printed.
#[tokio::test]
async fn the_runs_page_with_a_thousand_runs_loads_within_the_figures() {
    if chromium().is_none() {
        return;
    }
    let mut home = TestHome::new();
    home.workflow("ok", "name: ok\nstages:\n  - {name: main, argv: [sh, -c, \"exit 0\"]}\n");
    let spec = home.settings().catalog().unwrap().load("ok").unwrap();
    let service = home.service().await;
    let now = now_millis();
    for i in 0..1_000 {
        let id = uuid::Uuid::new_v4();
        let mut run = Run::queued(id, spec.clone(), home.settings().run_dir(&id), 0, RunParams::default());
        run.state = if i % 10 == 0 { RunState::Failed } else { RunState::Completed };
        run.started_at = Some(now - 60_000 - i);
        run.ended_at = Some(now - i);
        run.reason = Some("stage 'main' exited with code 0".into());
        let stages = run.pending_stages();
        service.insert_runs_as_given(&[(run, stages)]).await.unwrap();
    }
    let base = serve(&mut home, &[]).await;
    let out = screenshot_dir();
    let report = drive(&json!({ "mode": "bench", "base": base, "token": TOKEN, "out": out, "rounds": 5 }));
    eprintln!(
        "FIGURES runs page, 1000 runs: time to first byte {} ms, full load {} ms ({} rows); screenshot {}",
        report["ttfb_ms"], report["load_ms"], report["rows"], report["screenshot_runs_1000"]
    );
    eprintln!("samples: {}", report["samples"]);
    // Paged: the first 100 of the 1,000, with a link to the next page.
    assert_eq!(report["rows"], 100);
    assert_eq!(report["next_page"], true, "{report}");
    assert!(report["load_ms"].as_f64().unwrap() < 2_000.0, "{report}");
}

/// A plain GET, as `reqwest::get` sends it, from a client made the way lachesis makes its own
/// (which installs the TLS provider first).
async fn http_get(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::Response> {
    lachesis::http_client::builder().build()?.get(url).send().await
}

/// What the sweep page's probe reads in the browser: the leaderboard's rows, and of the chart
/// each member's line (where it ends, its dash and width as laid out), the stop markers'
/// centres, the winner's marker and the legend's colours.
const SWEEP_PROBE: &str = r#"(() => {
  const svg = document.querySelector('svg.chart.members');
  if (!svg) return null;
  const centre = el => { const b = el.getBBox(); return {x: b.x + b.width / 2, y: b.y + b.height / 2}; };
  const lines = Object.fromEntries([...svg.querySelectorAll('path.member')].map(p => {
    const end = p.getPointAtLength(p.getTotalLength()), style = getComputedStyle(p);
    return [p.dataset.k, {x: end.x, y: end.y, dash: style.strokeDasharray, width: parseFloat(style.strokeWidth),
                          colour: p.getAttribute('stroke')}];
  }));
  return {
    rows: [...document.querySelectorAll('#leaderboard tbody tr')].map(r =>
      ({k: r.dataset.k, state: r.dataset.state, class: r.className, link: r.querySelector('a').getAttribute('href')})),
    lines,
    stops: [...svg.querySelectorAll('path.stop-marker')].map(m => Object.assign({k: m.dataset.k}, centre(m))),
    winner: [...svg.querySelectorAll('circle.winner-marker')].map(m => m.dataset.k),
    keys: [...svg.querySelectorAll('g.key[data-k]')].map(g => ({k: g.dataset.k, colour: g.querySelector('text').getAttribute('fill')})),
    width: svg.getBoundingClientRect().width,
  };
})()"#;

/// The bundled demo sweep run for real (its stand-in trainer's log read into metrics, the
/// daemon's hyperband stopping the worst learning rate), then its page in Chromium: the
/// leaderboard in order with the winner and the stopped member marked, and the chart with a
/// line per member, the stopped ones dashed with a cross where their line ends.
#[tokio::test]
async fn the_sweep_page_draws_the_demo_sweep_with_its_stopped_member_marked() {
    if chromium().is_none() {
        return;
    }
    let mut home = TestHome::new();
    let base = serve(&mut home, &[]).await;
    let out: Value = serde_json::from_str(&home.cli_ok(&["sweep", "start", "demo-sweep", "--json"])).unwrap();
    let sweep = out["id"].as_str().unwrap().to_string();
    let members: Vec<uuid::Uuid> =
        out["members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().parse().unwrap()).collect();
    for id in &members {
        home.wait_settled(*id, Duration::from_secs(90)).await;
    }
    let service = home.service().await;
    let board = wait_for("the sweep to be done", T, || {
        let (service, sweep) = (service.clone(), sweep.clone());
        async move {
            let board = service.sweep_status(&sweep).await.unwrap();
            (board.sweep.state == lachesis::model::sweep::SweepState::Done).then_some(board)
        }
    })
    .await;
    // lr 1.0 (member 5) earns the least reward and is stopped; lr 1e-3 (member 2) wins.
    assert_eq!(board.winner, Some(2), "{board:?}");
    let stopped: Vec<String> =
        board.leaderboard.iter().filter(|m| m.early_terminated).map(|m| m.k.to_string()).collect();
    assert!(stopped.contains(&"5".to_string()), "{board:?}");

    let shots = screenshot_dir();
    let report = drive(&json!({ "mode": "screens", "base": base, "token": TOKEN, "out": shots,
        "pages": { "sweep": format!("/ui/sweeps/{sweep}"), "sweeps": "/ui/sweeps" },
        "probes": { "sweep": SWEEP_PROBE } }));
    eprintln!("screenshots: {} {}", report["sweep"]["screenshot"], report["sweeps"]["screenshot"]);
    let probe = &report["sweep"]["probe"];
    eprintln!("sweep page probe: {probe:#}");
    let text = report["sweep"]["text"].as_str().unwrap();
    assert!(text.contains("★ winner") && text.contains("early-terminated by sweep"), "{text}");
    assert!(report["sweeps"]["text"].as_str().unwrap().contains(&sweep[..8]));

    // The leaderboard: six rows, best first, each linking its run; the winner and the stopped
    // members marked.
    let rows = probe["rows"].as_array().unwrap();
    let order: Vec<String> = board.leaderboard.iter().map(|m| m.k.to_string()).collect();
    assert_eq!(rows.iter().map(|r| r["k"].as_str().unwrap().to_string()).collect::<Vec<_>>(), order);
    assert_eq!(rows[0]["k"], "2");
    assert!(rows[0]["class"].as_str().unwrap().contains("winner"), "{probe:#}");
    for row in rows {
        let k: u64 = row["k"].as_str().unwrap().parse().unwrap();
        assert_eq!(row["link"], format!("/ui/runs/{}", members[k as usize]));
        let marked = row["class"].as_str().unwrap().contains("early-terminated");
        assert_eq!(marked, stopped.contains(&k.to_string()), "member {k}: {probe:#}");
    }
    // The chart: a line per member; each stopped one dashed and crossed where its line ends;
    // the winner's line the thickest, its best point marked; a colour per member in the legend.
    let lines = probe["lines"].as_object().unwrap();
    assert_eq!(lines.len(), 6, "{probe:#}");
    let stops = probe["stops"].as_array().unwrap();
    assert_eq!(
        stops.iter().map(|s| s["k"].as_str().unwrap().to_string()).collect::<std::collections::BTreeSet<_>>(),
        stopped.iter().cloned().collect(),
        "{probe:#}"
    );
    for stop in stops {
        let line = &lines[stop["k"].as_str().unwrap()];
        let (dx, dy) = (
            stop["x"].as_f64().unwrap() - line["x"].as_f64().unwrap(),
            stop["y"].as_f64().unwrap() - line["y"].as_f64().unwrap(),
        );
        assert!(dx.abs() < 1.0 && dy.abs() < 1.0, "the cross sits where the line ends: {stop} {line}");
        assert_ne!(line["dash"], "none", "a stopped member's line is dashed: {line}");
    }
    for (k, line) in lines {
        if !stopped.contains(k) {
            assert_eq!(line["dash"], "none", "member {k}: {line}");
        }
    }
    let widest = lines
        .iter()
        .max_by(|a, b| a.1["width"].as_f64().partial_cmp(&b.1["width"].as_f64()).unwrap())
        .unwrap();
    assert_eq!(widest.0, "2", "the winner's line is the thickest: {probe:#}");
    assert_eq!(probe["winner"], json!(["2"]));
    let keys = probe["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 6);
    let colours: std::collections::BTreeSet<&str> =
        keys.iter().map(|k| k["colour"].as_str().unwrap()).collect();
    assert_eq!(colours.len(), 6, "a colour per member: {keys:?}");
    for key in keys {
        assert_eq!(
            lines[key["k"].as_str().unwrap()]["colour"],
            key["colour"],
            "the key is its line's colour"
        );
    }
    assert!(probe["width"].as_f64().unwrap() > 300.0, "{probe:#}");
}
