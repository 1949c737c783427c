//! Dependencies and pipelines: a run waits for others to complete, end or fail; a dependency
//! that can no longer be met ends its run without starting it (and what waits for that one);
//! waits hold across a daemon's SIGKILL and across nodes; values of the runs waited for reach
//! templates and stage environments, checked.

use std::path::Path;
use std::time::Duration;

use lachesis::model::{RunState, short_id};
use uuid::Uuid;

use crate::support::{TestHome, fresh_postgres, processes_mentioning, stderr, wait_for};

const QUICK: &str = "name: quick\nstages:\n  - {name: main, argv: [sh, -c, \"echo ran\"]}\n";
const BOOM: &str = "name: boom\nstages:\n  - {name: main, argv: [sh, -c, \"exit 3\"]}\n";
const WAIT: Duration = Duration::from_secs(30);

/// A workflow whose one stage runs until `gate` exists.
fn gated(name: &str, gate: &Path, extra: &str) -> String {
    format!(
        "name: {name}\n{extra}stages:\n  - name: main\n    argv: [sh, -c, 'while [ ! -e {} ]; do sleep 0.05; done']\n",
        gate.display()
    )
}

fn ids_of(out: &str) -> Vec<Uuid> {
    out.lines().map(|line| Uuid::parse_str(line.trim()).unwrap()).collect()
}

fn log_of(home: &TestHome, run: Uuid, stage: &str) -> String {
    std::fs::read_to_string(home.path().join("runs").join(run.to_string()).join(format!("{stage}.log")))
        .unwrap_or_default()
}

/// `run list` says what a waiting run waits for: short ids and conditions, three then "+N more"
/// in the table; every open dependency (run, condition, name, state) with `--json`. A met
/// dependency leaves the list.
#[tokio::test]
async fn run_list_says_what_a_waiting_run_waits_for() {
    let home = TestHome::new();
    home.workflow("quick", QUICK);
    let base: Vec<Uuid> = (0..5).map(|_| home.submit(&["--workflow", "quick", "--hold"])).collect();
    // In the order the flags group them: --after, then --after-any, then --after-failed.
    let waiting = home.submit(&[
        "--workflow",
        "quick",
        "--after",
        &format!("a={}", base[0]),
        "--after",
        &base[1].to_string(),
        "--after-any",
        &base[2].to_string(),
        "--after-any",
        &base[3].to_string(),
        "--after-failed",
        &base[4].to_string(),
    ]);
    let short = |i: usize| short_id(&base[i]);
    let row =
        |list: &str| list.lines().find(|l| l.contains(&short_id(&waiting))).unwrap_or_default().to_string();
    let list = home.cli_ok(&["run", "list"]);
    let want = format!("pending (waits for {} ok, {} ok, {} any +2 more)", short(0), short(1), short(2));
    assert!(row(&list).contains(&want), "{list}");

    let json: serde_json::Value = serde_json::from_str(&home.cli_ok(&["run", "list", "--json"])).unwrap();
    let listed = json.as_array().unwrap().iter().find(|r| r["id"] == waiting.to_string()).unwrap();
    let waits: Vec<_> = listed["waits_for"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (d["run"].as_str().unwrap().to_string(), d["when"].clone(), d["name"].clone(), d["state"].clone())
        })
        .collect();
    let when = ["ok", "ok", "any", "any", "failed"];
    let want: Vec<_> = (0..5)
        .map(|i| {
            let name = if i == 0 { serde_json::json!("a") } else { serde_json::Value::Null };
            (base[i].to_string(), serde_json::json!(when[i]), name, serde_json::json!("pending"))
        })
        .collect();
    assert_eq!(waits, want, "{listed:#}");
    // Runs that wait for nothing say nothing of it.
    assert!(
        json.as_array()
            .unwrap()
            .iter()
            .filter(|r| r["id"] != waiting.to_string())
            .all(|r| r.get("waits_for").is_none())
    );

    // Two of them end as asked (a cancel is an end `any` accepts): they leave the list.
    home.cli_ok(&["run", "stop", &base[2].to_string()]);
    home.cli_ok(&["run", "stop", &base[3].to_string()]);
    let list = home.cli_ok(&["run", "list"]);
    let want = format!("pending (waits for {} ok, {} ok, {} failed)", short(0), short(1), short(4));
    assert!(row(&list).contains(&want), "{list}");
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &waiting.to_string(), "--json"])).unwrap();
    assert_eq!(status["waits_for"].as_array().unwrap().len(), 3, "{status:#}");
}

