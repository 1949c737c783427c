//! The daemon as users meet it: runs complete, survive a killed supervisor, queue in order,
//! and never signal a process that isn't theirs.

use std::time::Duration;

use lachesis::launch::process::{Liveness, identity_of, liveness};
use lachesis::model::{Exit, ProcessState, RunState};

use crate::support::{
    TestHome, assert_no_stage_alive, fork_server_of, gone_or_zombie, parent_and_state, processes_mentioning,
    stderr, wait_for,
};

const T: Duration = Duration::from_secs(30);

/// `a` holds the run up (a long-lived server); `b` decides it by exiting with `code`.
fn two_stage(name: &str, a_delay: &str, b_script: &str) -> String {
    format!(
        "name: {name}\nstages:\n  - name: a\n    argv: [sleep, \"60\"]\n    start_delay: {a_delay}\n  - name: b\n    argv: [sh, -c, \"{b_script}\"]\ncompletion: {{stages: [b]}}\nstop_grace: 3s\n"
    )
}

#[tokio::test]
async fn demo_workflow_completes_and_records_every_exit() {
    let mut home = TestHome::new();
    home.start_daemon();
    let id = home.submit(&["--workflow", "demo", "--var", "steps=2"]);
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    assert_eq!(run.reason.as_deref(), Some("stage 'trainer' finished"));
    assert!(stages.iter().all(|s| s.record.exit == Some(Exit::Code(0))), "{stages:?}");
    let trainer_log = std::fs::read_to_string(&stages[1].log_path).unwrap();
    assert!(trainer_log.contains("Step 2/2") && trainer_log.contains("Training complete!"), "{trainer_log}");
    let events = home.messages(id).await;
    for want in ["claim", "all stages up", "complete: stage 'trainer' finished", "exited with code 0"] {
        assert!(events.iter().any(|e| e.contains(want)), "no event {want:?} in {events:#?}");
    }
    // env and api were stopped after the trainer finished, in reverse start order.
    let sigterm: Vec<_> =
        home.events(id).await.into_iter().filter(|e| e.message.starts_with("sent SIGTERM")).collect();
    assert_eq!(sigterm.iter().map(|e| e.stage.clone().unwrap()).collect::<Vec<_>>(), ["env", "api"]);
    assert_no_stage_alive(&stages);
}

#[tokio::test]
async fn finished_runs_are_posted_to_the_global_webhooks() {
    let hook = crate::support::Receiver::start(vec![]).await;
    let mut home = TestHome::new();
    home.environ = vec![("LACHESIS_WEBHOOKS".into(), hook.url.clone())];
    home.workflow("quick", "name: quick\nstages:\n  - {name: main, argv: [sh, -c, \"exit 4\"]}\n");
    home.start_daemon();
    let id = home.submit(&["--workflow", "quick"]);
    let body = wait_for("the run_failed webhook", T, || {
        let got = hook.of_kind("run_failed");
        async move { got.into_iter().next() }
    })
    .await;
    assert_eq!(body["ids"]["run"], id.to_string());
    assert_eq!(body["summary"]["reason"], "stage 'main' exited with code 4");
}

#[tokio::test]
async fn daemon_killed_while_starting_resumes_the_start() {
    let mut home = TestHome::new();
    home.workflow("chain", &two_stage("chain", "2s", "sleep 0.5; exit 0"));
    home.start_daemon();
    let id = home.submit(&["--workflow", "chain"]);
    let service = home.service().await;
    wait_for("stage a to be starting", T, || {
        let service = service.clone();
        async move {
            (service.run_stages(id).await.unwrap()[0].record.state == ProcessState::Starting).then_some(())
        }
    })
    .await;
    home.kill_daemon();
    assert_eq!(home.run(id).await.state, RunState::Starting);
    home.start_daemon();
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}\n{}", run.reason, home.daemon_log());
    assert_eq!(stages[0].record.exit, Some(Exit::Signal(15)), "a is stopped with SIGTERM after b finished");
    assert_eq!(stages[1].record.exit, Some(Exit::Code(0)));
    let messages = home.messages(id).await;
    assert!(messages.iter().any(|m| m.starts_with("re-attached after a daemon restart")), "{messages:#?}");
    assert_no_stage_alive(&stages);
}

