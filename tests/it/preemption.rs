//! Preemption (`daemon --preempt`): an urgent run takes the pool unit of a running preemptible
//! run of lower priority, which queues again (not failed, no attempt charged) and resumes
//! from its last checkpoint; protected runs are never taken; a daemon killed during the
//! victim's grace leaves no unit double-booked, the victim requeued once and the urgent run
//! started.

use std::time::Duration;

use lachesis::model::RunState;
use uuid::Uuid;

use crate::support::{TestHome, wait_for};

const T: Duration = Duration::from_secs(60);

/// How the stand-in trainer waits once it checkpointed: until stopped.
const PLAIN: &str = "exec sleep 600";
/// Noting SIGTERM in `term` and going on until SIGKILL.
const STUBBORN: &str = r#"trap 'echo term >> "$d/term"' TERM; while :; do sleep 1 & wait $!; done"#;
/// Checkpointing at step 130 on SIGUSR1, as a trainer that saves on request does.
const COOPERATIVE: &str = r#"trap 'printf "{\"batch\": 130, \"state_path\": \"tinker://x/weights/130\"}\n" >> "$d/checkpoints.jsonl"' USR1; while :; do sleep 1 & wait $!; done"#;

/// A trainer that, on a first attempt, writes a checkpoint at step 120 and waits as `wait`
/// says; a resumed attempt completes at once. Each attempt appends what it was handed to
/// `attempts`.
fn trainer(wait: &str) -> String {
    format!(
        r#"d="$1"
echo "start=${{LACHESIS_RESUME_STEP:-0}} gpu=$CUDA_VISIBLE_DEVICES" >> "$d/attempts"; [ -n "$LACHESIS_RESUME_STEP" ] && exit 0; printf '{{"batch": 120, "state_path": "tinker://x/weights/120"}}\n' >> "$d/checkpoints.jsonl"; {wait}"#
    )
}

/// A workflow of `trainer` holding one gpu unit, with `extra` keys (the script is a file:
/// argv's braces are the workflow's variables).
fn low(home: &TestHome, name: &str, wait: &str, extra: &str) {
    let script = home.path().join(format!("{name}.sh"));
    std::fs::write(&script, trainer(wait)).unwrap();
    home.workflow(
        name,
        &format!(
            r#"name: {name}
needs: {{gpu: 1}}
stages:
  - name: trainer
    argv: [sh, "{script}", "{{run_dir}}"]
completion: {{stages: [trainer]}}
checkpoints:
  jsonl: {{file: "{{run_dir}}/checkpoints.jsonl", step: /batch, path: /state_path}}
{extra}"#,
            script = script.display()
        ),
    );
}

/// The urgent run: one gpu unit, done once `release` appears in its run directory.
fn urgent(home: &TestHome) {
    home.workflow(
        "urgent",
        r#"name: urgent
needs: {gpu: 1}
stages:
  - name: eval
    argv: [sh, -c, 'while [ ! -f "$1/release" ]; do sleep 0.05; done', sh, "{run_dir}"]
completion: {stages: [eval]}
"#,
    );
}

/// Starts the daemon with `args` and waits for it to publish its pools (a submission needing
/// units is checked against them).
async fn start_daemon(home: &mut TestHome, args: &[&str]) {
    home.start_daemon_with(args);
    let dir = home.path().to_path_buf();
    wait_for("the daemon to publish its pools", T, || {
        let dir = dir.clone();
        async move { lachesis::node_pools::published(&dir).ok().filter(|p| !p.is_empty()) }
    })
    .await;
}

async fn wait_checkpoint(home: &mut TestHome, id: Uuid) {
    let service = home.service().await;
    wait_for("the victim's checkpoint to be recorded", T, || {
        let service = service.clone();
        async move { (!service.checkpoints_of(id).await.unwrap().is_empty()).then_some(()) }
    })
    .await;
}

