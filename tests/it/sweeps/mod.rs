//! Sweeps: a sweep file's members queued as ordinary runs with the right parameters, max_live
//! held at the claim, a seeded random sweep reproduced, bad files (an unused parameter, a grid
//! cut by run_cap without saying so, a metric the workflow never reports, …) refused in one
//! line with nothing queued, a sweep stopped, a metric written as text said, and the daemon's
//! decisions (hyperband's stop with its exact reason, the target's end of new members) made
//! once, as readings land from a stage's log or W&B.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use lachesis::model::MetricPoint;
use lachesis::model::sweep::SweepState;
use lachesis::model::{Millis, RunState};
use lachesis::service::{MetricSeries, Service, SweepDecider, SweepDecision};
use uuid::Uuid;

use crate::support::{TestHome, stderr, wait_for};

mod decisions;
// The finished sweep the dashboard and the report tests look at.
pub(crate) use decisions::{FinishedSweep, finished_sweep};
mod program;

const T: Duration = Duration::from_secs(30);

/// A member that runs until the test creates its home's `gate` file, then prints its values.
/// Its metrics file is never written: readings come from the test.
fn gated(home: &TestHome) -> String {
    let gate = home.path().join("gate");
    format!(
        r#"name: gated
vars: {{lr: "0.1", size: "1", steps: "3"}}
stages:
  - name: trainer
    argv: [sh, -c, "while [ ! -e '{}' ]; do sleep 0.05; done; echo lr={{lr}} size={{size}}"]
metrics:
  jsonl: {{file: metrics.jsonl, step: /step}}
stop_grace: 2s
"#,
        gate.display()
    )
}

fn write(home: &TestHome, name: &str, text: &str) -> String {
    let path = home.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// Starts a sweep through the CLI: its id and members, in order of k.
fn start(home: &TestHome, file: &str) -> (Uuid, Vec<Uuid>) {
    home.start_sweep(file)
}

#[tokio::test]
async fn a_grid_sweep_queues_one_member_per_point_with_its_vars() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let file = write(
        &home,
        "grid.yaml",
        "method: grid\nworkflow: gated\nmetric: {name: loss}\nparameters:\n  size: {values: [1, 2]}\n  lr: {values: [0.00001, 0.1]}\n",
    );
    let (sweep, members) = start(&home, &file);
    assert_eq!(members.len(), 4);
    // W&B's order: parameters by name (lr, size), the last varying fastest; floats as Python
    // writes them.
    let expected = [("1e-05", "1"), ("1e-05", "2"), ("0.1", "1"), ("0.1", "2")];
    for (k, (id, (lr, size))) in members.iter().zip(expected).enumerate() {
        let run = home.run(*id).await;
        assert_eq!(run.state, RunState::Pending);
        assert_eq!(
            (run.params.vars["lr"].as_str(), run.params.vars["size"].as_str()),
            (lr, size),
            "member {k}"
        );
        assert_eq!(run.params.sweep.map(|m| (m.sweep, m.k)), Some((sweep, k as u64)));
    }
    let status = home.cli_ok(&["run", "status", &members[3].to_string()]);
    let short = &sweep.to_string()[..8];
    assert!(status.contains(&format!("sweep     member 3 of sweep {short}")), "{status}");
    let board: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "status", short, "--json"])).unwrap();
    assert_eq!(board["state"], "live");
    assert_eq!(board["counts"]["pending"], 4);
    assert_eq!(board["leaderboard"][2]["parameters"], serde_json::json!({"lr": 0.1, "size": 1}));
    let list = home.cli_ok(&["sweep", "list"]);
    assert!(list.contains(short) && list.contains("gated"), "{list}");
}

