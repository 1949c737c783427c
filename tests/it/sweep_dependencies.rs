//! Runs that wait for a sweep: an evaluation queued after a real sweep (a stand-in trainer whose
//! reward is its learning rate) gets the winner's id, weights and value, across a daemon's
//! SIGKILL, from a pipeline's sweep step, and across two nodes on PostgreSQL; a stopped sweep,
//! or one whose members never report its metric, fails what waits for it (and what waits for
//! that); hostile requests get one line and queue nothing.

use std::time::Duration;

use lachesis::model::{RunState, short_id};
use serde_json::Value;
use uuid::Uuid;

use crate::support::{TestHome, fresh_postgres, stderr, wait_for};

/// Long enough for the daemon's sweep decider (every 3 s) to see the sweep's end.
const WAIT: Duration = Duration::from_secs(90);

/// A trainer whose reward is its `lr`, reported three times about a second apart (so the
/// decider sees its members in flight), then its weights.
fn tune(extra: &str) -> String {
    format!(
        "name: tune\n{extra}vars: {{lr: \"0.1\"}}\nstages:\n  - name: trainer\n    argv: [sh, -c, \"for i in 1 2 3; do echo \\\"step $i/3 reward={{lr}}\\\"; sleep 1.1; done; echo 'Saved weights: tinker://tune/lr-{{lr}}/final'\"]\nmetrics:\n  log: {{stage: trainer, pattern: 'step (?P<step>\\d+)/\\d+ reward=(?P<reward>\\S+)'}}\n"
    )
}

/// An evaluation that prints the values it was given.
fn eval(extra: &str) -> String {
    format!(
        "name: eval\n{extra}vars: {{weights: \"\", winner: \"\", best: \"\"}}\nstages:\n  - name: main\n    argv: [sh, -c, \"echo weights={{weights}} winner={{winner}} best={{best}} env=$LACHESIS_AFTER_TUNE_BEST_RUN_ID\"]\n"
    )
}

/// Three learning rates: the reward is the rate, so member 1 (0.3) wins.
const SWEEP: &str = "method: grid\nworkflow: tune\nmetric: {name: reward, goal: maximize}\nparameters:\n  lr: {values: [0.1, 0.3, 0.2]}\n";

/// A workflow whose one stage waits for the home's `gate` file.
fn gated(home: &TestHome) -> String {
    format!(
        "name: gated\nvars: {{lr: \"1\"}}\nmetrics:\n  jsonl: {{file: m.jsonl, step: /step}}\nstages:\n  - name: main\n    argv: [sh, -c, 'while [ ! -e {} ]; do sleep 0.05; done']\n",
        home.path().join("gate").display()
    )
}