#[tokio::test]
async fn daemon_killed_while_running_still_learns_the_exit_code() {
    let mut home = TestHome::new();
    home.workflow("chain", &two_stage("chain", "100ms", "sleep 1.5; exit 3"));
    home.start_daemon();
    let id = home.submit(&["--workflow", "chain"]);
    home.wait_state(id, RunState::Running, T).await;
    home.kill_daemon();
    home.start_daemon();
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Failed);
    assert_eq!(run.reason.as_deref(), Some("stage 'b' exited with code 3"));
    assert_eq!(stages[1].record.exit, Some(Exit::Code(3)));
    assert_eq!(stages[0].record.exit, Some(Exit::Signal(15)));
    assert_no_stage_alive(&stages);
}

#[tokio::test]
async fn stages_are_forked_by_a_server_that_dies_with_the_daemon_while_their_shims_live_on() {
    let mut home = TestHome::new();
    home.workflow("chain", &two_stage("chain", "100ms", "sleep 1.5; exit 3"));
    home.start_daemon();
    let id = home.submit(&["--workflow", "chain"]);
    home.wait_state(id, RunState::Running, T).await;
    let daemon = home.daemon_pid().unwrap();
    let server = fork_server_of(daemon).expect("the daemon runs a shim fork server");
    let shim = home.stages(id).await[0].record.shim.clone().expect("stage a has a shim");
    assert_eq!(parent_and_state(shim.pid).map(|(parent, _)| parent), Some(server), "a's shim was forked");
    home.kill_daemon();
    assert!(gone_or_zombie(server), "the fork server exits with its daemon");
    assert_eq!(liveness(&shim), Liveness::Alive, "the shim outlives daemon and server");
    home.start_daemon();
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.reason.as_deref(), Some("stage 'b' exited with code 3"), "{}", home.daemon_log());
    assert_eq!(stages[0].record.exit, Some(Exit::Signal(15)));
    assert_no_stage_alive(&stages);
}

#[tokio::test]
async fn a_killed_fork_server_is_replaced_and_the_next_run_starts() {
    let mut home = TestHome::new();
    home.workflow("quick", "name: quick\nstages:\n  - {name: main, argv: [sh, -c, \"exit 0\"]}\n");
    home.start_daemon();
    let first = home.submit(&["--workflow", "quick"]);
    assert_eq!(home.wait_state(first, RunState::Completed, T).await.state, RunState::Completed);
    let daemon = home.daemon_pid().unwrap();
    let server = fork_server_of(daemon).expect("the daemon runs a shim fork server");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(server).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    wait_for("the fork server to die", T, || async move { gone_or_zombie(server).then_some(()) }).await;
    let second = home.submit(&["--workflow", "quick"]);
    let run = home.wait_state(second, RunState::Completed, T).await;
    assert_eq!(run.reason.as_deref(), Some("stage 'main' finished"), "{}", home.daemon_log());
    let replacement = fork_server_of(daemon).expect("a new fork server");
    assert_ne!(replacement, server);
    assert_eq!(parent_and_state(server), None, "the dead server was reaped");
}

#[tokio::test]
async fn stage_killed_while_the_daemon_is_down_is_reported_with_its_signal() {
    let mut home = TestHome::new();
    home.workflow("chain", &two_stage("chain", "100ms", "sleep 60"));
    home.start_daemon();
    let id = home.submit(&["--workflow", "chain"]);
    home.wait_state(id, RunState::Running, T).await;
    home.kill_daemon();
    let b = home.stages(id).await[1].record.process.clone().unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(b.pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let exit_file = home.run(id).await.run_dir.join(".status/b.exit.json");
    wait_for("the shim to record b's exit", T, || {
        let exists = exit_file.exists();
        async move { exists.then_some(()) }
    })
    .await;
    home.start_daemon();
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Failed);
    assert_eq!(run.reason.as_deref(), Some("stage 'b' exited with signal 9 (SIGKILL)"));
    assert_eq!(stages[1].record.exit, Some(Exit::Signal(9)));
    assert_no_stage_alive(&stages);
}

