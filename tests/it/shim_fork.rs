//! The shim's own fork of its stage, refused by the machine's process limit, is tried again
//! until a process slot frees: the stage starts and its exit is recorded, never failed for the
//! lack of a slot. RLIMIT_NPROC binds only a user other than root, so the shim runs as
//! `nobody` (through setpriv) with a soft limit of one process (through prlimit), raised from
//! outside once it was refused.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lachesis::launch::shim::ShimReport;
use lachesis::model::Exit;

const SHIM: &str = env!("CARGO_BIN_EXE_lachesis-shim");

#[test]
fn a_stage_refused_a_process_starts_once_one_is_free() {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to run the shim as another user under a process limit");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (started, exit, log) =
        (dir.path().join("s.json"), dir.path().join("e.json"), dir.path().join("main.log"));
    let mut shim = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "prlimit", "--nproc=1:", "--", SHIM])
        .arg("--started")
        .arg(&started)
        .arg("--exit")
        .arg(&exit)
        .arg("--log")
        .arg(&log)
        .arg("--cwd")
        .arg(dir.path())
        .args(["--", "sh", "-c", "echo ran"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Refused at first: it says so in the stage's log, and waits.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("trying again") {
            assert!(text.contains("cannot start 'sh' yet"), "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "the shim never said it was refused: {text:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!exit.exists(), "a refusal is not the stage's end");
    // A process slot frees: its soft limit is raised to its hard one, by a process of the same
    // user (root may not change another user's limits without CAP_SYS_RESOURCE).
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", shim.id())).unwrap();
    let hard =
        limits.lines().find(|l| l.starts_with("Max processes")).unwrap().split_whitespace().nth(3).unwrap();
    let raised = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "prlimit", "--pid"])
        .arg(shim.id().to_string())
        .arg(format!("--nproc={hard}:"))
        .status()
        .unwrap();
    assert!(raised.success());
    let reports: Vec<ShimReport> = BufReader::new(shim.stdout.take().unwrap())
        .lines()
        .map(|line| serde_json::from_str(&line.unwrap()).unwrap())
        .collect();
    assert!(shim.wait().unwrap().success());
    assert!(matches!(reports.first(), Some(ShimReport::Started(_))), "{reports:?}");
    assert!(
        matches!(reports.last(), Some(ShimReport::Exited(f)) if f.exit == Some(Exit::Code(0))),
        "{reports:?}"
    );
    let finished: lachesis::launch::status::Finished =
        serde_json::from_slice(&std::fs::read(&exit).unwrap()).unwrap();
    assert_eq!((finished.exit, finished.spawn_error), (Some(Exit::Code(0)), None));
    assert!(std::fs::read_to_string(&log).unwrap().ends_with("ran\n"));
}
