//! Preemption (`daemon --preempt`): an urgent run takes the pool unit of a running preemptible
//! run of lower priority, which queues again (not failed, no attempt charged) and resumes
//! from its last checkpoint; protected runs are never taken; a daemon killed (SIGKILL) at any
//! point of a preemption — after the decision, during the grace, once the victim's stages are
//! gone, after its requeue — leaves no unit double-booked, the victim requeued once and the
//! urgent run started.

use std::time::Duration;

use lachesis::failpoint::Failpoint;
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
        async move { (!service.run_checkpoints_of(id).await.unwrap().is_empty()).then_some(()) }
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
    assert_eq!(run.units().get("gpu").map(Vec::as_slice), Some(&["0".to_string()][..]));

    let back = home.run(victim).await;
    assert_eq!((back.state, back.preemptions, back.attempt), (RunState::Pending, 1, 2), "{:?}", back.reason);
    assert_eq!(back.params.preempted_by, None, "the requeue clears the decision");
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
    let checkpoint_at = home.service().await.run_checkpoints_of(victim).await.unwrap()[0].at;
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

/// Where a daemon is killed in the course of a preemption.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Crash {
    /// Right after the decision's commit, before any signal reaches the victim's stages.
    Decided,
    /// During the victim's grace: it was sent SIGTERM and holds on.
    Grace,
    /// Once the victim's stages are gone and recorded so, before its requeue's commit.
    StagesGone,
    /// After the requeue's commit, before the urgent run's claim.
    Requeued,
}

impl Crash {
    /// The crash point (`crate::failpoint`) the daemon kills itself at; none for the grace,
    /// which lasts long enough for the test to kill it.
    fn failpoint(self) -> Option<Failpoint> {
        match self {
            Crash::Decided => Some(Failpoint::PreemptDecided),
            Crash::Grace => None,
            Crash::StagesGone => Some(Failpoint::PreemptStagesGone),
            Crash::Requeued => Some(Failpoint::PreemptRequeued),
        }
    }
}

/// Samples the runs table while a test goes on: each sample is one read, a consistent view
/// of who holds what; a unit held by two runs in flight is double-booked.
struct Sampler {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<(u32, Vec<String>)>,
}