#[tokio::test]
async fn a_random_sweep_with_a_seed_is_reproducible() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let sweep = |seed: u64| {
        format!(
            "method: random\nworkflow: gated\nrun_cap: 5\nseed: {seed}\nparameters:\n  lr: {{distribution: log_uniform_values, min: 0.00001, max: 0.1}}\n  size: {{values: [8, 16, 32]}}\n"
        )
    };
    let mut drawn = Vec::new();
    for (name, seed) in [("a.yaml", 7), ("b.yaml", 7), ("c.yaml", 8)] {
        let (_, members) = start(&home, &write(&home, name, &sweep(seed)));
        let mut vars = Vec::new();
        for id in members {
            vars.push(home.run(id).await.params.vars);
        }
        drawn.push(vars);
    }
    assert_eq!(drawn[0], drawn[1], "the same seed draws the same members");
    assert_ne!(drawn[0], drawn[2], "another seed draws others");
    let distinct: std::collections::BTreeSet<&String> = drawn[0].iter().map(|v| &v["lr"]).collect();
    assert!(distinct.len() > 1, "members differ: {:?}", drawn[0]);
}

#[tokio::test]
async fn a_parameter_the_workflow_never_uses_is_refused_and_nothing_is_queued() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let file = write(
        &home,
        "bad.yaml",
        "method: grid\nworkflow: gated\nparameters:\n  lr: {values: [0.1]}\n  warmup: {values: [1, 2]}\n",
    );
    let out = home.cli(&["sweep", "start", &file]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("parameters.warmup") && err.contains("has no variable 'warmup'"), "{err}");
    // A `set:` parameter on a workflow that runs no environment is refused too.
    let set = write(
        &home,
        "set.yaml",
        "method: grid\nworkflow: gated\nparameters:\n  group: {values: [4, 8], set: group_size}\n",
    );
    let err = stderr(&home.cli(&["sweep", "start", &set]));
    assert!(err.contains("parameters.group") && err.contains("runs no environment"), "{err}");
    assert!(home.cli_ok(&["sweep", "list"]).contains("no sweeps"));
    assert!(home.cli_ok(&["run", "list"]).contains("no runs"));
    // A bad file is one line, too.
    let bayes = write(
        &home,
        "bayes.yaml",
        "method: bayes\nworkflow: gated\nmetric: {name: loss}\nrun_cap: 4\nparameters: {lr: {values: [{a: 1}]}}\n",
    );
    let err = stderr(&home.cli(&["sweep", "start", &bayes]));
    assert!(
        err.contains("is a mapping, which bayes cannot place") && err.trim().lines().count() == 1,
        "{err}"
    );
    let _ = home.service().await;
}

/// The members in flight now.
async fn in_flight(service: &Service, members: &[Uuid]) -> Vec<Uuid> {
    let mut live = Vec::new();
    for id in members {
        if service.run(*id).await.unwrap().unwrap().state.is_in_flight() {
            live.push(*id);
        }
    }
    live
}

#[tokio::test]
async fn max_live_holds_and_a_stopped_sweep_starts_nothing_more() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    home.workflow("quick", "name: quick\nstages:\n  - {name: main, argv: ['true']}\n");
    let file = write(
        &home,
        "live.yaml",
        "method: grid\nworkflow: gated\nmax_live: 2\nparameters:\n  lr: {values: [0.1, 0.2, 0.3, 0.4, 0.5]}\n",
    );
    let (sweep, members) = start(&home, &file);
    home.start_daemon();
    let service = home.service().await;
    wait_for("two members running", T, || {
        let service = service.clone();
        let members = members.clone();
        async move {
            let mut running = 0;
            for id in &members {
                running += (service.run(*id).await.unwrap().unwrap().state == RunState::Running) as usize;
            }
            (running == 2).then_some(())
        }
    })
    .await;
    // A run queued after them is claimed: the claim that took it passed the sweep's other
    // members by, with 8 slots free.
    let other = home.submit(&["--workflow", "quick"]);
    let (run, _) = home.wait_settled(other, T).await;
    assert_eq!(run.state, RunState::Completed);
    assert_eq!(in_flight(&service, &members).await.len(), 2, "max_live 2 holds");

    home.cli_ok(&["sweep", "stop", &sweep.to_string()]);
    for id in &members {
        let (run, _) = home.wait_settled(*id, T).await;
        assert_eq!(run.state, RunState::Stopped, "member {id}: {:?}", run.reason);
    }
    let board = service.sweep_status(&sweep.to_string()).await.unwrap();
    assert_eq!(board.sweep.state, SweepState::Stopped);
    assert_eq!(board.counts.get(lachesis::model::RunState::Stopped), 5);
    let cancelled = members.iter().filter(|id| {
        board
            .leaderboard
            .iter()
            .any(|m| m.run == **id && m.reason.as_deref() == Some("cancelled before it started"))
    });
    assert_eq!(cancelled.count(), 3, "the three that never started were cancelled: {:?}", board.leaderboard);
    // Every member has ended: --watch shows the board once and returns.
    let watched = home.cli_ok(&["sweep", "status", &sweep.to_string(), "--watch", "--json"]);
    assert_eq!(watched.lines().count(), 1, "{watched}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&watched).unwrap()["state"], "stopped");
}

