//! A pbt sweep run by the daemon: four members of a stand-in trainer whose state is carried in
//! its checkpoint path; at each boundary the loser is stopped and continues, as its next
//! attempt, from the winner's checkpoint with the winner's values explored; and a daemon
//! killed between the decision and the requeue decides the exploit once and applies it once.

use std::time::Duration;

use lachesis::failpoint::Failpoint;
use lachesis::model::RunState;
use lachesis::model::sweep::pbt::ExploitRecord;
use lachesis::model::sweep::{SweepState, var_text};
use lachesis::service::Service;
use uuid::Uuid;

use crate::support::{TestHome, wait_for};

const T: Duration = Duration::from_secs(60);

/// Adds `lr` to its reward each step for 60 steps, checkpointing every 5 with its reward in the
/// path (`state-REWARD-STEP`); resumed (`--from PATH STEP`), it starts from that state.
const TRAINER: &str = r#"dir="$1"; lr="$2"; step=0; reward=0
if [ "$3" = "--from" ]; then
  reward=$(echo "$4" | cut -d- -f2); step="$5"; echo "resumed from $4 at step $5 with lr $lr"
fi
while [ "$step" -lt 60 ]; do
  step=$((step + 1)); reward=$((reward + lr))
  printf '{"step": %d, "reward": %d}\n' "$step" "$reward" >> "$dir/metrics.jsonl"
  if [ $((step % 5)) -eq 0 ]; then
    printf '{"step": %d, "path": "state-%d-%d"}\n' "$step" "$reward" "$step" >> "$dir/checkpoints.jsonl"
  fi
  sleep 0.1
done
"#;

fn workflow(home: &TestHome) -> String {
    let script = home.path().join("trainer.sh");
    std::fs::write(&script, TRAINER).unwrap();
    format!(
        r#"name: climb
vars: {{lr: "1"}}
stages:
  - name: trainer
    argv: [sh, "{}", "{{run_dir}}", "{{lr}}"]
    resume_args: [--from, "{{resume.path}}", "{{resume.step}}"]
metrics:
  jsonl: {{file: "{{run_dir}}/metrics.jsonl", step: /step}}
checkpoints:
  jsonl: {{file: "{{run_dir}}/checkpoints.jsonl", step: /step, path: /path}}
stop_grace: 2s
"#,
        script.display()
    )
}

const SWEEP: &str = "method: pbt\nworkflow: climb\nmetric: {name: reward, goal: maximize}\nrun_cap: 4\nseed: 5\n\
                     perturbation_interval: 10\nparameters:\n  lr: {values: [1, 2, 3, 4]}\n";

fn start(home: &TestHome) -> (Uuid, Vec<Uuid>) {
    let path = home.path().join("pbt.yaml");
    std::fs::write(&path, SWEEP).unwrap();
    home.start_sweep(path.to_str().unwrap())
}

async fn exploits(service: &Service, sweep: Uuid) -> Vec<ExploitRecord> {
    service.sweep_status(&sweep.to_string()).await.unwrap().exploits
}

async fn first_applied(service: &Service, sweep: Uuid) -> ExploitRecord {
    wait_for("an exploit applied", T, || {
        let service = service.clone();
        async move { exploits(&service, sweep).await.into_iter().find(|e| e.applied_at.is_some()) }
    })
    .await
}

/// Stopped for an exploit, the loser went back to the queue from `stopping`: it never ended
/// `stopped` on the way (no `run_stopped` webhook, no dependent settled by it).
async fn assert_never_stopped(home: &mut TestHome, loser: Uuid) {
    let moves: Vec<_> =
        home.events(loser).await.into_iter().filter_map(|e| Some((e.from_state?, e.to_state?))).collect();
    assert!(moves.contains(&(RunState::Stopping, RunState::Pending)), "{moves:?}");
    assert!(!moves.iter().any(|(_, to)| *to == RunState::Stopped), "{moves:?}");
}