#[tokio::test]
async fn daemon_killed_while_stopping_finishes_the_stop() {
    let mut home = TestHome::new();
    // A stage that ignores SIGTERM, so stopping it takes the whole grace and ends in SIGKILL.
    home.workflow(
        "stubborn",
        "name: stubborn\nstop_grace: 2s\nstages:\n  - name: server\n    argv: [sh, -c, \"trap '' TERM; sleep 60\"]\n",
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "stubborn"]);
    home.wait_state(id, RunState::Running, T).await;
    home.cli_ok(&["run", "stop", &id.to_string()]);
    home.wait_state(id, RunState::Stopping, T).await;
    let service = home.service().await;
    wait_for("the SIGTERM event", T, || {
        let service = service.clone();
        async move {
            service
                .events_after(id, 0)
                .await
                .unwrap()
                .iter()
                .any(|e| e.message.starts_with("sent SIGTERM"))
                .then_some(())
        }
    })
    .await;
    home.kill_daemon();
    assert_eq!(home.run(id).await.state, RunState::Stopping);
    home.start_daemon();
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Stopped);
    assert_eq!(stages[0].record.exit, Some(Exit::Signal(9)));
    let messages = home.messages(id).await;
    assert!(messages.iter().any(|m| m.contains("sent SIGKILL")), "{messages:#?}");
    assert_no_stage_alive(&stages);
}

#[tokio::test]
async fn a_reused_pid_is_never_signalled_and_the_stage_is_lost() {
    let mut home = TestHome::new();
    home.workflow("chain", &two_stage("chain", "100ms", "sleep 60"));
    home.start_daemon();
    let id = home.submit(&["--workflow", "chain"]);
    home.wait_state(id, RunState::Running, T).await;
    home.kill_daemon();

    // Make stage b's recorded pids belong to an unrelated process: kill b's shim and process,
    // start a stranger, and write the stranger's pid with b's old start time into the store.
    let service = home.service().await;
    let mut b = service.run_stages(id).await.unwrap().remove(1);
    let (shim, process) = (b.record.shim.clone().unwrap(), b.record.process.clone().unwrap());
    for pid in [shim.pid, process.pid] {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    std::fs::remove_file(home.run(id).await.run_dir.join(".status/b.exit.json")).ok();
    let mut stranger = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let stranger_id = identity_of(stranger.id() as i32).unwrap();
    // The recorded identity: the stranger's pid, but a process that started a second earlier
    // (start times tick every 10 ms, so taking b's own start time could coincide on a fast run).
    let recorded =
        lachesis::model::ProcessIdentity { start_time: stranger_id.start_time - 100, ..stranger_id.clone() };
    assert_eq!(recorded.boot_id, shim.boot_id);
    b.record.shim = Some(recorded.clone());
    b.record.process = Some(recorded);
    service.overwrite_stage(&b).await.unwrap();

    home.start_daemon();
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Failed);
    let reason = run.reason.unwrap();
    assert!(
        reason.starts_with("stage 'b' lost: ") && reason.contains("belongs to another process"),
        "{reason}"
    );
    assert_eq!(stages[1].record.state, ProcessState::Lost);
    assert_eq!(liveness(&stranger_id), Liveness::Alive, "the stranger must not have been signalled");
    stranger.kill().unwrap();
    stranger.wait().unwrap();
}

/// Each run's (claimed, settled) times from its events and stages.
async fn span(home: &mut TestHome, id: uuid::Uuid) -> (i64, i64) {
    let claimed = home.events(id).await.iter().find(|e| e.message.starts_with("claim")).unwrap().at;
    let ended = home.stages(id).await.iter().filter_map(|s| s.record.ended_at).max().unwrap();
    (claimed, ended)
}

#[tokio::test]
async fn runs_holding_the_same_resource_never_overlap_and_go_in_priority_order() {
    let mut home = TestHome::new();
    home.workflow(
        "gpu",
        "name: gpu\nresources: [\"gpu:0\"]\nstages:\n  - {name: main, argv: [sleep, \"0.3\"]}\n",
    );
    // Queued while no daemon runs, so the order is decided by priority alone.
    let low = home.submit(&["--workflow", "gpu", "--priority", "1"]);
    let high = home.submit(&["--workflow", "gpu", "--priority", "5"]);
    let mid = home.submit(&["--workflow", "gpu", "--priority", "3"]);
    let listed = home.cli_ok(&["run", "list", "--state", "pending", "--json"]);
    let order: Vec<String> = serde_json::from_str::<Vec<serde_json::Value>>(&listed)
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(order, [high, mid, low].map(|id| id.to_string()));

    home.start_daemon();
    for id in [low, high, mid] {
        let (run, _) = home.wait_settled(id, T).await;
        assert_eq!(run.state, RunState::Completed);
    }
    let spans = [span(&mut home, high).await, span(&mut home, mid).await, span(&mut home, low).await];
    for pair in spans.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "runs overlapped or ran out of priority order: {spans:?}");
    }
}