#[tokio::test]
async fn a_pipeline_whose_first_step_fails_ends_the_rest_without_starting_them() {
    let mut home = TestHome::new();
    home.workflow("boom", BOOM);
    let marker = home.path().join("ran");
    home.workflow(
        "mark",
        &format!(
            "name: mark\nstages:\n  - name: main\n    argv: [sh, -c, 'touch {}-$0', '{{run_id}}']\n",
            marker.display()
        ),
    );
    let file = home.path().join("p.yaml");
    std::fs::write(
        &file,
        "- {name: first, workflow: boom}\n- {name: second, workflow: mark}\n- {workflow: mark}\n",
    )
    .unwrap();
    let out = home.cli_ok(&["run", "start", "--pipeline", file.to_str().unwrap(), "--json"]);
    let runs: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let ids: Vec<Uuid> = runs.iter().map(|r| r["id"].as_str().unwrap().parse().unwrap()).collect();
    let workflows: Vec<&str> = runs.iter().map(|r| r["workflow"].as_str().unwrap()).collect();
    assert_eq!(workflows, ["boom", "mark", "mark"], "the ids come back in the file's order");
    assert_eq!(runs.iter().map(|r| r["deps_open"].as_i64().unwrap_or(0)).collect::<Vec<_>>(), [0, 1, 1]);
    let list = home.cli_ok(&["run", "list"]);
    assert!(
        list.lines().any(|l| l.contains(&short_id(&ids[2]))
            && l.contains(&format!("pending (waits for {} ok)", short_id(&ids[1])))),
        "{list}"
    );

    home.start_daemon();
    let first = home.wait_state(ids[0], RunState::Failed, WAIT).await;
    let second = home.wait_state(ids[1], RunState::Failed, WAIT).await;
    let third = home.wait_state(ids[2], RunState::Failed, WAIT).await;
    assert_eq!(second.reason, Some(format!("dependency {} failed", first.short_id())));
    assert_eq!(third.reason, Some(format!("dependency {} failed", second.short_id())));
    for run in [&second, &third] {
        assert!(run.started_at.is_none(), "{} was never claimed", run.short_id());
        let stages = home.stages(run.id).await;
        assert!(
            stages.iter().all(|s| s.record.started_at.is_none() && s.record.shim.is_none()),
            "{stages:?}"
        );
        assert!(!marker.with_file_name(format!("ran-{}", run.id)).exists());
        assert!(processes_mentioning(&run.run_dir).is_empty());
        let messages = home.messages(run.id).await;
        assert!(!messages.iter().any(|m| m.starts_with("claim by")), "{messages:?}");
    }
    let status = home.cli_ok(&["run", "status", &ids[2].to_string()]);
    assert!(
        status.contains(&format!("after     second={} (ok, failed): unmet", second.short_id())),
        "{status}"
    );
}

#[tokio::test]
async fn after_waits_across_a_daemon_sigkill_and_blocks_nothing_behind_it() {
    let mut home = TestHome::new();
    let gate = home.path().join("gate");
    home.workflow("gated", &gated("gated", &gate, ""));
    home.workflow("quick", QUICK);
    let first = home.submit(&["-w", "gated"]);
    let waiting = home.submit(&["-w", "quick", "--after", &short_id(&first), "--priority", "9"]);
    let behind = home.submit(&["-w", "quick"]);
    home.start_daemon_with(&["--max-parallel", "2"]);
    home.wait_state(first, RunState::Running, WAIT).await;
    // Highest priority, first in the queue: only its dependency holds it, and only it.
    home.wait_state(behind, RunState::Completed, WAIT).await;
    assert_eq!(home.run(waiting).await.state, RunState::Pending);
    let status = home.cli_ok(&["run", "status", &waiting.to_string()]);
    assert!(
        status.contains(&format!("waiting   for dependencies: {} (ok, running)", short_id(&first))),
        "{status}"
    );

    home.kill_daemon();
    std::fs::write(&gate, "").unwrap();
    // The stage ends while no daemon runs; the next daemon learns it and settles the edge.
    home.start_daemon();
    let first = home.wait_state(first, RunState::Completed, WAIT).await;
    let waiting = home.wait_state(waiting, RunState::Completed, WAIT).await;
    assert!(waiting.started_at.unwrap() >= first.ended_at.unwrap());
    let messages = home.messages(waiting.id).await;
    let met = messages
        .iter()
        .position(|m| m.starts_with(&format!("dependency {} completed: met", first.short_id())));
    let claimed = messages.iter().position(|m| m.starts_with("claim by"));
    assert!(met.is_some() && met < claimed, "{messages:?}");
}