#[tokio::test]
async fn sweeps_over_http_start_list_show_and_stop() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let api = crate::http::start_with(&mut home, "127.0.0.1", None, &[]).await;
    let object = serde_json::json!({
        "method": "grid", "workflow": "gated", "max_live": 1,
        "metric": {"name": "loss"}, "parameters": {"lr": {"values": [0.1, 0.2]}},
    });
    let (status, started) = api.post("/sweeps", object).await;
    assert_eq!(status.as_u16(), 201, "{started}");
    assert_eq!(started["members"].as_array().map(Vec::len), Some(2));
    let id = started["id"].as_str().unwrap().to_string();
    let yaml = "method: random\nworkflow: gated\nrun_cap: 3\nparameters:\n  lr: {min: 0.1, max: 0.2}\n";
    let (status, second) = api.post("/sweeps", serde_json::json!(yaml)).await;
    assert_eq!(status.as_u16(), 201, "{second}");
    let (status, listed) = api.get("/sweeps").await;
    assert_eq!(status.as_u16(), 200);
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
    let (status, board) = api.get(&format!("/sweeps/{}", &id[..8])).await;
    assert_eq!(status.as_u16(), 200);
    assert_eq!((board["metric"].as_str(), board["goal"].as_str()), (Some("loss"), Some("minimize")));
    assert_eq!(board["leaderboard"].as_array().map(Vec::len), Some(2), "{board}");
    let (status, refused) = api.post("/sweeps", serde_json::json!("method: bayes\nworkflow: gated\n")).await;
    assert_eq!(status.as_u16(), 400, "{refused}");
    assert!(refused.to_string().contains("parameters: missing"), "{refused}");
    let (status, _) = api.get("/sweeps/ffffffff").await;
    assert_eq!(status.as_u16(), 404);
    let (status, stopped) = api.post(&format!("/sweeps/{id}/stop"), serde_json::json!(null)).await;
    assert_eq!(status.as_u16(), 200, "{stopped}");
    assert_eq!(stopped["state"], "stopped");
}