/// The loser continues from the donor's checkpoint, as its next attempt, with the explored
/// values; both members say so.
async fn assert_continued(home: &mut TestHome, exploit: &ExploitRecord) {
    let loser = home.run(exploit.run).await;
    // A later exploit of the same member may have moved it on since: what this one did is in
    // its trainer's log and its events.
    assert!(loser.attempt > exploit.attempt, "{exploit:?}");
    if loser.attempt == exploit.attempt + 1 {
        assert_eq!(loser.params.resolved.get("resume.path"), Some(&exploit.path));
        assert_eq!(loser.params.vars["lr"], var_text(&exploit.values["lr"]));
        assert_eq!(loser.params.resolved["lr"], var_text(&exploit.values["lr"]));
    }
    assert!(exploit.step <= exploit.boundary && exploit.boundary == 10 * exploit.interval);
    let donor_checkpoints: Vec<(i64, Option<String>)> = home
        .service()
        .await
        .run_checkpoints_of(exploit.donor_run)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.step, c.path))
        .collect();
    assert!(donor_checkpoints.contains(&(exploit.step, Some(exploit.path.clone()))), "{donor_checkpoints:?}");
    let said = format!(
        "resumed from {} at step {} with lr {}",
        exploit.path,
        exploit.step,
        var_text(&exploit.values["lr"])
    );
    let log = loser.run_dir.join("trainer.log");
    let deadline = std::time::Instant::now() + T;
    while !std::fs::read_to_string(&log).unwrap_or_default().contains(&said) {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(std::time::Instant::now() < deadline, "the loser's trainer never said `{said}`: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let described = exploit.describe();
    assert!(described.starts_with(&format!(
        "member {} continues from member {}'s checkpoint at step {}",
        exploit.k, exploit.donor, exploit.step
    )));
    let loser_says = home.messages(exploit.run).await;
    assert_eq!(loser_says.iter().filter(|m| **m == described).count(), 1, "{loser_says:#?}");
    assert_eq!(
        loser_says
            .iter()
            .filter(|m| m.starts_with(&format!(
                "attempt {} resumes from member {}",
                exploit.attempt + 1,
                exploit.donor
            )))
            .count(),
        1,
        "{loser_says:#?}"
    );
    assert_never_stopped(home, exploit.run).await;
    let donor_says = home.messages(exploit.donor_run).await;
    assert!(
        donor_says.iter().any(|m| m.contains(&format!(
            "member {} continues from this member's checkpoint at step {}",
            exploit.k, exploit.step
        ))),
        "{donor_says:#?}"
    );
}

#[tokio::test]
async fn a_pbt_loser_continues_from_the_winners_checkpoint_with_explored_values() {
    let mut home = TestHome::new();
    home.workflow("climb", &workflow(&home));
    let (sweep, members) = start(&home);
    assert_eq!(members.len(), 4, "run_cap is the population");
    let api = crate::http::start_with(
        &mut home,
        "127.0.0.1",
        Some("pbt-dashboard-token-of-this-test"),
        &["--sweep-interval", "200ms"],
    )
    .await;
    let service = home.service().await;
    let exploit = first_applied(&service, sweep).await;
    assert_continued(&mut home, &exploit).await;
    let status = home.cli_ok(&["sweep", "status", &sweep.to_string()[..8]]);
    assert!(status.contains("method    pbt:") && status.contains(&exploit.describe()), "{status}");
    wait_for("the sweep to be done", T, || {
        let service = service.clone();
        async move {
            (service.resolve_sweep(&sweep.to_string()).await.unwrap().state == SweepState::Done).then_some(())
        }
    })
    .await;
    let all = exploits(&service, sweep).await;
    assert!(all.iter().all(|e| e.applied_at.is_some()), "{all:#?}");
    // HTTP gives them; the dashboard draws the lineage, an arrow per exploit; the report counts them.
    let (_, status) = api.get(&format!("/sweeps/{sweep}")).await;
    assert_eq!(status["exploits"].as_array().map(Vec::len), Some(all.len()), "{status:#}");
    let (_, page) = api.get(&format!("/ui/sweeps/{sweep}")).await;
    let page = page.as_str().unwrap().to_string();
    assert!(page.contains("<h2>Lineage</h2>"), "{page}");
    assert_eq!(page.matches("<g class=\"exploit\"").count(), all.len());
    // Each member's curve marks where it continued from another's checkpoint.
    assert_eq!(page.matches("<path class=\"exploit-marker\"").count(), all.len(), "{page}");
    let (_, answers) = crate::mcp::mcp_session(
        &home,
        &[("rl_sweep_status", serde_json::json!({ "sweep_id": sweep.to_string() }))],
    );
    assert_eq!(answers[0]["exploits"].as_array().map(Vec::len), Some(all.len()), "{:#}", answers[0]);
    let report = home.cli_ok(&["report"]);
    assert!(report.contains(&format!("pbt: {} exploits", all.len())), "{report}");
    for member in members {
        assert_eq!(home.run(member).await.state, RunState::Completed);
    }
}

#[tokio::test]
async fn a_daemon_killed_between_an_exploit_and_its_requeue_applies_it_once() {
    let mut home = TestHome::new();
    home.workflow("climb", &workflow(&home));
    let (sweep, _) = start(&home);
    let service = home.service().await;
    // Dies once the first exploit is committed with its loser's stop, before any signal.
    home.environ.push((lachesis::failpoint::VARIABLE.into(), Failpoint::PbtExploitDecided.as_str().into()));
    home.start_daemon_with(&["--sweep-interval", "200ms"]);
    home.wait_daemon_killed(T).await;
    let decided = exploits(&service, sweep).await;
    assert_eq!(decided.len(), 1, "{decided:#?}");
    assert!(decided[0].applied_at.is_none());
    assert_eq!(home.run(decided[0].run).await.state, RunState::Stopping);
    // The next one re-attaches the stopping loser, sees its stages gone and dies before its
    // requeue; the one after queues it again.
    home.environ.retain(|(k, _)| k != lachesis::failpoint::VARIABLE);
    home.environ.push((lachesis::failpoint::VARIABLE.into(), Failpoint::PbtLoserStopped.as_str().into()));
    home.start_daemon_with(&["--sweep-interval", "200ms"]);
    home.wait_daemon_killed(T).await;
    home.environ.retain(|(k, _)| k != lachesis::failpoint::VARIABLE);
    let first = exploits(&service, sweep)
        .await
        .into_iter()
        .find(|e| e.k == decided[0].k && e.interval == decided[0].interval)
        .unwrap();
    assert!(first.applied_at.is_none());
    // Its stages are gone, and it still stops for the exploit: it never ends `stopped`.
    let loser = home.run(first.run).await;
    assert_eq!((loser.state, loser.exploit_interval()), (RunState::Stopping, Some(first.interval)));
    home.start_daemon_with(&["--sweep-interval", "200ms"]);
    let applied = wait_for("the first exploit applied", T, || {
        let service = service.clone();
        let first = first.clone();
        async move {
            exploits(&service, sweep)
                .await
                .into_iter()
                .find(|e| e.k == first.k && e.interval == first.interval && e.applied_at.is_some())
        }
    })
    .await;
    assert_eq!(
        (applied.donor, applied.step, &applied.path),
        (first.donor, first.step, &first.path),
        "decided once"
    );
    assert_continued(&mut home, &applied).await;
}

/// `lachesis sweep start demo-pbt`, as the docs tell a new user: the bundled trainer's members
/// are exploited as they train, each loser continues from a donor's checkpoint file, and the
/// sweep ends done with every member completed and a winner.
#[tokio::test]
async fn the_bundled_pbt_demo_exploits_its_losers_and_ends_with_a_winner() {
    let mut home = TestHome::new();
    home.start_daemon();
    let (sweep, members) = home.start_sweep("demo-pbt");
    assert_eq!(members.len(), 4, "the population is its run_cap");
    let service = home.service().await;
    let exploit = first_applied(&service, sweep).await;
    // The donor's checkpoint is a file in its run directory, which the loser's trainer read.
    let loser = home.run(exploit.run).await;
    assert!(loser.attempt >= 2, "the loser goes on as its next attempt");
    for id in &members {
        let (run, _) = home.wait_settled(*id, T).await;
        assert_eq!(run.state, RunState::Completed, "member {id}: {:?}", run.reason);
    }
    wait_for("the sweep to be done", T, || {
        let service = service.clone();
        async move {
            let status = service.sweep_status(&sweep.to_string()).await.unwrap();
            (status.sweep.state == SweepState::Done).then_some(status)
        }
    })
    .await;
    let log = std::fs::read_to_string(loser.run_dir.join("trainer.log")).unwrap_or_default();
    assert!(log.contains("continuing from "), "the loser's trainer started from a checkpoint: {log}");
}

/// A trainer that resumes by itself from its own `checkpoints.jsonl` (tinker-cookbook's real
/// checkpoint code, as the bundled `tinker-cookbook` workflow runs it) is a pbt member through
/// `checkpoints.jsonl.resume_line`: the loser's next attempt finds the donor's checkpoint as the
/// last line of its own file, and resumes from it, at the donor's batch, with the explored lr.
#[tokio::test]
async fn a_cookbook_member_continues_from_the_donors_checkpoint_through_its_own_file() {
    let Some((python, cookbook)) = crate::checkpoints::real_cookbook() else { return };
    let mut home = TestHome::new();
    let tests = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python");
    home.workflow(
        "cookbook-pbt",
        &format!(
            r#"name: cookbook-pbt
vars: {{lr: "1"}}
stages:
  - name: trainer
    argv: ["{python}", "{}", "{{run_dir}}/cookbook", "{{lr}}", "{{run_id}}"]
    env: {{PYTHONPATH: "{cookbook}:{}", PYTHONUNBUFFERED: "1"}}
metrics:
  jsonl: {{file: "{{run_dir}}/cookbook/metrics.jsonl", step: /step}}
checkpoints:
  jsonl:
    file: "{{run_dir}}/cookbook/checkpoints.jsonl"
    step: /batch
    path: /state_path
    weights: /sampler_path
    resume_line: {{name: pbt}}
stop_grace: 5s
"#,
            tests.join("cookbook_pbt_trainer.py").display(),
            tests.display()
        ),
    );
    let path = home.path().join("pbt.yaml");
    std::fs::write(
        &path,
        SWEEP
            .replace("workflow: climb", "workflow: cookbook-pbt")
            .replace("name: reward", "name: env/all/reward/total"),
    )
    .unwrap();
    let (sweep, members) = home.start_sweep(path.to_str().unwrap());
    home.start_daemon_with(&["--sweep-interval", "200ms"]);
    let service = home.service().await;
    let exploit = first_applied(&service, sweep).await;
    let loser = home.run(exploit.run).await;
    // The donor's checkpoint, its reward in its name: the loser's trainer took it up, at the
    // donor's batch, with the explored lr.
    assert!(
        exploit.path.starts_with(&format!("tinker://cookbook/weights/{}-", exploit.donor_run)),
        "{exploit:?}"
    );
    let said = format!(
        "cookbook resumes at batch {} ({}) with lr {}",
        exploit.step,
        exploit.path,
        var_text(&exploit.values["lr"])
    );
    let log = loser.run_dir.join("trainer.log");
    wait_for(&format!("the loser's trainer to say `{said}`"), T, || {
        let log = log.clone();
        let said = said.clone();
        async move { std::fs::read_to_string(&log).unwrap_or_default().contains(&said).then_some(()) }
    })
    .await;
    assert_never_stopped(&mut home, exploit.run).await;
    for id in &members {
        let (run, _) = home.wait_settled(*id, T).await;
        assert_eq!(run.state, RunState::Completed, "member {id}: {:?}\n{}", run.reason, home.daemon_log());
    }
}

/// A pbt sweep a user could get wrong is refused in one line through the CLI and queues
/// nothing: a workflow that cannot continue from another run's checkpoint (no checkpoints; or
/// checkpoints but neither `{resume.path}` in a stage's `resume_args` nor a
/// `checkpoints.jsonl.resume_line`), and PBT's keys out of range. The bundled `tinker-cookbook`
/// workflow, which resumes from its own file's last line, is taken.
#[tokio::test]
async fn a_pbt_sweep_that_cannot_continue_members_is_refused_in_one_line() {
    let mut home = TestHome::new();
    home.workflow("climb", &workflow(&home));
    home.workflow("plain", "name: plain\nvars: {lr: '1'}\nstages:\n  - {name: main, argv: ['true']}\nmetrics:\n  jsonl: {file: '{run_dir}/m.jsonl', step: /step}\n");
    home.workflow(
        "own",
        "name: own\nvars: {lr: '1'}\nstages:\n  - {name: main, argv: ['true']}\nmetrics:\n  jsonl: {file: '{run_dir}/m.jsonl', step: /step}\n\
         checkpoints:\n  jsonl: {file: '{run_dir}/c.jsonl', step: /step, path: /path}\n",
    );
    let table = [
        (SWEEP.replace("workflow: climb", "workflow: plain"), "workflow 'plain' records no checkpoints"),
        (
            SWEEP.replace("workflow: climb", "workflow: own"),
            "workflow 'own' has no stage whose `resume_args` start it from a checkpoint path (`{resume.path}`) and no `checkpoints.jsonl.resume_line`",
        ),
        (format!("{SWEEP}quantile_fraction: 0.6\n"), "quantile_fraction"),
        (SWEEP.replace("perturbation_interval: 10", "perturbation_interval: 0"), "perturbation_interval"),
    ];
    for (i, (text, want)) in table.iter().enumerate() {
        let path = home.path().join(format!("bad{i}.yaml"));
        std::fs::write(&path, text).unwrap();
        let out = home.cli(&["sweep", "start", path.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(err.contains(want) && err.trim().lines().count() == 1 && !err.contains("panicked"), "{err}");
    }
    assert!(home.cli_ok(&["run", "list"]).contains("no runs"));
    // The bundled cookbook workflow is a pbt member (held: nothing runs here).
    home.environ.push(("TINKER_API_KEY".into(), "tml-test-key-of-this-test".into()));
    let path = home.path().join("cookbook.yaml");
    let cookbook = "method: pbt\nworkflow: tinker-cookbook\nmetric: {name: env/all/reward/total, goal: maximize}\n\
                    run_cap: 4\nperturbation_interval: 20\nparameters:\n  save_every: {values: ['10', '20']}\n";
    std::fs::write(&path, cookbook).unwrap();
    let out = home.cli(&["sweep", "start", "--hold", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