#[tokio::test]
async fn after_any_and_after_failed_start_on_the_ends_they_name() {
    let mut home = TestHome::new();
    home.workflow("boom", BOOM);
    home.workflow("quick", QUICK);
    let failed = home.submit(&["-w", "boom", "--hold"]);
    let done = home.submit(&["-w", "quick", "--hold"]);
    let f = short_id(&failed);
    let d = short_id(&done);
    let alert = home.submit(&["-w", "quick", "--after-failed", &f]);
    let cleanup = home.submit(&["-w", "quick", "--after-any", &f]);
    let next = home.submit(&["-w", "quick", "--after", &f]);
    let no_alert = home.submit(&["-w", "quick", "--after-failed", &d]);
    let both = home.submit(&["-w", "quick", "--after", &d, "--after-any", &f]);
    home.start_daemon();
    home.cli_ok(&["run", "release", &f]);
    home.cli_ok(&["run", "release", &d]);
    for id in [alert, cleanup, both] {
        home.wait_state(id, RunState::Completed, WAIT).await;
    }
    let next = home.wait_state(next, RunState::Failed, WAIT).await;
    assert_eq!(next.reason, Some(format!("dependency {f} failed")));
    let no_alert = home.wait_state(no_alert, RunState::Failed, WAIT).await;
    assert_eq!(no_alert.reason, Some(format!("dependency {d} completed (this run waited for it to fail)")));

    // A stopped run: what waits for it to complete fails saying so.
    let stopped = home.submit(&["-w", "quick", "--hold"]);
    let after_stopped = home.submit(&["-w", "quick", "--after", &stopped.to_string()]);
    home.cli_ok(&["run", "stop", &stopped.to_string()]);
    let run = home.wait_state(after_stopped, RunState::Failed, WAIT).await;
    assert_eq!(run.reason, Some(format!("dependency {} was stopped", short_id(&stopped))));
}