/// The dashboard's sweep pages over HTTP, behind the token: the list, the leaderboard with the
/// winner and the early-terminated member's band, the chart with every member's curve and a
/// cross where the stopped one was stopped; linked from the navigation and a member's page.
#[tokio::test]
async fn the_dashboard_shows_a_sweeps_leaderboard_and_every_members_curve() {
    let mut home = TestHome::new();
    let api = crate::http::start_with(&mut home, "127.0.0.1", None, &[]).await;
    let FinishedSweep { sweep, members, reason } = finished_sweep(&mut home).await;
    let short = &sweep.to_string()[..8];
    let html = |answer: (reqwest::StatusCode, serde_json::Value)| -> (u16, String) {
        (answer.0.as_u16(), answer.1.as_str().map(str::to_string).unwrap_or_else(|| answer.1.to_string()))
    };

    let (status, list) = html(api.get("/ui/sweeps").await);
    assert_eq!(status, 200, "{list}");
    assert!(list.contains("href=\"/ui/sweeps\" class=\"active\""), "the navigation links it: {list}");
    assert!(
        list.contains(&format!("<tr data-sweep=\"{sweep}\"><td><a href=\"/ui/sweeps/{sweep}\">{short}</a>")),
        "{list}"
    );
    assert!(list.contains("badge ok\">done") && list.contains("4 (3 completed, 1 stopped)"), "{list}");

    let (status, page) = html(api.get(&format!("/ui/sweeps/{short}")).await);
    assert_eq!(status, 200, "{page}");
    // The leaderboard: best first, the winner marked, every member linked to its run.
    let rows: Vec<&str> = page.split("<tr data-k=\"").skip(1).collect();
    let order: Vec<&str> = rows.iter().map(|r| &r[..1]).collect();
    assert_eq!(order, vec!["3", "1", "0", "2"], "{page}");
    assert!(rows[0].contains("class=\"winner\"") && rows[0].contains("★ winner"), "{}", rows[0]);
    assert!(rows[0].contains("<td class=\"best\">0.05</td>"), "{}", rows[0]);
    assert!(rows[3].contains("class=\"early-terminated\"") && rows[3].contains(&reason), "{}", rows[3]);
    assert!(reason.contains("band-2 threshold"), "the band it was stopped at: {reason}");
    for (k, id) in members.iter().enumerate() {
        let row = rows.iter().find(|r| r.starts_with(&k.to_string())).unwrap();
        assert!(row.contains(&format!("href=\"/ui/runs/{id}\"")), "member {k}: {row}");
        assert!(row.contains(&format!("<td class=\"parameter\">0.{}</td>", k + 1)), "member {k}: {row}");
    }
    // The chart: a curve per member, the stopped one dashed and crossed at its last reading,
    // the winner's best point marked, a legend entry per member.
    let chart = &page[page.find("<svg class=\"chart members\"").expect("a chart")..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    assert_eq!(chart.matches("<path class=\"member").count(), 4, "{chart}");
    assert!(chart.contains("class=\"member stopped\" data-k=\"2\""), "{chart}");
    assert!(chart.contains("class=\"member winner\" data-k=\"3\""), "{chart}");
    assert!(chart.contains("class=\"stop-marker\" data-k=\"2\" data-step=\"3\""), "{chart}");
    assert!(chart.contains("class=\"winner-marker\" data-k=\"3\""), "{chart}");
    for k in 0..4 {
        assert!(chart.contains(&format!("<g class=\"key\" data-k=\"{k}\">")), "member {k}: {chart}");
    }

    // A member's run page links its sweep.
    let (_, run_page) = html(api.get(&format!("/ui/runs/{}", members[2])).await);
    assert!(
        run_page.contains(&format!("member 2 of <a href=\"/ui/sweeps/{sweep}\">sweep {short}</a>")),
        "{run_page}"
    );
    // No sweep, no page; no token, no data.
    let (status, missing) = html(api.get("/ui/sweeps/ffffffff").await);
    assert_eq!(status, 404);
    assert!(missing.starts_with("<!doctype html>"), "a page, in the page frame: {missing}");
    assert!(missing.contains("<p class=\"error\">no sweep matches &#39;ffffffff&#39;</p>"), "{missing}");
    let anonymous = lachesis::http_client::builder().build().unwrap();
    let answer = anonymous.get(format!("{}/ui/sweeps/{sweep}", api.base())).send().await.unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::UNAUTHORIZED);
    let text = answer.text().await.unwrap();
    assert!(text.contains("Sign in") && !text.contains(short), "{text}");
}