fn write(home: &TestHome, name: &str, text: &str) -> String {
    let path = home.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// Starts a sweep through the CLI: its id and members, in order of k.
fn start_sweep(home: &TestHome, file: &str) -> (Uuid, Vec<Uuid>) {
    let out: Value = serde_json::from_str(&home.cli_ok(&["sweep", "start", file, "--json"])).unwrap();
    let id = out["id"].as_str().unwrap().parse().unwrap();
    let members =
        out["members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().parse().unwrap()).collect();
    (id, members)
}

/// The log of `run`'s stage `stage`, in the run's directory (the submitting home's).
async fn log_of(home: &mut TestHome, run: Uuid, stage: &str) -> String {
    let dir = home.run(run).await.run_dir;
    std::fs::read_to_string(dir.join(format!("{stage}.log"))).unwrap_or_default()
}

/// Queues the evaluation of sweep `sweep`'s winner, named `tune`.
fn queue_eval(home: &TestHome, sweep: Uuid) -> Uuid {
    home.submit(&[
        "-w",
        "eval",
        "--after-sweep",
        &format!("tune={}", short_id(&sweep)),
        "--var",
        "weights={after.tune.best_trained_weights}",
        "--var",
        "winner={after.tune.best_run_id}",
        "--var",
        "best={after.tune.best_value}",
    ])
}

/// What the evaluation of a sweep whose winner is `winner` (lr 0.3) prints.
fn eval_line(winner: Uuid) -> String {
    format!("weights=tinker://tune/lr-0.3/final winner={winner} best=0.3 env={winner}")
}

#[tokio::test]
async fn an_eval_after_a_sweep_gets_its_winners_id_and_weights_across_a_daemon_sigkill() {
    let mut home = TestHome::new();
    home.workflow("tune", &tune(""));
    home.workflow("eval", &eval(""));
    let (sweep, members) = start_sweep(&home, &write(&home, "tune.yaml", SWEEP));
    let eval = queue_eval(&home, sweep);

    // It waits: `run list` says for which sweep, `--json` with the sweep's id and state.
    let list = home.cli_ok(&["run", "list"]);
    let row = list.lines().find(|l| l.contains(&short_id(&eval))).unwrap_or_default();
    assert!(row.contains(&format!("pending (waits for sweep {})", short_id(&sweep))), "{list}");
    let json: Value = serde_json::from_str(&home.cli_ok(&["run", "list", "--json"])).unwrap();
    let listed = json.as_array().unwrap().iter().find(|r| r["id"] == eval.to_string()).unwrap();
    let wait = &listed["waits_for"][0];
    assert_eq!(
        (&wait["sweep"], &wait["state"], &wait["name"], &wait["settled"]),
        (
            &Value::from(sweep.to_string()),
            &Value::from("live"),
            &Value::from("tune"),
            &Value::from("waiting")
        ),
        "{listed:#}"
    );
    let status = home.cli_ok(&["run", "status", &eval.to_string()]);
    assert!(status.contains(&format!("tune=sweep {} (live): waiting", short_id(&sweep))), "{status}");

    // The daemon dies while the members run; the next one carries on, and the wait holds.
    home.start_daemon();
    home.wait_state(members[0], RunState::Running, WAIT).await;
    home.kill_daemon();
    assert_eq!(home.run(eval).await.state, RunState::Pending);
    home.start_daemon();

    let (run, _) = home.wait_settled(eval, WAIT).await;
    assert_eq!(run.state, RunState::Completed, "{:?}\n{}", run.reason, home.daemon_log());
    let log = log_of(&mut home, eval, "main").await;
    assert!(log.contains(&eval_line(members[1])), "{log}");
    for member in &members {
        let member = home.run(*member).await;
        assert!(run.started_at.unwrap() >= member.ended_at.unwrap(), "it started after every member ended");
    }
    let board: Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "status", &sweep.to_string(), "--json"])).unwrap();
    assert_eq!((&board["state"], &board["winner"]), (&Value::from("done"), &Value::from(1)), "{board:#}");
    let messages = home.messages(eval).await;
    let met = format!("dependency sweep {} done: met (0 left)", short_id(&sweep));
    assert!(messages.contains(&met), "{messages:?}");
    assert!(messages.iter().any(|m| m.contains("after.tune.best_trained_weights")), "{messages:?}");

    // A run queued once the sweep is done is met as written, and gets the same winner.
    let late = queue_eval(&home, sweep);
    let (run, _) = home.wait_settled(late, WAIT).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    let log = log_of(&mut home, late, "main").await;
    assert!(log.contains(&eval_line(members[1])), "{log}");
}

#[tokio::test]
async fn a_stopped_sweep_fails_what_waits_for_it_and_what_waits_for_that() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    home.workflow("eval", &eval(""));
    let (sweep, members) = start_sweep(
        &home,
        &write(
            &home,
            "s.yaml",
            "method: grid\nworkflow: gated\nmetric: {name: loss}\nparameters:\n  lr: {values: [1, 2]}\n",
        ),
    );
    let first = home.submit(&["-w", "eval", "--after-sweep", &sweep.to_string()]);
    let second = home.submit(&["-w", "eval", "--after", &first.to_string()]);
    let cleanup = home.submit(&["-w", "eval", "--after-any", &first.to_string()]);
    home.start_daemon();
    home.wait_state(members[0], RunState::Running, WAIT).await;

    home.cli_ok(&["sweep", "stop", &short_id(&sweep)]);
    let first = home.run(first).await;
    let reason = format!("sweep {} was stopped", short_id(&sweep));
    assert_eq!((first.state, first.reason.as_deref()), (RunState::Failed, Some(reason.as_str())));
    let second = home.run(second).await;
    let reason = format!("dependency {} failed", short_id(&first.id));
    assert_eq!((second.state, second.reason.as_deref()), (RunState::Failed, Some(reason.as_str())));
    assert!(
        home.stages(first.id).await.iter().all(|s| s.record.started_at.is_none()),
        "none of its stages started"
    );
    let (cleanup, _) = home.wait_settled(cleanup, WAIT).await;
    assert_eq!(cleanup.state, RunState::Completed, "an `any` cleanup still runs: {:?}", cleanup.reason);
    for member in &members {
        assert_eq!(home.wait_settled(*member, WAIT).await.0.state, RunState::Stopped);
    }

    // Queued after the stop: refused in one line, nothing queued.
    let before = home.service().await.runs(&Default::default()).await.unwrap().len();
    let out = home.cli(&["run", "start", "-w", "eval", "--after-sweep", &sweep.to_string()]);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("sweep {}", short_id(&sweep))) && err.contains("could never start"),
        "{err}"
    );
    assert_eq!(home.service().await.runs(&Default::default()).await.unwrap().len(), before);
}