#[tokio::test]
async fn unknown_ids_cycles_and_dependencies_that_already_failed_are_refused() {
    let mut home = TestHome::new();
    home.workflow("quick", QUICK);
    home.workflow("boom", BOOM);
    let err = stderr(&home.cli(&["run", "start", "-w", "quick", "--after", "ffffffff"]));
    assert_eq!(err.trim(), "lachesis: no run matches 'ffffffff'");
    let cycle = home.path().join("cycle.yaml");
    std::fs::write(&cycle, "- {name: a, workflow: quick, after: [c]}\n- {name: b, workflow: quick, after: [a]}\n- {name: c, workflow: quick}\n").unwrap();
    let err = stderr(&home.cli(&["run", "start", "--pipeline", cycle.to_str().unwrap()]));
    assert!(err.contains("after: the steps wait for each other in a cycle: a -> c -> b -> a"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let bad_name = home.path().join("bad.yaml");
    std::fs::write(
        &bad_name,
        "- {name: a, workflow: quick}\n- {name: b, workflow: quick, vars: {x: \"{after.nope.run_id}\"}}\n",
    )
    .unwrap();
    let err = stderr(&home.cli(&["run", "start", "--pipeline", bad_name.to_str().unwrap()]));
    assert!(err.contains("step b: "), "{err}");
    assert_eq!(home.cli_ok(&["run", "list"]).trim(), "no runs", "nothing was written");

    // A dependency that already failed can never be met: refused at once.
    home.start_daemon();
    let failed = home.submit(&["-w", "boom"]);
    home.wait_state(failed, RunState::Failed, WAIT).await;
    let err = stderr(&home.cli(&["run", "start", "-w", "quick", "--after", &failed.to_string()]));
    assert_eq!(
        err.trim(),
        format!("lachesis: dependency {} failed: a run waiting for it could never start", short_id(&failed))
    );
    // `any` on it is met at once, and the run goes ahead.
    let id = home.submit(&["-w", "quick", "--after-any", &failed.to_string()]);
    home.wait_state(id, RunState::Completed, WAIT).await;
}

fn weights_workflow(name: &str, weights: &str) -> String {
    format!(
        "name: {name}\nstages:\n  - name: trainer\n    argv: [sh, -c, 'echo \"Saved weights: {weights}\"']\n"
    )
}

const USES: &str = "name: uses\nvars: {w: \"\"}\nstages:\n  - name: main\n    argv: [sh, -c, 'echo \"w=$0 id=$LACHESIS_AFTER_TRAIN_RUN_ID tw=$LACHESIS_AFTER_TRAIN_TRAINED_WEIGHTS dir=$LACHESIS_AFTER_TRAIN_RUN_DIR\"', '{w}']\n";

#[tokio::test]
async fn values_of_the_runs_waited_for_reach_templates_and_environments_checked() {
    let mut home = TestHome::new();
    home.workflow("train", &weights_workflow("train", "tinker://demo/w1"));
    home.workflow("hostile", &weights_workflow("hostile", "tinker://demo/x;rm"));
    home.workflow("uses", USES);
    let train = home.submit(&["-w", "train"]);
    let uses = home.submit(&[
        "-w",
        "uses",
        "--after",
        &format!("train={train}"),
        "--var",
        "w={after.train.trained_weights}",
    ]);
    let err = stderr(&home.cli(&[
        "run",
        "start",
        "-w",
        "uses",
        "--after",
        &format!("train={train}"),
        "--var",
        "w={after.other.run_id}",
    ]));
    assert!(
        err.contains("'{after.other.run_id}' is not a value of a named dependency")
            && err.contains("named: train"),
        "{err}"
    );
    // A checkpoint line (JSON) can carry what a log line cannot: a newline.
    let script = home.path().join("ck.sh");
    std::fs::write(
        &script,
        "printf '{\"batch\": 1, \"sampler_path\": \"tinker://a\\\\nb\"}\\n' > \"$1/ck.jsonl\"\n",
    )
    .unwrap();
    home.workflow(
        "jsonl",
        &format!(
            "name: jsonl\ncheckpoints: {{jsonl: {{file: \"{{run_dir}}/ck.jsonl\", step: /batch, weights: /sampler_path}}}}\n\
             stages:\n  - name: trainer\n    argv: [sh, {}, \"{{run_dir}}\"]\n",
            script.display()
        ),
    );
    let newline = home.submit(&["-w", "jsonl"]);
    let victim2 = home.submit(&[
        "-w",
        "uses",
        "--after",
        &format!("train={newline}"),
        "--var",
        "w={after.train.trained_weights}",
    ]);
    let hostile = home.submit(&["-w", "hostile"]);
    let victim = home.submit(&[
        "-w",
        "uses",
        "--after",
        &format!("train={hostile}"),
        "--var",
        "w={after.train.trained_weights}",
    ]);
    home.start_daemon();

    let trained = home.wait_state(train, RunState::Completed, WAIT).await;
    home.wait_state(uses, RunState::Completed, WAIT).await;
    let log = log_of(&home, uses, "main");
    let want = format!("w=tinker://demo/w1 id={train} tw=tinker://demo/w1 dir={}", trained.run_dir.display());
    assert!(log.contains(&want), "{log}");

    let victim = home.wait_state(victim, RunState::Failed, WAIT).await;
    assert_eq!(
        victim.reason,
        Some(format!("after.train.trained_weights from run {}: contains ';'", short_id(&hostile)))
    );
    let victim2 = home.wait_state(victim2, RunState::Failed, WAIT).await;
    assert_eq!(
        victim2.reason,
        Some(format!("after.train.trained_weights from run {}: contains a newline", short_id(&newline)))
    );
    let stages = home.stages(victim.id).await;
    assert!(stages.iter().all(|s| s.record.started_at.is_none()), "no stage started: {stages:?}");
}

/// The `run_failed` bodies the receiver got, by run id.
fn failures(hook: &crate::support::Receiver) -> Vec<(String, String)> {
    let mut got: Vec<(String, String)> = hook
        .of_kind("run_failed")
        .iter()
        .map(|b| {
            (b["ids"]["run"].as_str().unwrap_or_default().to_string(), b["summary"]["reason"].to_string())
        })
        .collect();
    got.sort();
    got
}

async fn wait_failures(hook: &crate::support::Receiver, n: usize) -> Vec<(String, String)> {
    wait_for(&format!("{n} run_failed webhooks"), WAIT, || {
        let got = failures(hook);
        async move { (got.len() >= n).then_some(got) }
    })
    .await
}

#[tokio::test]
async fn every_run_a_failed_pipeline_step_ends_is_posted_as_failed_once() {
    let hook = crate::support::Receiver::start(vec![]).await;
    let mut home = TestHome::new();
    home.environ = vec![("LACHESIS_WEBHOOKS".into(), hook.url.clone())];
    home.workflow("boom", BOOM);
    home.workflow("quick", QUICK);
    let file = home.path().join("p.yaml");
    std::fs::write(&file, "- {name: first, workflow: boom}\n- {workflow: quick}\n- {workflow: quick}\n")
        .unwrap();
    let ids = ids_of(&home.cli_ok(&["run", "start", "--pipeline", file.to_str().unwrap()]));
    home.start_daemon();
    let got = wait_failures(&hook, 3).await;
    let reason = |id: &Uuid, text: String| (id.to_string(), serde_json::json!(text).to_string());
    let mut want = vec![
        reason(&ids[0], "stage 'main' exited with code 3".into()),
        reason(&ids[1], format!("dependency {} failed", short_id(&ids[0]))),
        reason(&ids[2], format!("dependency {} failed", short_id(&ids[1]))),
    ];
    want.sort();
    assert_eq!(got, want);
    for id in &ids[1..] {
        let messages = home.messages(*id).await;
        assert!(
            messages.iter().any(|m| m.starts_with("webhook ") && m.contains("told of run_failed")),
            "{messages:?}"
        );
    }

    // A daemon started again reads the log again: nothing is posted twice.
    home.kill_daemon();
    home.start_daemon();
    let quick = home.submit(&["-w", "quick"]);
    wait_for("the quick run's webhook", WAIT, || {
        let done = hook.of_kind("run_completed").iter().any(|b| b["ids"]["run"] == quick.to_string());
        async move { done.then_some(()) }
    })
    .await;
    assert_eq!(failures(&hook), want, "each failure is posted once");
}

#[tokio::test]
async fn a_stop_that_fails_waiting_runs_is_posted_with_or_without_a_daemon() {
    let hook = crate::support::Receiver::start(vec![]).await;
    let mut home = TestHome::new();
    home.environ = vec![("LACHESIS_WEBHOOKS".into(), hook.url.clone())];
    home.workflow("quick", QUICK);
    // No daemon: the stop's cascade is made by the CLI alone, and posted by the next daemon.
    let a = home.submit(&["-w", "quick"]);
    let b = home.submit(&["-w", "quick", "--after", &a.to_string()]);
    let c = home.submit(&["-w", "quick", "--after", &b.to_string()]);
    home.cli_ok(&["run", "stop", &a.to_string()]);
    assert_eq!(home.run(c).await.state, RunState::Failed);
    home.start_daemon();
    let got = wait_failures(&hook, 2).await;
    let ids: Vec<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
    let mut want = vec![b.to_string(), c.to_string()];
    want.sort();
    assert_eq!(ids, want, "{got:?}");
    assert!(
        got.iter().any(|(_, r)| r.contains(&format!("dependency {} was stopped", short_id(&a)))),
        "{got:?}"
    );

    // With the daemon up: a held run stopped from the CLI fails the run after it.
    let held = home.submit(&["-w", "quick", "--hold"]);
    let waiting = home.submit(&["-w", "quick", "--after", &held.to_string()]);
    home.cli_ok(&["run", "stop", &held.to_string()]);
    let got = wait_failures(&hook, 3).await;
    assert!(got.iter().any(|(id, _)| *id == waiting.to_string()), "{got:?}");
    assert_eq!(got.len(), 3, "a stopped run is not a failure: {got:?}");
}

#[tokio::test]
async fn the_bundled_demo_pipeline_trains_tests_the_weights_and_cleans_up() {
    let mut home = TestHome::new();
    let out = home.cli_ok(&["run", "start", "--pipeline", "demo-pipeline"]);
    let ids = ids_of(&out);
    assert_eq!(ids.len(), 3, "{out}");
    home.start_daemon();
    for id in &ids {
        home.wait_state(*id, RunState::Completed, Duration::from_secs(60)).await;
    }
    let eval = log_of(&home, ids[1], "eval");
    assert!(eval.contains(&format!("eval: testing tinker://demo/final (trainer run {})", ids[0])), "{eval}");
    let cleanup = log_of(&home, ids[2], "cleanup");
    assert!(cleanup.contains(&format!("cleanup: after run {}", ids[1])), "{cleanup}");
}

#[tokio::test]
async fn a_pipeline_queues_a_step_after_the_steps_it_waits_for_and_answers_in_file_order() {
    let home = TestHome::new();
    home.workflow("quick", QUICK);
    let file = home.path().join("p.yaml");
    std::fs::write(
        &file,
        "- {name: b, workflow: quick, after: [a]}\n- {name: a, workflow: quick, after: []}\n",
    )
    .unwrap();
    let ids = ids_of(&home.cli_ok(&["run", "start", "--pipeline", file.to_str().unwrap()]));
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &ids[0].to_string(), "--json"])).unwrap();
    assert_eq!(status["after"][0]["run"].as_str(), Some(ids[1].to_string().as_str()), "{status}");
    assert_eq!(status["after"][0]["name"].as_str(), Some("a"));
    assert_eq!(status["after"][0]["state"].as_str(), Some("pending"));
    assert_eq!(status["after"][0]["settled"].as_str(), Some("waiting"));
}