/// Each file a user could get wrong is refused in one line through the CLI, and nothing of it
/// is queued: W&B's format broken, a grid cut by `run_cap` without saying so, a metric the
/// workflow can never report.
#[tokio::test]
async fn bad_sweeps_get_one_line_and_queue_nothing() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    home.workflow("quiet", "name: quiet\nvars: {lr: '0.1'}\nstages:\n  - {name: main, argv: ['true']}\n");
    home.workflow(
        "patterned",
        "name: patterned\nvars: {lr: '0.1'}\nstages:\n  - {name: main, argv: ['true']}\n\
         metrics:\n  log: {stage: main, pattern: 'step (?P<step>\\d+) reward=(?P<reward>\\S+)'}\n",
    );
    let grid = "parameters:\n  lr: {values: [0.1, 0.2, 0.3]}\n";
    let table = [
        (
            format!("method: hill\nworkflow: gated\n{grid}"),
            "method: unknown method 'hill' (expected grid, random, bayes or pbt)",
        ),
        (
            "method: random\nworkflow: gated\nrun_cap: 2\nparameters:\n  lr: {distribution: lognormal}\n"
                .into(),
            "parameters.lr: unknown distribution 'lognormal'",
        ),
        (
            "method: random\nworkflow: gated\nrun_cap: 2\nparameters:\n  lr: {min: 0.2, max: 0.1}\n".into(),
            "parameters.lr: min 0.2 is not below max 0.1",
        ),
        (
            format!(
                "method: grid\nworkflow: gated\nmetric: {{name: loss}}\n\
                 early_terminate: {{type: hyperband, min_iter: 3, eta: 1}}\n{grid}"
            ),
            "early_terminate.eta: 1.0 must be above 1",
        ),
        (
            format!("method: grid\nworkflow: gated\nrun_cap: 0\n{grid}"),
            "run_cap: 0 is not between 1 and 10000",
        ),
        (
            format!("method: grid\nworkflow: gated\nrun_cap: 10001\n{grid}"),
            "run_cap: 10001 is not between 1 and 10000",
        ),
        (
            format!("method: grid\nworkflow: gated\nrun_cap: 2\n{grid}"),
            "run_cap: the grid has 3 points and run_cap is 2; add `grid: first` to run its first 2",
        ),
        (
            format!("method: grid\nworkflow: quiet\nmetric: {{name: loss}}\n{grid}"),
            "metric.name: workflow 'quiet' reports no metrics, so no member could report 'loss'",
        ),
        (
            format!("method: grid\nworkflow: patterned\nmetric: {{name: loss}}\n{grid}"),
            "metric.name: workflow 'patterned' never reports 'loss': its metrics are its log pattern's groups (reward)",
        ),
    ];
    for (i, (text, want)) in table.iter().enumerate() {
        let file = write(&home, &format!("bad{i}.yaml"), text);
        let out = home.cli(&["sweep", "start", &file]);
        let err = stderr(&out);
        assert!(!out.status.success(), "{text}");
        assert!(err.contains(want) && err.trim().lines().count() == 1 && !err.contains("panicked"), "{err}");
    }
    assert!(home.cli_ok(&["sweep", "list"]).contains("no sweeps"));
    assert!(home.cli_ok(&["run", "list"]).contains("no runs"));
    // Said so, the grid's first points run; a metric a log pattern names, or one a JSONL file
    // may hold, is taken.
    let first = write(
        &home,
        "first.yaml",
        &format!("method: grid\nworkflow: gated\nrun_cap: 2\ngrid: first\n{grid}"),
    );
    let (_, members) = start(&home, &first);
    let lrs: Vec<String> = {
        let mut lrs = Vec::new();
        for id in members {
            lrs.push(home.run(id).await.params.vars["lr"].clone());
        }
        lrs
    };
    assert_eq!(lrs, ["0.1", "0.2"]);
    for workflow in ["patterned", "gated"] {
        let metric = if workflow == "patterned" { "reward" } else { "loss" };
        let file = write(
            &home,
            &format!("{workflow}.yaml"),
            &format!("method: grid\nworkflow: {workflow}\nmetric: {{name: {metric}}}\n{grid}"),
        );
        assert_eq!(start(&home, &file).1.len(), 3, "{workflow}");
    }
}