/// Event ids are global and increasing: the id of the first event of `id` whose message
/// starts with `prefix`.
async fn event_id(home: &mut TestHome, id: Uuid, prefix: &str) -> i64 {
    let events = home.events(id).await;
    let messages: Vec<&str> = events.iter().map(|e| e.message.as_str()).collect();
    events
        .iter()
        .find(|e| e.message.starts_with(prefix))
        .map(|e| e.id)
        .unwrap_or_else(|| panic!("no '{prefix}' in {messages:#?}"))
}

#[tokio::test]
async fn an_urgent_run_takes_the_unit_and_the_victim_resumes_from_its_checkpoint() {
    let hook = crate::support::Receiver::start(vec![]).await;
    let mut home = TestHome::new();
    home.environ = vec![("LACHESIS_WEBHOOKS".into(), hook.url.clone())];
    low(&home, "low", PLAIN, "preemptible: true\nmin_runtime: 0s\n");
    urgent(&home);
    start_daemon(&mut home, &["--pool", "gpu=0", "--preempt"]).await;
    let victim = home.submit(&["--workflow", "low"]);
    home.wait_state(victim, RunState::Running, T).await;
    wait_checkpoint(&mut home, victim).await;

    let eval = home.submit(&["--workflow", "urgent", "--priority", "10"]);
    let run = home.wait_state(eval, RunState::Running, T).await;
    let (short_eval, short_victim) = (&eval.to_string()[..8], &victim.to_string()[..8]);
    assert_eq!(run.params.resolved.get("pool.gpu").map(String::as_str), Some("0"));

    let back = home.run(victim).await;
    assert_eq!((back.state, back.preemptions, back.attempt), (RunState::Pending, 1, 2), "{:?}", back.reason);
    assert!(!back.params.resolved.contains_key("preempted_by"), "the requeue clears the decision");
    let messages = home.messages(victim).await;
    let stop = messages
        .iter()
        .find(|m| m.starts_with(&format!("stop: preempted by run {short_eval} for 1 gpu unit; ≈ ")))
        .unwrap_or_else(|| panic!("{messages:#?}"));
    assert!(stop.ends_with("of work since the checkpoint at step 120 will be redone"), "{stop}");
    assert!(
        messages.iter().any(|m| m == "attempt 2 resumes from step 120 (tinker://x/weights/120)"),
        "{messages:#?}"
    );
    let told = home.messages(eval).await;
    assert!(told.iter().any(|m| m == &format!("took gpu unit 0 from run {short_victim}")), "{told:#?}");
    // The urgent run was claimed only after the victim was queued again (its stages gone).
    let requeued = event_id(&mut home, victim, "preempted: ").await;
    let claimed = event_id(&mut home, eval, "claim").await;
    assert!(requeued < claimed, "the urgent run started before the victim's stages were gone");
    let status: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["run", "status", &victim.to_string(), "--json"])).unwrap();
    assert_eq!(status["preemptions"], 1, "{status:#}");
    assert_eq!(status["preempted_work_ms"].as_i64().unwrap_or(0), back.preempted_work, "{status:#}");
    let text = home.cli_ok(&["run", "status", &victim.to_string()]);
    assert!(text.contains("preempted once; ≈ "), "{text}");

    // The work redone is the time from the checkpoint to the victim's end: at least until the
    // decision, at most until the requeue (the store's clock throughout).
    let checkpoint_at = home.service().await.checkpoints_of(victim).await.unwrap()[0].at;
    let events = home.events(victim).await;
    let at = |prefix: &str| events.iter().find(|e| e.message.starts_with(prefix)).map(|e| e.at).unwrap();
    let (stopped_at, requeued_at) = (at("stop: preempted by"), at("preempted: "));
    assert!(
        (stopped_at - checkpoint_at..=requeued_at - checkpoint_at).contains(&back.preempted_work),
        "{} not in {}..={}",
        back.preempted_work,
        stopped_at - checkpoint_at,
        requeued_at - checkpoint_at
    );
    let posted = wait_for("the run_preempted webhook", T, || {
        let got = hook.of_kind("run_preempted");
        async move { got.into_iter().next() }
    })
    .await;
    assert_eq!(
        (posted["ids"]["run"].as_str(), posted["state"].as_str()),
        (Some(&*victim.to_string()), Some("stopping"))
    );
    assert_eq!(posted["summary"]["preempted_by"], eval.to_string());

    // Once the urgent run ends, the victim resumes from step 120 on the same unit.
    std::fs::write(run.run_dir.join("release"), "").unwrap();
    let (done, _) = home.wait_settled(victim, T).await;
    assert_eq!(done.state, RunState::Completed, "{:?}\n{}", done.reason, home.daemon_log());
    let attempts = std::fs::read_to_string(done.run_dir.join("attempts")).unwrap();
    assert_eq!(attempts, "start=0 gpu=0\nstart=120 gpu=0\n");
    assert_eq!(home.run(eval).await.state, RunState::Completed);
    assert_eq!((done.preemptions, done.attempt, done.charged_attempts()), (1, 2, 1));
    // The report counts the preemption and the work it lost.
    let report: serde_json::Value = serde_json::from_str(&home.cli_ok(&["report", "--json"])).unwrap();
    assert_eq!(report["preemptions"], 1, "{report:#}");
    assert_eq!(report["preempted_work_ms"], done.preempted_work, "{report:#}");
    let row = report["runs"].as_array().unwrap().iter().find(|r| r["id"] == victim.to_string()).unwrap();
    assert_eq!(row["preemptions"], 1, "{row:#}");
}