#[tokio::test]
async fn after_holds_across_two_nodes_on_postgres() {
    let Some(url) = fresh_postgres().await else { return };
    let mut homes: Vec<TestHome> = (0..2)
        .map(|_| {
            let mut home = TestHome::new();
            home.database_url = Some(url.clone());
            home
        })
        .collect();
    let gate = homes[0].path().join("gate");
    homes[0].workflow("on-a", &gated("on-a", &gate, "node_labels: {site: a}\n"));
    homes[0].workflow(
        "on-b",
        "name: on-b\nnode_labels: {site: b}\nstages:\n  - {name: main, argv: [sh, -c, \"echo ran\"]}\n",
    );
    let first = homes[0].submit(&["-w", "on-a"]);
    let second = homes[0].submit(&["-w", "on-b", "--after", &first.to_string()]);
    homes[0].start_daemon_with(&["--node", "na", "--label", "site=a", "--lease", "30s"]);
    homes[1].start_daemon_with(&[
        "--node",
        "nb",
        "--label",
        "site=b",
        "--lease",
        "30s",
        "--scan-interval",
        "30s",
    ]);
    homes[0].wait_state(first, RunState::Running, WAIT).await;
    // Node b is idle with a claimable-looking queue: the edge alone keeps it from the run.
    let service = homes[0].service().await;
    wait_for("node b to be up", WAIT, || {
        let service = service.clone();
        async move { service.nodes().await.ok().filter(|n| n.len() == 2) }
    })
    .await;
    assert_eq!(homes[0].run(second).await.state, RunState::Pending);
    std::fs::write(&gate, "").unwrap();
    let first = homes[0].wait_state(first, RunState::Completed, WAIT).await;
    // Node b claims it when node a's end commits (a NOTIFY), well before its 30 s scan. (A run
    // node a passed over used to stay locked by a's claim at that instant, so b skipped it and
    // waited for the scan: claims now lock only the runs they take.)
    let second = homes[0].wait_state(second, RunState::Completed, Duration::from_secs(20)).await;
    assert_eq!((first.node.as_deref(), second.node.as_deref()), (Some("na"), Some("nb")));
    assert!(second.started_at.unwrap() >= first.ended_at.unwrap());
}