#[tokio::test]
async fn a_sweep_whose_members_never_report_its_metric_fails_what_waits_for_it() {
    let mut home = TestHome::new();
    home.workflow(
        "quiet",
        "name: quiet\nvars: {lr: \"1\"}\nmetrics:\n  jsonl: {file: m.jsonl, step: /step}\nstages:\n  - {name: main, argv: [sh, -c, 'sleep 3.5']}\n",
    );
    home.workflow("eval", &eval(""));
    let (sweep, members) = start_sweep(
        &home,
        &write(
            &home,
            "q.yaml",
            "method: grid\nworkflow: quiet\nmetric: {name: loss}\nparameters:\n  lr: {values: [1, 2]}\n",
        ),
    );
    let waiting = home.submit(&[
        "-w",
        "eval",
        "--after-sweep",
        &format!("tune={sweep}"),
        "--var",
        "weights={after.tune.best_run_dir}",
    ]);
    home.start_daemon();
    let run = home.wait_state(waiting, RunState::Failed, WAIT).await;
    let reason = format!("sweep {} ended without a winner (no member reported loss)", short_id(&sweep));
    assert_eq!(run.reason.as_deref(), Some(reason.as_str()));
    assert!(run.started_at.is_none(), "it never started");
    for member in members {
        assert_eq!(home.run(member).await.state, RunState::Completed);
    }
    let board: Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "status", &sweep.to_string(), "--json"])).unwrap();
    assert_eq!(
        (&board["state"], &board["reason"]),
        (&Value::from("done"), &Value::from("no member reported loss"))
    );
}

