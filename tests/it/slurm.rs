//! The Slurm client against a real one-node cluster, which `tests/slurm/cluster.sh` brings up
//! (installing Slurm if it may). Where it cannot, these tests say they skip, unless
//! `LACHESIS_REQUIRE_SLURM=1` makes that a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use lachesis::launch::slurm::{JobState, Slurm, SlurmJobId};
use lachesis::model::Exit;
use lachesis::workflow::SlurmOptions;
use lachesis::workflow::StagePlan;

use crate::support::wait_for;

/// The cluster's slurm.conf, or why there is none. The test command brings the cluster up
/// once and names its slurm.conf in `LACHESIS_SLURM_CONF`; each test process (nextest runs one
/// per test) then uses it as it is, rather than asking `cluster.sh` again, whose probe of a
/// node busy with the other tests' jobs could time out on two loaded cores.
static CLUSTER: LazyLock<Result<PathBuf, String>> = LazyLock::new(|| {
    if let Some(conf) = std::env::var_os("LACHESIS_SLURM_CONF").map(PathBuf::from) {
        return match conf.is_file() {
            true => Ok(conf),
            false => Err(format!("slurm: skipped: LACHESIS_SLURM_CONF names no file: {}", conf.display())),
        };
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slurm/cluster.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("slurm: skipped: cannot run {}: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    match out.status.code() {
        Some(0) => match last.strip_prefix("SLURM_CONF=") {
            Some(conf) => Ok(PathBuf::from(conf)),
            None => panic!("cluster.sh succeeded without printing SLURM_CONF=: {stdout:?}"),
        },
        Some(3) => Err(last.to_string()),
        _ => panic!("cluster.sh failed ({}): {stdout}", out.status),
    }
});

/// The test cluster, or None (having said why) when there is none and none is required.
fn cluster() -> Option<Slurm> {
    match &*CLUSTER {
        Ok(conf) => Some(Slurm::with_config(conf)),
        Err(reason) => {
            assert!(
                std::env::var("LACHESIS_REQUIRE_SLURM").as_deref() != Ok("1"),
                "Slurm is required: {reason}"
            );
            eprintln!("{reason}");
            None
        }
    }
}

fn stage(dir: &Path, name: &str, argv: &[&str]) -> StagePlan {
    StagePlan {
        name: name.into(),
        argv: argv.iter().map(|a| a.to_string()).collect(),
        cwd: dir.to_path_buf(),
        environ: BTreeMap::new(),
        log_path: dir.join("logs").join(format!("{name}.log")),
        start_delay: None,
        probe: None,
        start_timeout: Duration::from_secs(60),
        log_limits: Default::default(),
    }
}

fn log_of(plan: &StagePlan) -> String {
    std::fs::read_to_string(&plan.log_path).unwrap_or_default()
}

async fn submit(slurm: &Slurm, plan: &StagePlan, mask_exe: Option<&Path>) -> SlurmJobId {
    let name = format!("lachesis-test-{}", plan.name);
    slurm.submit(plan, &SlurmOptions::default(), &name, mask_exe).await.unwrap()
}

/// Waits (60 s at most) for the job to end and returns how it did.
async fn ended(slurm: &Slurm, job: SlurmJobId) -> JobState {
    let wait = slurm.wait_ended(job, Duration::from_millis(50));
    tokio::time::timeout(Duration::from_secs(60), wait).await.expect("job did not end within 60 s").unwrap()
}

async fn wait_for_log(plan: &StagePlan, text: &str) {
    let what = format!("{text:?} in {}", plan.log_path.display());
    wait_for(&what, Duration::from_secs(30), || async { log_of(plan).contains(text).then_some(()) }).await;
}

fn ended_as(exit: Exit, state: &str) -> JobState {
    JobState::Ended { exit, state: state.into() }
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

#[tokio::test]
async fn a_test_ends_with_its_exit_code_and_sacct_remembers_it() {
    let Some(slurm) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let plan = stage(dir.path(), "seven", &["sh", "-c", "echo hi; date +%s%N; exit 7"]);
    std::fs::create_dir_all(plan.log_path.parent().unwrap()).unwrap();
    std::fs::write(&plan.log_path, "earlier\n").unwrap();
    let job = submit(&slurm, &plan, None).await;

    assert_eq!(ended(&slurm, job).await, ended_as(Exit::Code(7), "FAILED"));
    let seen = now_nanos();
    let log = log_of(&plan);
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines[..2], ["earlier", "hi"], "--open-mode=append keeps what was there: {log:?}");
    if let Some(exited) = lines.get(2).and_then(|l| l.parse::<u128>().ok()) {
        eprintln!(
            "scontrol showed job {job} ended {} ms after its stage exited",
            (seen - exited) / 1_000_000
        );
    }
    // scontrol still has it; sacct (here the job-completion file) says the same.
    assert_eq!(slurm.query(job).await.unwrap(), ended_as(Exit::Code(7), "FAILED"));
    assert_eq!(slurm.query_sacct(job).await.unwrap(), ended_as(Exit::Code(7), "FAILED"));
}

#[tokio::test]
async fn cancel_sends_sigterm_to_the_stage_itself() {
    let Some(slurm) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("got-term");
    let body = format!(
        "trap 'echo got TERM; touch {}; exit 0' TERM; echo started; while :; do sleep 0.1; done",
        marker.display()
    );
    let plan = stage(dir.path(), "trapper", &["sh", "-c", &body]);
    let job = submit(&slurm, &plan, None).await;
    wait_for_log(&plan, "started").await;
    assert_eq!(slurm.query(job).await.unwrap(), JobState::Running);

    let cancelled = Instant::now();
    slurm.cancel(job, None).await.unwrap();
    wait_for("the stage's TERM trap", Duration::from_secs(30), || async { marker.exists().then_some(()) })
        .await;
    // The stage exited 0 from its trap; Slurm records CANCELLED with ExitCode=0:0 (in scontrol
    // and in the completion file alike), which reads as SIGTERM.
    assert_eq!(ended(&slurm, job).await, ended_as(Exit::Signal(15), "CANCELLED"));
    eprintln!("job {job} ended {} ms after scancel", cancelled.elapsed().as_millis());
    assert!(log_of(&plan).contains("got TERM"));
    assert_eq!(slurm.query_sacct(job).await.unwrap(), ended_as(Exit::Signal(15), "CANCELLED"));
    // Cancelling what has ended is fine.
    slurm.cancel(job, None).await.unwrap();
    slurm.cancel(job, Some("KILL")).await.unwrap();
}

#[tokio::test]
async fn a_stage_killed_by_the_sigterm_takes_its_children_along() {
    let Some(slurm) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let child = dir.path().join("child.pid");
    let body = format!("sleep 300 & echo $! > {}; echo started; exec sleep 301", child.display());
    let plan = stage(dir.path(), "sleeper", &["sh", "-c", &body]);
    let job = submit(&slurm, &plan, None).await;
    wait_for_log(&plan, "started").await;
    let pid = std::fs::read_to_string(&child).unwrap().trim().to_string();
    assert!(Path::new(&format!("/proc/{pid}")).exists());

    slurm.cancel(job, None).await.unwrap();
    assert_eq!(ended(&slurm, job).await, ended_as(Exit::Signal(15), "CANCELLED"));
    let gone = || async { (!Path::new(&format!("/proc/{pid}")).exists()).then_some(()) };
    wait_for("the stage's background child to be killed", Duration::from_secs(5), gone).await;
    // The completion file was written before the stage died: it says 0:0, read as SIGTERM too.
    assert_eq!(slurm.query_sacct(job).await.unwrap(), ended_as(Exit::Signal(15), "CANCELLED"));
}

#[tokio::test]
async fn a_signal_reaches_a_running_stage_without_cancelling_it() {
    let Some(slurm) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("got-usr1");
    let body = format!("trap 'touch {}' USR1; echo started; while :; do sleep 0.1; done", marker.display());
    let plan = stage(dir.path(), "usr1", &["sh", "-c", &body]);
    let job = submit(&slurm, &plan, None).await;
    wait_for_log(&plan, "started").await;

    slurm.cancel(job, Some("SIGUSR1")).await.unwrap();
    wait_for("the stage's USR1 trap", Duration::from_secs(30), || async { marker.exists().then_some(()) })
        .await;
    assert_eq!(slurm.query(job).await.unwrap(), JobState::Running);
    slurm.cancel(job, None).await.unwrap();
    assert_eq!(ended(&slurm, job).await, ended_as(Exit::Signal(15), "CANCELLED"));
}

#[tokio::test]
async fn awkward_arguments_and_the_stage_env_reach_the_stage_intact() {
    let Some(slurm) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let awkward = ["two words", "it's", "\"dq\"", "$HOME", "`id`", "a\nb", "", "*", "100%"];
    let mut argv = vec!["sh", "-c", r#"printf '<%s>\n' "$@"; printf 'env <%s>\n' "$STAGE_VAR""#, "sh"];
    argv.extend(awkward);
    let mut plan = stage(dir.path(), "args", &argv);
    plan.environ.insert("STAGE_VAR".into(), "x y $z".into());
    plan.log_path = dir.path().join("odd 100% dir").join("args.log");
    let job = submit(&slurm, &plan, None).await;
    assert_eq!(ended(&slurm, job).await, ended_as(Exit::Code(0), "COMPLETED"));
    assert_eq!(
        log_of(&plan),
        "<two words>\n<it's>\n<\"dq\">\n<$HOME>\n<`id`>\n<a\nb>\n<>\n<*>\n<100%>\nenv <x y $z>\n"
    );
}

/// A stand-in for `lachesis mask` (the subcommand lives in the CLI): sed masking the value of
/// TINKER_API_KEY, which it finds in its environment as the real filter does.
fn fake_mask_exe(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let exe = dir.join("fake-lachesis");
    std::fs::write(
        &exe,
        "#!/bin/sh\n[ \"$1\" = redact ] || exit 9\nexec sed -u \"s/$TINKER_API_KEY/***/g\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    exe
}

const SECRET: &str = "tnkr0123456789secret";

#[tokio::test]
async fn masked_output_keeps_its_last_lines_and_the_exit_code() {
    let Some(slurm) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_mask_exe(dir.path());
    let body =
        "for i in $(seq 1 3000); do echo line $i $TINKER_API_KEY; done; echo err $1 >&2; echo LAST; exit 7";
    let mut plan = stage(dir.path(), "masked", &["sh", "-c", body, "sh", &format!("--api-key={SECRET}")]);
    plan.environ.insert("TINKER_API_KEY".into(), SECRET.into());
    let job = submit(&slurm, &plan, Some(&exe)).await;
    assert_eq!(ended(&slurm, job).await, ended_as(Exit::Code(7), "FAILED"));
    let log = log_of(&plan);
    assert!(!log.contains(SECRET));
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 3002, "every line made it through the filter");
    assert_eq!(lines[0], "line 1 ***");
    assert_eq!(lines[3000..], ["err --api-key=***", "LAST"]);
}

#[tokio::test]
async fn a_masked_stage_gets_sigterm_and_its_last_words_are_logged() {
    let Some(slurm) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_mask_exe(dir.path());
    let marker = dir.path().join("got-term");
    let body = format!(
        "trap 'echo got TERM $TINKER_API_KEY; touch {}; exit 0' TERM; echo started; while :; do sleep 0.1; done",
        marker.display()
    );
    let mut trapper = stage(dir.path(), "masked-trapper", &["sh", "-c", &body]);
    trapper.environ.insert("TINKER_API_KEY".into(), SECRET.into());
    let mut sleeper = stage(dir.path(), "masked-sleeper", &["sh", "-c", "echo started; exec sleep 300"]);
    sleeper.environ.insert("TINKER_API_KEY".into(), SECRET.into());
    let trapper_job = submit(&slurm, &trapper, Some(&exe)).await;
    let sleeper_job = submit(&slurm, &sleeper, Some(&exe)).await;
    wait_for_log(&trapper, "started").await;
    wait_for_log(&sleeper, "started").await;

    slurm.cancel(trapper_job, None).await.unwrap();
    slurm.cancel(sleeper_job, None).await.unwrap();
    wait_for("the stage's TERM trap", Duration::from_secs(30), || async { marker.exists().then_some(()) })
        .await;
    assert_eq!(ended(&slurm, trapper_job).await, ended_as(Exit::Signal(15), "CANCELLED"));
    assert!(log_of(&trapper).contains("got TERM ***\n"), "{}", log_of(&trapper));
    // The shell re-raises the stage's SIGTERM: Slurm records 0:15, as for an exec'd stage.
    assert_eq!(ended(&slurm, sleeper_job).await, ended_as(Exit::Signal(15), "CANCELLED"));
}

#[tokio::test]
async fn a_test_cancelled_while_pending_vanishes() {
    let Some(slurm) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let plan = stage(dir.path(), "later", &["true"]);
    let options = SlurmOptions { sbatch_options: vec!["--begin=now+3600".into()], ..SlurmOptions::default() };
    let job = slurm.submit(&plan, &options, "lachesis-test-later", None).await.unwrap();
    assert_eq!(slurm.query(job).await.unwrap(), JobState::Pending);
    // A signal for a pending job is a no-op (and does not make scancel retry for 100 s).
    slurm.cancel(job, Some("USR1")).await.unwrap();
    assert_eq!(slurm.query(job).await.unwrap(), JobState::Pending);
    slurm.cancel(job, None).await.unwrap();
    let vanished = JobState::Vanished("CANCELLED before it ran".into());
    assert_eq!(ended(&slurm, job).await, vanished);
    assert_eq!(slurm.query_sacct(job).await.unwrap(), vanished);
}

#[tokio::test]
async fn unknown_jobs_and_cluster_settings() {
    let Some(slurm) = cluster() else { return };
    let unknown = SlurmJobId(4_000_000_000);
    let vanished = JobState::Vanished("unknown to scontrol and to sacct".into());
    assert_eq!(slurm.query(unknown).await.unwrap(), vanished);
    slurm.cancel(unknown, None).await.unwrap();
    assert_eq!(slurm.kill_wait().await.unwrap(), Duration::from_secs(10));
}

/// The cluster's slurm.conf for a daemon's environment, or None (having said why).
fn cluster_conf() -> Option<PathBuf> {
    cluster()?;
    CLUSTER.as_ref().ok().cloned()
}

/// A stage that records when SIGTERM reached it (nanoseconds) and exits 0.
fn term_recorder(name: &str) -> String {
    format!(
        "  - name: {name}\n    argv: [sh, -c, 'trap \"date +%s%N > {{run_dir}}/{name}.term; exit 0\" TERM; \
         while :; do sleep 0.1; done']\n"
    )
}

fn term_time(run_dir: &Path, stage: &str) -> u128 {
    let text = std::fs::read_to_string(run_dir.join(format!("{stage}.term")))
        .unwrap_or_else(|e| panic!("SIGTERM never reached stage {stage}: {e}"));
    text.trim().parse().unwrap()
}

fn slurm_home(conf: &Path) -> crate::support::TestHome {
    let mut home = crate::support::TestHome::new();
    home.environ.push(("SLURM_CONF".into(), conf.display().to_string()));
    home
}

#[tokio::test]
async fn a_slurm_run_starts_its_stages_as_jobs_and_completes_with_their_exits() {
    let Some(conf) = cluster_conf() else { return };
    let mut home = slurm_home(&conf);
    // A key in the daemon's environment: the trainer prints it, the log must not hold it.
    let key = "sk-slurm-test-0123456789";
    home.environ.push(("TINKER_API_KEY".into(), key.into()));
    let trainer = "  - name: trainer\n    argv: [sh, -c, 'echo \"key=$TINKER_API_KEY\"; sleep 4; exit 0']\n";
    home.workflow(
        "on-slurm",
        &format!(
            "name: on-slurm\nlauncher: slurm\nslurm: {{time_limit: '10'}}\nstages:\n{}{trainer}{}\
             completion: {{stages: [trainer]}}\nstop_grace: 5s\n",
            term_recorder("api"),
            term_recorder("env")
        ),
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "on-slurm"]);
    let (run, stages) = home.wait_settled(id, Duration::from_secs(90)).await;
    assert_eq!(run.state, lachesis::model::RunState::Completed, "{:?}\n{}", run.reason, home.daemon_log());
    assert!(stages.iter().all(|s| s.slurm_job.is_some()), "{stages:?}");
    assert_eq!(stages[1].record.exit, Some(Exit::Code(0)), "the trainer's own exit");
    // api and env were cancelled after the trainer finished, env first, each getting SIGTERM.
    assert!(term_time(&run.run_dir, "env") < term_time(&run.run_dir, "api"), "reverse start order");
    let messages = home.messages(id).await;
    for name in ["api", "trainer", "env"] {
        let job = stages.iter().find(|s| s.name == name).unwrap().slurm_job.unwrap();
        assert!(
            messages.iter().any(|m| m.starts_with(&format!("submitted as Slurm job {job}"))),
            "{messages:#?}"
        );
    }
    let log = std::fs::read_to_string(&stages[1].log_path).unwrap();
    assert!(log.contains("key=***") && !log.contains(key), "{log}");
    let report: serde_json::Value = serde_json::from_slice(&home.cli(&["doctor", "--json"]).stdout).unwrap();
    let slurm = report["checks"].as_array().unwrap().iter().find(|c| c["name"] == "slurm").unwrap();
    assert_eq!(slurm["ok"], true, "doctor sees the cluster: {slurm}");
    assert!(crate::support::files_containing(home.path(), key.as_bytes()).is_empty());
}

#[tokio::test]
async fn a_daemon_restart_reattaches_slurm_jobs_and_stop_cancels_them_in_reverse() {
    let Some(conf) = cluster_conf() else { return };
    let mut home = slurm_home(&conf);
    home.workflow(
        "long-slurm",
        &format!(
            "name: long-slurm\nlauncher: slurm\nstages:\n{}{}{}stop_grace: 5s\n",
            term_recorder("api"),
            term_recorder("trainer"),
            term_recorder("env")
        ),
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "long-slurm"]);
    let run = home.wait_state(id, lachesis::model::RunState::Running, Duration::from_secs(60)).await;
    let jobs: Vec<u64> = home.stages(id).await.iter().map(|s| s.slurm_job.unwrap()).collect();

    home.kill_daemon();
    let slurm = Slurm::with_config(&conf);
    for job in &jobs {
        assert_eq!(
            slurm.query(SlurmJobId(*job)).await.unwrap(),
            JobState::Running,
            "jobs outlive the daemon"
        );
    }
    home.start_daemon();
    let service = home.service().await;
    wait_for("the restarted daemon to re-attach all three jobs", Duration::from_secs(20), || async {
        let messages: Vec<String> =
            service.events_after(id, 0).await.unwrap().into_iter().map(|e| e.message).collect();
        let reattached = jobs
            .iter()
            .filter(|job| {
                messages
                    .iter()
                    .any(|m| m == &format!("re-attached to Slurm job {job} after a daemon restart"))
            })
            .count();
        (reattached == 3).then_some(())
    })
    .await;

    home.cli_ok(&["run", "stop", &id.to_string()]);
    let (stopped, stages) = home.wait_settled(id, Duration::from_secs(60)).await;
    assert_eq!(stopped.state, lachesis::model::RunState::Stopped, "{}", home.daemon_log());
    let (api, trainer, env) =
        (term_time(&run.run_dir, "api"), term_time(&run.run_dir, "trainer"), term_time(&run.run_dir, "env"));
    assert!(
        env < trainer && trainer < api,
        "scancel in reverse start order: env {env}, trainer {trainer}, api {api}"
    );
    assert!(stages.iter().all(|s| s.record.exit == Some(Exit::Signal(15))), "{stages:?}");
    for job in jobs {
        assert!(!slurm.query(SlurmJobId(job)).await.unwrap().is_live(), "job {job} is over");
    }
}