#[tokio::test]
async fn protected_runs_are_never_preempted() {
    let mut home = TestHome::new();
    low(&home, "fixed", PLAIN, "min_runtime: 0s\n");
    low(&home, "young", PLAIN, "preemptible: true\nmin_runtime: 1h\n");
    low(&home, "peer", PLAIN, "preemptible: true\nmin_runtime: 0s\n");
    urgent(&home);
    home.workflow("probe", "name: probe\nstages:\n  - {name: main, argv: [sleep, '600']}\n");
    start_daemon(&mut home, &["--pool", "gpu=0,1,2", "--preempt"]).await;
    let holders = [
        home.submit(&["--workflow", "fixed"]),
        home.submit(&["--workflow", "young"]),
        home.submit(&["--workflow", "peer", "--priority", "10"]),
    ];
    for id in holders {
        home.wait_state(id, RunState::Running, T).await;
    }
    let eval = home.submit(&["--workflow", "urgent", "--priority", "10"]);
    // Queued after the urgent run at its priority: the claim that starts it looked at the urgent
    // run first, and decided any preemption for it in the same pass.
    let probe = home.submit(&["--workflow", "probe", "--priority", "10"]);
    home.wait_state(probe, RunState::Running, T).await;
    assert_eq!(home.run(eval).await.state, RunState::Pending);
    for id in holders {
        let run = home.run(id).await;
        assert_eq!((run.state, run.preemptions), (RunState::Running, 0), "{}", run.workflow);
        let messages = home.messages(id).await;
        assert!(!messages.iter().any(|m| m.contains("preempted")), "{}: {messages:#?}", run.workflow);
    }
}

#[tokio::test]
async fn without_preempt_nothing_is_preempted() {
    let mut home = TestHome::new();
    low(&home, "low", PLAIN, "preemptible: true\nmin_runtime: 0s\n");
    urgent(&home);
    home.workflow("probe", "name: probe\nstages:\n  - {name: main, argv: [sleep, '600']}\n");
    start_daemon(&mut home, &["--pool", "gpu=0"]).await;
    let victim = home.submit(&["--workflow", "low"]);
    home.wait_state(victim, RunState::Running, T).await;
    let eval = home.submit(&["--workflow", "urgent", "--priority", "10"]);
    let probe = home.submit(&["--workflow", "probe", "--priority", "10"]);
    home.wait_state(probe, RunState::Running, T).await;
    assert_eq!(home.run(eval).await.state, RunState::Pending);
    let run = home.run(victim).await;
    assert_eq!((run.state, run.preemptions), (RunState::Running, 0));
}