#[tokio::test]
async fn runs_with_auto_ports_run_side_by_side() {
    let mut home = TestHome::new();
    home.workflow(
        "served",
        "name: served\nports: {http: auto}\nstages:\n  - name: main\n    argv: [sh, -c, \"echo {port.http} > port; sleep 1\"]\n",
    );
    home.start_daemon();
    let ids = [home.submit(&["--workflow", "served"]), home.submit(&["--workflow", "served"])];
    for id in ids {
        home.wait_settled(id, T).await;
    }
    let (a, b) = (span(&mut home, ids[0]).await, span(&mut home, ids[1]).await);
    assert!(b.0 < a.1, "runs without a shared resource should overlap: {a:?} {b:?}");
    let ports: Vec<String> = futures_ports(&mut home, &ids).await;
    assert_ne!(ports[0], ports[1], "each run gets its own port");
}

async fn futures_ports(home: &mut TestHome, ids: &[uuid::Uuid]) -> Vec<String> {
    let mut ports = Vec::new();
    for id in ids {
        let dir = home.run(*id).await.run_dir;
        ports.push(std::fs::read_to_string(dir.join("port")).unwrap().trim().to_string());
    }
    ports
}

#[tokio::test]
async fn a_missing_stage_binary_fails_the_run_naming_stage_and_cause() {
    let mut home = TestHome::new();
    home.workflow(
        "broken",
        "name: broken\nstages:\n  - {name: api, argv: [sleep, \"60\"]}\n  - {name: trainer, argv: [/no/such/trainer, --config, x]}\n",
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "broken"]);
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Failed);
    assert_eq!(
        run.reason.as_deref(),
        Some("stage 'trainer' failed to start: cannot start '/no/such/trainer': no such file or directory")
    );
    // The stage already started was stopped.
    assert_eq!(stages[0].record.exit, Some(Exit::Signal(15)));
    assert_no_stage_alive(&stages);
}

#[tokio::test]
async fn a_stage_exiting_during_start_up_fails_the_run() {
    let mut home = TestHome::new();
    home.workflow(
        "early",
        "name: early\nstages:\n  - {name: api, argv: [sh, -c, \"exit 7\"], start_delay: 5s}\n  - {name: env, argv: [\"true\"]}\n",
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "early"]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.reason.as_deref(), Some("stage 'api' exited with code 7 during start-up"));
}

#[tokio::test]
async fn a_probe_that_never_answers_times_out() {
    let mut home = TestHome::new();
    home.workflow(
        "deaf",
        "name: deaf\nstages:\n  - name: api\n    argv: [sleep, \"60\"]\n    probe: {tcp: \"127.0.0.1:9\"}\n    start_timeout: 1s\n",
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "deaf"]);
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.reason.as_deref(), Some("stage 'api' not up after 1s (tcp 127.0.0.1:9 never answered)"));
    assert_no_stage_alive(&stages);
}

#[tokio::test]
async fn a_probe_ends_the_start_delay_early() {
    let mut home = TestHome::new();
    home.workflow(
        "probed",
        "name: probed\nports: {http: auto}\nstages:\n  - name: api\n    argv: [python3, -m, http.server, --bind, 127.0.0.1, \"{port.http}\"]\n    start_delay: 60s\n    probe: {http: \"http://127.0.0.1:{port.http}/\"}\n",
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "probed"]);
    home.wait_state(id, RunState::Running, Duration::from_secs(20)).await;
    let stage = home.stages(id).await.remove(0);
    assert!(stage.ready_at.unwrap() - stage.record.started_at.unwrap() < 10_000);
    home.cli_ok(&["run", "stop", &id.to_string()]);
    let (run, _) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Stopped);
}

#[tokio::test]
async fn stopping_a_pending_run_cancels_it() {
    let mut home = TestHome::new();
    let id = home.submit(&["--workflow", "demo"]);
    let out = home.cli_ok(&["run", "stop", &id.to_string()[..13]]);
    assert!(out.contains("stopped"), "{out}");
    assert_eq!(home.run(id).await.reason.as_deref(), Some("cancelled before it started"));
    let again = home.cli(&["run", "stop", &id.to_string()]);
    assert!(!again.status.success());
    assert!(stderr(&again).contains("has already ended (stopped)"), "{}", stderr(&again));
}