#[tokio::test]
async fn a_pipeline_queues_a_sweep_and_the_evaluation_of_its_winner() {
    let mut home = TestHome::new();
    home.workflow("tune", &tune(""));
    home.workflow("eval", &eval(""));
    std::fs::create_dir_all(home.workflows().join("sweeps")).unwrap();
    std::fs::write(home.workflows().join("sweeps").join("lr.yaml"), SWEEP).unwrap();
    let pipeline = write(
        &home,
        "p.yaml",
        "- {name: tune, sweep: lr}\n\
         - name: eval                  # waits for the step before: the sweep's winner\n  workflow: eval\n  \
         vars: {weights: \"{after.tune.best_trained_weights}\", winner: \"{after.tune.best_run_id}\", best: \"{after.tune.best_value}\"}\n",
    );
    let out = home.cli(&["run", "start", "--pipeline", &pipeline]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ids: Vec<Uuid> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(ids.len(), 2, "an id per step, in the file's order");
    let (sweep, eval) = (ids[0], ids[1]);
    assert!(stderr(&out).contains(&format!("step tune: sweep {}, 3 members queued", short_id(&sweep))));
    let service = home.service().await;
    let board = service.sweep_status(&sweep.to_string()).await.unwrap();
    assert_eq!(board.leaderboard.len(), 3);
    let deps = service.run_status(&eval.to_string()).await.unwrap().after;
    assert_eq!((deps[0].awaited.id(), deps[0].name.as_deref()), (sweep, Some("tune")));

    home.start_daemon();
    let (run, _) = home.wait_settled(eval, WAIT).await;
    assert_eq!(run.state, RunState::Completed, "{:?}\n{}", run.reason, home.daemon_log());
    let winner = board.leaderboard.iter().find(|m| m.k == 1).unwrap().run;
    let log = log_of(&mut home, eval, "main").await;
    assert!(log.contains(&eval_line(winner)), "{log}");
}

/// Pipelines that cannot be queued are refused in one line naming the step, with nothing queued.
#[tokio::test]
async fn a_pipeline_with_a_bad_sweep_step_queues_nothing() {
    let mut home = TestHome::new();
    home.workflow("tune", &tune(""));
    home.workflow("eval", &eval(""));
    std::fs::create_dir_all(home.workflows().join("sweeps")).unwrap();
    std::fs::write(home.workflows().join("sweeps").join("lr.yaml"), SWEEP).unwrap();
    std::fs::write(
        home.workflows().join("sweeps").join("nometric.yaml"),
        "method: grid\nworkflow: tune\nparameters:\n  lr: {values: [0.1]}\n",
    )
    .unwrap();
    for (text, want) in [
        ("- {name: tune, sweep: nope}\n- {name: eval, workflow: eval}\n", "step tune: unknown sweep 'nope'"),
        ("- {name: tune, sweep: ../lr}\n", "[0].sweep: '../lr' is not a sweep name"),
        ("- {name: tune, sweep: lr, workflow: eval}\n", "[0].workflow: a sweep step takes only"),
        (
            "- {name: tune, sweep: lr}\n- {name: eval, workflow: eval, after: [{step: tune, when: any}]}\n",
            "step 'tune' is a sweep",
        ),
        (
            "- {name: tune, sweep: lr}\n- {name: eval, workflow: eval, vars: {weights: \"{after.tune.trained_weights}\"}}\n",
            "tune is a sweep dependency",
        ),
        ("- {name: tune, sweep: nometric}\n- {name: eval, workflow: eval}\n", "no metric"),
        (
            "- {name: tune, sweep: {method: grid, workflow: tune, metric: {name: reward}, parameters: {warmup: {values: [1]}}}}\n",
            "parameters.warmup",
        ),
    ] {
        let file = write(&home, "bad.yaml", text);
        let out = home.cli(&["run", "start", "--pipeline", &file]);
        let err = stderr(&out);
        assert!(!out.status.success(), "{text}");
        assert_eq!(err.trim().lines().count(), 1, "{text}: {err}");
        assert!(err.contains(want), "{text}: {err}");
    }
    let service = home.service().await;
    assert!(service.runs(&Default::default()).await.unwrap().is_empty(), "no run queued");
    assert!(service.sweeps().await.unwrap().is_empty(), "no sweep queued");
}

/// Every hostile way to wait for a sweep is refused in one line, and queues nothing.
#[tokio::test]
async fn hostile_sweep_dependencies_are_refused_in_one_line_queuing_nothing() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    home.workflow("eval", &eval(""));
    let service = home.service().await;
    let hold = lachesis::service::RunRequest { hold: Some(true), ..Default::default() };
    let with_metric =
        "method: grid\nworkflow: gated\nmetric: {name: loss}\nparameters:\n  lr: {values: [1]}\n";
    // Sweeps until two share a first digit: that digit is an ambiguous prefix.
    let mut firsts: std::collections::HashMap<char, Uuid> = std::collections::HashMap::new();
    let (ambiguous, sweep) = loop {
        let started = service.submit_sweep(with_metric, None, hold.clone()).await.unwrap();
        let first = started.sweep.id.to_string().chars().next().unwrap();
        if let Some(other) = firsts.insert(first, started.sweep.id) {
            break (first.to_string(), other);
        }
    };
    let no_metric = service
        .submit_sweep("method: grid\nworkflow: gated\nparameters:\n  lr: {values: [1]}\n", None, hold.clone())
        .await
        .unwrap()
        .sweep
        .id;
    let queued = service.runs(&Default::default()).await.unwrap().len();
    let short = short_id(&sweep);
    let lines = write(
        &home,
        "lines.jsonl",
        &format!("{}\n", r#"{"workflow": "eval", "after": [{"run": "ab", "sweep": "cd"}]}"#),
    );
    let when_any = write(
        &home,
        "any.jsonl",
        &format!("{{\"workflow\": \"eval\", \"after\": [{{\"sweep\": \"{short}\", \"when\": \"any\"}}]}}\n"),
    );
    let cases: Vec<(Vec<String>, String)> = vec![
        (vec!["--after-sweep".into(), "ffffffff".into()], "no sweep matches 'ffffffff'".into()),
        (vec!["--after-sweep".into(), ambiguous.clone()], format!("'{ambiguous}'")),
        (vec!["--after-sweep".into(), "%".into()], "no sweep matches '%'".into()),
        (vec!["--after-sweep".into(), format!("a b={short}")], "is not a dependency name".into()),
        (
            vec!["--after-sweep".into(), format!("t={short}"), "--after-sweep".into(), format!("t={short}")],
            "two dependencies are named 't'".into(),
        ),
        (vec!["--after-sweep".into(), no_metric.to_string()], "no metric, so it never has a winner".into()),
        (
            vec![
                "--after-sweep".into(),
                format!("tune={short}"),
                "--var".into(),
                "weights={after.tune.trained_weights}".into(),
            ],
            "tune is a sweep dependency: {after.NAME.best_run_id}".into(),
        ),
        (vec!["--from".into(), lines], "give one of `run`, `step` or `sweep`".into()),
        (vec!["--from".into(), when_any], "a sweep is waited for until it ends with a winner".into()),
    ];
    for (args, want) in &cases {
        let mut all = vec!["run", "start", "-w", "eval"];
        all.extend(args.iter().map(String::as_str));
        let out = home.cli(&all);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want.as_str()), "{args:?}: {err}");
    }
    // The same request body over the run request's other parsers.
    let both = serde_json::json!({ "workflow": "eval", "after": [{ "run": short, "sweep": short }] });
    let err = lachesis::service::RunRequest::from_value(both).unwrap_err().to_string();
    assert!(err.starts_with("after[0]: give one of") && !err.contains('\n'), "{err}");
    assert_eq!(service.runs(&Default::default()).await.unwrap().len(), queued, "nothing was queued");
}