#[tokio::test]
async fn a_daemon_killed_during_the_grace_requeues_the_victim_once_and_starts_the_urgent_run() {
    let mut home = TestHome::new();
    low(&home, "low", STUBBORN, "preemptible: true\nmin_runtime: 0s\n");
    urgent(&home);
    start_daemon(&mut home, &["--pool", "gpu=0", "--preempt"]).await;
    let victim = home.submit(&["--workflow", "low"]);
    let run = home.wait_state(victim, RunState::Running, T).await;
    wait_checkpoint(&mut home, victim).await;
    let eval = home.submit(&["--workflow", "urgent", "--priority", "10"]);
    // The victim got SIGTERM and holds on through its grace: the decision is written, the
    // unit not yet free.
    let term = run.run_dir.join("term");
    wait_for("the victim to be asked to stop", T, || {
        let term = term.clone();
        async move { term.exists().then_some(()) }
    })
    .await;
    assert_eq!(home.run(victim).await.state, RunState::Stopping);
    assert_eq!(home.run(eval).await.state, RunState::Pending, "the unit is still the victim's");
    home.kill_daemon();
    start_daemon(&mut home, &["--pool", "gpu=0", "--preempt"]).await;

    home.wait_state(eval, RunState::Running, T).await;
    let back = home.run(victim).await;
    assert_eq!((back.state, back.preemptions, back.attempt), (RunState::Pending, 1, 2), "{:?}", back.reason);
    let messages = home.messages(victim).await;
    let requeues = messages.iter().filter(|m| m.starts_with("preempted: ")).count();
    assert_eq!(requeues, 1, "{messages:#?}");
    let requeued = event_id(&mut home, victim, "preempted: ").await;
    let claimed = event_id(&mut home, eval, "claim").await;
    assert!(requeued < claimed, "the urgent run started before the victim's stages were gone");
    let stages = home.stages(victim).await;
    assert!(stages.iter().all(|s| !s.record.state.is_live()), "{stages:#?}");
}

#[tokio::test]
async fn a_parallel_slot_is_taken_like_a_unit() {
    let mut home = TestHome::new();
    low(&home, "low", PLAIN, "preemptible: true\nmin_runtime: 0s\n");
    // Without pools: the runs need nothing but a slot of `--max-parallel 1`.
    let text = std::fs::read_to_string(home.workflows().join("low.yaml")).unwrap();
    home.workflow("low", &text.replace("needs: {gpu: 1}\n", ""));
    home.workflow("urgent", "name: urgent\nstages:\n  - {name: main, argv: [sleep, '600']}\n");
    home.start_daemon_with(&["--max-parallel", "1", "--preempt"]);
    let victim = home.submit(&["--workflow", "low"]);
    home.wait_state(victim, RunState::Running, T).await;
    wait_checkpoint(&mut home, victim).await;
    let eval = home.submit(&["--workflow", "urgent", "--priority", "10"]);
    home.wait_state(eval, RunState::Running, T).await;
    let back = home.run(victim).await;
    assert_eq!((back.state, back.preemptions), (RunState::Pending, 1));
    let messages = home.messages(victim).await;
    let want = format!("stop: preempted by run {} for a parallel slot; ≈ ", &eval.to_string()[..8]);
    assert!(messages.iter().any(|m| m.starts_with(&want)), "{messages:#?}");
    let told = home.messages(eval).await;
    assert!(
        told.iter().any(|m| m == &format!("took a parallel slot from run {}", &victim.to_string()[..8])),
        "{told:#?}"
    );
}

#[tokio::test]
async fn a_victim_stopped_during_its_preemption_ends_stopped() {
    let mut home = TestHome::new();
    low(&home, "low", STUBBORN, "preemptible: true\nmin_runtime: 0s\n");
    urgent(&home);
    start_daemon(&mut home, &["--pool", "gpu=0", "--preempt"]).await;
    let victim = home.submit(&["--workflow", "low"]);
    let run = home.wait_state(victim, RunState::Running, T).await;
    let eval = home.submit(&["--workflow", "urgent", "--priority", "10"]);
    let term = run.run_dir.join("term");
    wait_for("the victim to be asked to stop", T, || {
        let term = term.clone();
        async move { term.exists().then_some(()) }
    })
    .await;
    home.cli_ok(&["run", "stop", &victim.to_string()]);
    let (ended, _) = home.wait_settled(victim, T).await;
    assert_eq!(
        (ended.state, ended.preemptions, ended.attempt),
        (RunState::Stopped, 0, 1),
        "{:?}",
        ended.reason
    );
    home.wait_state(eval, RunState::Running, T).await;
}