#[tokio::test]
async fn a_second_daemon_refuses_to_start() {
    let mut home = TestHome::new();
    home.start_daemon();
    let id = home.submit(&["--workflow", "demo", "--var", "steps=1"]);
    home.wait_settled(id, T).await; // the first daemon is up and working
    let out = home.cli(&["daemon"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("another lachesis daemon is already running"), "{}", stderr(&out));
}

#[tokio::test]
async fn the_daemon_leaves_nothing_behind_after_stopping_runs() {
    let mut home = TestHome::new();
    home.workflow("chain", &two_stage("chain", "100ms", "sleep 60"));
    home.start_daemon();
    let id = home.submit(&["--workflow", "chain"]);
    home.wait_state(id, RunState::Running, T).await;
    home.cli_ok(&["run", "stop", &id.to_string()]);
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Stopped);
    assert!(stages.iter().all(|s| s.record.exit == Some(Exit::Signal(15))), "{stages:?}");
    home.kill_daemon();
    assert_eq!(processes_mentioning(home.path()), Vec::<i32>::new());
}

#[tokio::test]
async fn credentials_reach_the_stages_but_never_the_home() {
    let secret = "tnkr-test-3f9c1a7b2e5d4c6a8b0e";
    let mut home = TestHome::new();
    home.environ = vec![("TINKER_API_KEY".into(), secret.into())];
    home.workflow(
        "keyed",
        "name: keyed\ncredentials: [TINKER_API_KEY]\nstages:\n  - name: main\n    argv: [sh, -c, 'test -n \"$TINKER_API_KEY\" && echo key present']\n",
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "keyed"]);
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    assert_eq!(std::fs::read_to_string(&stages[0].log_path).unwrap().trim(), "key present");
    home.kill_daemon();
    let found = crate::support::files_containing(home.path(), secret.as_bytes());
    assert!(found.is_empty(), "the secret was written to {found:?}");

    // Without the credential, the run is refused with what is missing, and nothing is queued.
    home.environ.clear();
    let err = stderr(&home.cli(&["run", "start", "--workflow", "keyed"]));
    assert!(
        err.contains("workflow 'keyed' needs TINKER_API_KEY in the environment (not set: TINKER_API_KEY)"),
        "{err}"
    );
}

#[tokio::test]
async fn a_deciding_stage_that_exits_0_at_once_completes_its_run_before_its_start_delay() {
    let mut home = TestHome::new();
    // A trainer resumed at its last checkpoint: done long before its start delay.
    home.workflow(
        "resumed",
        "name: resumed\nstages:\n  - {name: s, argv: [sh, -c, \"echo Step 3/3\"], start_delay: 60s}\ncompletion: {stages: [s]}\n",
    );
    home.workflow(
        "resumed-total",
        "name: resumed-total\nstages:\n  - {name: s, argv: [sh, -c, \"echo Step 3/3\"], start_delay: 60s}\ncompletion: {stages: [s], require_total: true}\nprogress:\n  log: {stage: s, pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}\n",
    );
    home.workflow(
        "short",
        "name: short\nstages:\n  - {name: s, argv: [sh, -c, \"echo Step 1/3\"], start_delay: 60s}\ncompletion: {stages: [s], require_total: true}\nprogress:\n  log: {stage: s, pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}\n",
    );
    home.start_daemon();
    let resumed = home.submit(&["--workflow", "resumed"]);
    let total = home.submit(&["--workflow", "resumed-total"]);
    let short = home.submit(&["--workflow", "short"]);
    // Well within the 60 s start delay: nothing waits for it.
    for (id, state, reason) in [
        (resumed, RunState::Completed, "stage 's' finished"),
        (total, RunState::Completed, "stage 's' finished"),
        (short, RunState::Failed, "stage 's' exited 0 at step 1 of 3"),
    ] {
        let (run, stages) = home.wait_settled(id, T).await;
        assert_eq!((run.state, run.reason.as_deref()), (state, Some(reason)), "{}", run.workflow);
        assert_eq!(stages[0].record.exit, Some(Exit::Code(0)));
        let events = home.messages(id).await;
        assert!(events.iter().any(|e| e.starts_with("started (pid")), "{events:#?}");
        assert!(!events.iter().any(|e| e.contains("all stages up")), "it never came up: {events:#?}");
    }
}

#[tokio::test]
async fn a_stage_meant_to_stay_up_that_exits_0_during_start_up_fails_its_run() {
    let mut home = TestHome::new();
    home.workflow(
        "early-zero",
        "name: early-zero\nstages:\n  - {name: api, argv: [\"true\"], start_delay: 60s}\n  - {name: trainer, argv: [\"true\"]}\ncompletion: {stages: [trainer]}\n",
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "early-zero"]);
    let (run, stages) = home.wait_settled(id, T).await;
    assert_eq!(
        (run.state, run.reason.as_deref()),
        (RunState::Failed, Some("stage 'api' exited with code 0 during start-up"))
    );
    assert_eq!(stages[1].record.state, ProcessState::Pending, "the trainer never started");
}