#[tokio::test]
async fn a_sweep_on_one_node_frees_an_eval_on_another_on_postgres() {
    let Some(url) = fresh_postgres().await else { return };
    let mut homes: Vec<TestHome> = (0..2)
        .map(|_| {
            let mut home = TestHome::new();
            home.database_url = Some(url.clone());
            home
        })
        .collect();
    homes[0].workflow("tune", &tune("node_labels: {site: a}\n"));
    homes[0].workflow("eval", &eval("node_labels: {site: b}\n"));
    let (sweep, members) = start_sweep(&homes[0], &write(&homes[0], "tune.yaml", SWEEP));
    let eval = queue_eval(&homes[0], sweep);
    homes[0].start_daemon_with(&["--node", "na", "--label", "site=a", "--lease", "30s"]);
    homes[1].start_daemon_with(&["--node", "nb", "--label", "site=b", "--lease", "30s"]);
    let service = homes[0].service().await;
    wait_for("both nodes to be up", WAIT, || {
        let service = service.clone();
        async move { service.nodes().await.ok().filter(|n| n.len() == 2) }
    })
    .await;
    let (run, _) = homes[0].wait_settled(eval, WAIT).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    assert_eq!(run.node.as_deref(), Some("nb"));
    for member in &members {
        assert_eq!(homes[0].run(*member).await.node.as_deref(), Some("na"));
    }
    // The evaluation ran on node b: its log is in node b's home.
    let log = log_of(&mut homes[0], eval, "main").await;
    assert!(log.contains(&eval_line(members[1])), "{log}");
}

/// The bundled `demo-sweep-pipeline`: the demo sweep, then a test of the winning learning
/// rate's weights (lr 1e-3 earns the most reward).
#[tokio::test]
async fn the_bundled_sweep_pipeline_tests_the_winning_learning_rate() {
    let mut home = TestHome::new();
    let out = home.cli_ok(&["run", "start", "--pipeline", "demo-sweep-pipeline"]);
    let ids: Vec<Uuid> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(ids.len(), 2, "{out}");
    home.start_daemon();
    let (run, _) = home.wait_settled(ids[1], WAIT).await;
    assert_eq!(run.state, RunState::Completed, "{:?}\n{}", run.reason, home.daemon_log());
    let log = log_of(&mut home, ids[1], "eval").await;
    assert!(log.contains("eval: testing tinker://demo-tune/lr-0.001/final"), "{log}");
}