#[tokio::test]
async fn a_victim_asked_to_checkpoint_is_stopped_at_its_new_checkpoint() {
    let mut home = TestHome::new();
    // A wait far past the test's: only the new checkpoint can stop the victim in time.
    low(
        &home,
        "low",
        COOPERATIVE,
        "preemptible: true\nmin_runtime: 0s\npreempt_signal: SIGUSR1\npreempt_wait: 10m\n",
    );
    urgent(&home);
    start_daemon(&mut home, &["--pool", "gpu=0", "--preempt"]).await;
    let victim = home.submit(&["--workflow", "low"]);
    home.wait_state(victim, RunState::Running, T).await;
    wait_checkpoint(&mut home, victim).await;
    let eval = home.submit(&["--workflow", "urgent", "--priority", "10"]);
    let run = home.wait_state(eval, RunState::Running, T).await;
    let short_eval = &eval.to_string()[..8];
    let messages = home.messages(victim).await;
    let asked = format!(
        "asked to checkpoint now (SIGUSR1) before its preemption by run {short_eval}: stopped at its next checkpoint, or in 10m"
    );
    assert!(messages.contains(&asked), "{messages:#?}");
    let stop = messages.iter().find(|m| m.starts_with("stop: preempted by")).unwrap();
    assert!(stop.ends_with("since the checkpoint at step 130 will be redone"), "{stop}");
    std::fs::write(run.run_dir.join("release"), "").unwrap();
    let (done, _) = home.wait_settled(victim, T).await;
    assert_eq!(done.state, RunState::Completed, "{:?}", done.reason);
    let attempts = std::fs::read_to_string(done.run_dir.join("attempts")).unwrap();
    assert_eq!(attempts, "start=0 gpu=0\nstart=130 gpu=0\n");
}

#[tokio::test]
async fn a_sampler_sees_no_unit_held_by_two_live_runs_over_repeated_preemptions() {
    let mut home = TestHome::new();
    low(&home, "low", PLAIN, "preemptible: true\nmin_runtime: 0s\n");
    urgent(&home);
    start_daemon(&mut home, &["--pool", "gpu=0", "--preempt"]).await;
    let service = home.service().await;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Each sample is one read of the runs table: a consistent view of who holds what.
    let sampler = tokio::spawn({
        let (service, done) = (service.clone(), done.clone());
        async move {
            let (mut samples, mut doubled) = (0u32, Vec::new());
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let page = lachesis::model::RunPage { limit: 100, ..Default::default() };
                let runs = service.runs_page(&page).await.unwrap();
                let held: Vec<(Uuid, &String)> = runs
                    .iter()
                    .filter(|r| r.state.is_in_flight())
                    .flat_map(|r| r.units.get("gpu").into_iter().flatten().map(move |u| (r.id, u)))
                    .collect();
                let mut units: Vec<&String> = held.iter().map(|(_, u)| *u).collect();
                units.sort_unstable();
                units.dedup();
                if units.len() < held.len() {
                    doubled.push(format!("{held:?}"));
                }
                samples += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (samples, doubled)
        }
    });
    for _ in 0..5 {
        let victim = home.submit(&["--workflow", "low"]);
        home.wait_state(victim, RunState::Running, T).await;
        wait_checkpoint(&mut home, victim).await;
        let eval = home.submit(&["--workflow", "urgent", "--priority", "10"]);
        let run = home.wait_state(eval, RunState::Running, T).await;
        std::fs::write(run.run_dir.join("release"), "").unwrap();
        let (resumed, _) = home.wait_settled(victim, T).await;
        assert_eq!((resumed.state, resumed.preemptions), (RunState::Completed, 1), "{:?}", resumed.reason);
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (samples, doubled) = sampler.await.unwrap();
    assert!(samples > 10, "{samples} samples");
    assert!(doubled.is_empty(), "a unit held by two live runs: {doubled:#?}");
}