#[tokio::test]
async fn a_retrying_run_can_be_stopped() {
    use lachesis::model::RunTrigger;
    let mut home = TestHome::new();
    home.workflow("quick", "name: quick\nstages:\n  - {name: main, argv: [\"true\"]}\n");
    // No daemon: the run is put in `retrying` by hand, as a daemon would between attempts.
    let id = home.submit(&["--workflow", "quick"]);
    let service = home.service().await;
    let run = service.run(id).await.unwrap().unwrap();
    let run = service.move_run(&run, RunTrigger::Claim, None).await.unwrap();
    let run = service.move_run(&run, RunTrigger::Retry, Some("exit 75 is transient")).await.unwrap();
    assert_eq!(run.state, RunState::Retrying);
    let stopped = home.service().await.stop_run(&id.to_string()).await.unwrap();
    assert_eq!(stopped.state, RunState::Stopping, "the table allows retrying → stopping");
    // The CLI says the same, and a second request is no error.
    home.cli_ok(&["run", "stop", &id.to_string()]);
    assert_eq!(home.run(id).await.state, RunState::Stopping);
}

/// Raises this process's soft limit on open files to its hard limit (the daemon it starts
/// inherits it): a thousand live stages hold a report pipe each.
fn raise_fd_limit() {
    use rustix::process::{Resource, getrlimit};
    if let Some(hard) = getrlimit(Resource::Nofile).maximum {
        let limit = rustix::process::Rlimit { current: Some(hard), maximum: Some(hard) };
        let _ = rustix::process::setrlimit(Resource::Nofile, limit);
    }
}

#[tokio::test]
async fn a_thousand_runs_started_at_once_all_complete() {
    const RUNS: usize = 1000;
    raise_fd_limit();
    let mut home = TestHome::new();
    home.workflow("burst", "name: burst\nstages:\n  - {name: s, argv: [sleep, \"1\"]}\n");
    home.start_daemon_with(&["--max-parallel", "1000"]);
    let out = home.cli_ok(&["run", "start", "--workflow", "burst", "--count", &RUNS.to_string()]);
    let ids: Vec<uuid::Uuid> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(ids.len(), RUNS);
    let service = home.service().await;
    let counts = wait_for("every run to end", Duration::from_secs(240), || {
        let service = service.clone();
        async move {
            let counts = service.run_counts().await.unwrap();
            let ended: i64 = counts.iter().filter(|(state, _)| state.is_terminal()).map(|(_, n)| n).sum();
            (ended as usize == RUNS).then_some(counts)
        }
    })
    .await;
    let failed: Vec<_> = service
        .runs(&lachesis::model::RunQuery { state: Some(RunState::Failed), limit: Some(5) })
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.reason)
        .collect();
    assert_eq!(
        counts.iter().collect::<Vec<_>>(),
        [(RunState::Completed, RUNS as i64)],
        "some failed, e.g. {failed:?}"
    );
}

/// The daemon raises its soft open-file limit to the hard one, so a burst of starts is not
/// throttled at the usual 1,024.
#[tokio::test]
async fn the_daemon_raises_its_open_file_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    use std::os::unix::process::CommandExt;
    let hard = getrlimit(Resource::Nofile).maximum;
    if hard.is_none_or(|hard| hard <= 1024) {
        eprintln!("skipped: the hard open-file limit here is {hard:?}, nothing to raise to");
        return;
    }
    let home = TestHome::new();
    let mut cmd = home.command(&["daemon"]);
    // SAFETY: setrlimit is async-signal-safe; the child starts the daemon at the usual soft limit.
    unsafe {
        cmd.pre_exec(move || {
            setrlimit(Resource::Nofile, Rlimit { current: Some(1024), maximum: hard }).map_err(Into::into)
        });
    }
    let mut daemon =
        cmd.stdin(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let pid = daemon.id();
    let soft = || {
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
        let line = limits.lines().find(|l| l.starts_with("Max open files"))?.to_string();
        line.split_whitespace().nth(3)?.parse::<u64>().ok()
    };
    wait_for("the daemon's soft limit to reach its hard limit", Duration::from_secs(10), || async {
        soft().filter(|soft| Some(*soft) == hard)
    })
    .await;
    daemon.kill().unwrap();
    daemon.wait().unwrap();
}