impl Sampler {
    fn start(service: lachesis::service::Service) -> Sampler {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = tokio::spawn({
            let done = done.clone();
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
        Sampler { done, task }
    }

    /// Stops sampling; fails the test if any sample saw a unit held by two live runs.
    async fn finish(self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        let (samples, doubled) = self.task.await.unwrap();
        assert!(samples > 10, "{samples} samples");
        assert!(doubled.is_empty(), "a unit held by two live runs: {doubled:#?}");
    }
}

/// Preempts a victim for an urgent run, kills the daemon at `crash`, starts it again, and
/// checks what a user relies on: no unit held by two live runs (the sampler throughout, and
/// the victim's stages ended before the urgent run's began), the victim requeued exactly once,
/// the urgent run started on the unit, and the victim then resuming from its checkpoint.
async fn killed_and_restarted(crash: Crash, database_url: Option<String>) {
    let mut home = TestHome::new();
    home.database_url = database_url;
    // A victim that notes each SIGTERM and holds on shows whether one reached it before the
    // crash (after the decision) and holds the grace open (during it).
    let wait = match crash {
        Crash::Decided | Crash::Grace => STUBBORN,
        Crash::StagesGone | Crash::Requeued => PLAIN,
    };
    low(&home, "low", wait, "preemptible: true\nmin_runtime: 0s\n");
    urgent(&home);
    let args = ["--pool", "gpu=0", "--preempt"];
    // Armed for the first daemon only: the restarted one runs through.
    if let Some(point) = crash.failpoint() {
        home.environ.push((lachesis::failpoint::VARIABLE.into(), point.as_str().into()));
    }
    start_daemon(&mut home, &args).await;
    home.environ.clear();
    let sampler = Sampler::start(home.service().await);
    let victim = home.submit(&["--workflow", "low"]);
    let run = home.wait_state(victim, RunState::Running, T).await;
    wait_checkpoint(&mut home, victim).await;
    let eval = home.submit(&["--workflow", "urgent", "--priority", "10"]);
    let term = run.run_dir.join("term");
    match crash.failpoint() {
        Some(_) => home.wait_daemon_killed(T).await,
        None => {
            wait_for("the victim to be asked to stop", T, || {
                let term = term.clone();
                async move { term.exists().then_some(()) }
            })
            .await;
            home.kill_daemon();
        }
    }

    // What the store holds at the crash is the point named.
    let (crashed, waiting) = (home.run(victim).await, home.run(eval).await);
    assert_eq!(waiting.state, RunState::Pending, "the urgent run was claimed before the crash");
    let live = home.stages(victim).await.iter().filter(|s| s.record.state.is_live()).count();
    let decided = crashed.preempted_by() == Some(eval);
    let at_crash = (crashed.state, decided, crashed.preemptions, live);
    let want = match crash {
        Crash::Decided | Crash::Grace => (RunState::Stopping, true, 0, 1),
        Crash::StagesGone => (RunState::Stopping, true, 0, 0),
        Crash::Requeued => (RunState::Pending, false, 1, 0),
    };
    assert_eq!(at_crash, want, "{crash:?}: {:?}\n{}", crashed.reason, home.daemon_log());
    if crash == Crash::Decided {
        let messages = home.messages(victim).await;
        assert!(!messages.iter().any(|m| m.starts_with("sent SIGTERM")), "{messages:#?}");
    }

    start_daemon(&mut home, &args).await;
    let started = home.wait_state(eval, RunState::Running, T).await;
    assert_eq!(started.units().get("gpu").map(Vec::as_slice), Some(&["0".to_string()][..]));
    let back = home.run(victim).await;
    assert_eq!((back.state, back.preemptions, back.attempt), (RunState::Pending, 1, 2), "{:?}", back.reason);
    assert_eq!(back.params.preempted_by, None, "the requeue clears the decision");
    let messages = home.messages(victim).await;
    let count = |prefix: &str| messages.iter().filter(|m| m.starts_with(prefix)).count();
    assert_eq!((count("stop: preempted by"), count("preempted: ")), (1, 1), "{messages:#?}");
    // The claim the crashed daemon let go by its own requeue was not taken from it.
    assert!(!messages.iter().any(|m| m.contains("came back holding a stale claim")), "{messages:#?}");
    let requeued = event_id(&mut home, victim, "preempted: ").await;
    let claimed = event_id(&mut home, eval, "claim").await;
    assert!(requeued < claimed, "the urgent run was claimed before the victim's stages were gone");

    // The victim's first attempt: every process gone, and gone before the urgent run's began.
    let status = home.service().await.run_status(&victim.to_string()).await.unwrap();
    let first = &status.earlier_attempts.first().expect("the first attempt's stages are kept").stages;
    crate::support::assert_no_stage_alive(first);
    let victim_end = first.iter().filter_map(|s| s.record.ended_at).max().expect("its stage ended");
    let eval_start = home.stages(eval).await.iter().filter_map(|s| s.record.started_at).min().unwrap();
    assert!(
        victim_end <= eval_start,
        "the urgent run began at {eval_start}, before the victim's end at {victim_end}"
    );
    // The work redone runs from the checkpoint to the victim's end, whenever the restarted
    // daemon got to requeue it: at least until the decision, at most until that end.
    let checkpoint_at = home.service().await.run_checkpoints_of(victim).await.unwrap()[0].at;
    let events = home.events(victim).await;
    let decided_at = events.iter().find(|e| e.message.starts_with("stop: preempted by")).unwrap().at;
    assert!(
        (decided_at - checkpoint_at..=victim_end - checkpoint_at).contains(&back.preempted_work),
        "{} not in {}..={}",
        back.preempted_work,
        decided_at - checkpoint_at,
        victim_end - checkpoint_at
    );
    if crash == Crash::Decided {
        // One SIGTERM, the restarted daemon's: none reached the victim before the crash.
        assert_eq!(std::fs::read_to_string(&term).unwrap(), "term\n");
    }

    // Once the urgent run ends, the victim resumes from its checkpoint on the unit.
    std::fs::write(started.run_dir.join("release"), "").unwrap();
    let (done, _) = home.wait_settled(victim, T).await;
    assert_eq!(done.state, RunState::Completed, "{:?}\n{}", done.reason, home.daemon_log());
    let attempts = std::fs::read_to_string(done.run_dir.join("attempts")).unwrap();
    assert_eq!(attempts, "start=0 gpu=0\nstart=120 gpu=0\n");
    assert_eq!((done.preemptions, done.attempt, done.charged_attempts()), (1, 2, 1));
    assert_eq!(home.run(eval).await.state, RunState::Completed);
    sampler.finish().await;
}

#[tokio::test]
async fn a_daemon_killed_after_the_decision_requeues_the_victim_once_and_starts_the_urgent_run() {
    killed_and_restarted(Crash::Decided, None).await;
}

#[tokio::test]
async fn a_daemon_killed_during_the_grace_requeues_the_victim_once_and_starts_the_urgent_run() {
    killed_and_restarted(Crash::Grace, None).await;
}

#[tokio::test]
async fn a_daemon_killed_once_the_victims_stages_are_gone_requeues_it_once_and_starts_the_urgent_run() {
    killed_and_restarted(Crash::StagesGone, None).await;
}

#[tokio::test]
async fn a_daemon_killed_after_the_requeue_starts_the_urgent_run_on_the_unit() {
    killed_and_restarted(Crash::Requeued, None).await;
}

#[tokio::test]
async fn on_postgres_a_daemon_killed_at_each_point_of_a_preemption_recovers_too() {
    for crash in [Crash::Decided, Crash::Grace, Crash::StagesGone, Crash::Requeued] {
        let Some(url) = crate::support::fresh_postgres().await else { return };
        killed_and_restarted(crash, Some(url)).await;
    }
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
    let sampler = Sampler::start(home.service().await);
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
    sampler.finish().await;
}