/// A Slurm stage's log is bounded like a shim's: Slurm appends to it from the compute node, and
/// the daemon rotates it by copy and truncate as it passes its `log_max_size`, keeping
/// `log_max_files` files in all; the newest lines are kept in order, each once, and the rotated
/// files can be paged into.
#[tokio::test]
async fn a_slurm_stage_log_rotates_past_its_size_and_keeps_its_newest_lines() {
    let Some(conf) = cluster_conf() else { return };
    let mut home = slurm_home(&conf);
    // 800 lines of 100 bytes over ~16 s: past 8 KiB every couple of seconds.
    let chatty = "i=0; while [ $i -lt 800 ]; do i=$((i+1)); printf 'line %04d %090d\\n' $i 0; \
                  [ $((i % 20)) -eq 0 ] && sleep 0.4; done; echo done";
    home.workflow(
        "chatty",
        &format!(
            "name: chatty\nlauncher: slurm\nstages:\n  - name: main\n    argv: [sh, -c, \"{chatty}\"]\n    \
             log_max_size: 8KiB\n    log_max_files: 3\n"
        ),
    );
    home.start_daemon();
    let id = home.submit(&["--workflow", "chatty"]);
    let (run, stages) = home.wait_settled(id, Duration::from_secs(90)).await;
    assert_eq!(run.state, lachesis::model::RunState::Completed, "{:?}\n{}", run.reason, home.daemon_log());
    let log = &stages[0].log_path;
    let rotated = |n: u32| lachesis::logs::rotated(log, n);
    assert!(rotated(1).exists(), "the log rotated:\n{}", home.daemon_log());
    assert!(!rotated(3).exists(), "log_max_files counts the live file");
    // The files, oldest first, hold the newest lines in order, each once, to the last.
    let kept: String = [rotated(2), rotated(1), log.clone()]
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect();
    let numbers: Vec<u32> = kept.lines().filter_map(|l| l.strip_prefix("line ")?[..4].parse().ok()).collect();
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "in order, each once: {numbers:?}");
    assert_eq!(numbers.last(), Some(&800));
    assert!(kept.ends_with("done\n"), "{}", &kept[kept.len().saturating_sub(200)..]);
    // Far less than the 80 KB written: the bound held while the job ran.
    assert!(kept.len() < 45_000, "{} bytes kept", kept.len());
    // The rotated file is read like the live one, and the answer lists the files.
    let service = home.service().await;
    let request = lachesis::service::LogRequest::Tail { lines: 1 };
    let page = service.run_logs_in(&id.to_string(), Some("main"), 1, request).await.unwrap().remove(0);
    let last_of_first = std::fs::read_to_string(rotated(1)).unwrap().lines().last().unwrap().to_string();
    assert_eq!(page.page.text.trim_end(), last_of_first);
    assert_eq!(page.rotation, 1);
    let files: Vec<u32> = page.files.iter().map(|f| f.rotation).collect();
    assert_eq!(files, [0, 1, 2]);
}
