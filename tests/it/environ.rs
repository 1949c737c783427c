//! Keys from the home's `.env`: they reach the stages that need them, masked in their logs,
//! and never enter the daemon's own environment.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use lachesis::model::RunState;

use crate::support::TestHome;

const KEY: &str = "tnkr-from-the-env-file-2718";

#[tokio::test]
async fn a_key_from_the_env_file_reaches_the_stage_and_not_the_daemons_environment() {
    let mut home = TestHome::new();
    home.workflow(
        "keyed",
        "name: keyed\ncredentials: [TINKER_API_KEY]\nstages:\n  - name: s\n    argv: [sh, -c, 'echo \"key=$TINKER_API_KEY\"; printf %s \"$TINKER_API_KEY\" | wc -c']\n",
    );
    let env_file = home.path().join(".env");
    std::fs::write(&env_file, format!("TINKER_API_KEY={KEY}\n")).unwrap();
    std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    if std::env::var_os("TINKER_API_KEY").is_some() {
        eprintln!("skipped: TINKER_API_KEY is set here, and the environment wins over the file");
        return;
    }
    home.start_daemon();
    let pid = home.daemon_pid().unwrap();

    let id = home.submit(&["-w", "keyed"]);
    home.wait_state(id, RunState::Completed, Duration::from_secs(30)).await;
    let log = std::fs::read_to_string(home.path().join(format!("runs/{id}/s.log"))).unwrap();
    // Masked in the log, and all of it was there.
    assert!(log.contains("key=***") && !log.contains(KEY), "{log}");
    assert_eq!(log.lines().last().map(str::trim), Some(KEY.len().to_string().as_str()), "{log}");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        !environ.split(|b| *b == 0).any(|var| var.starts_with(b"TINKER_API_KEY=")),
        "the daemon's environment holds the key"
    );
}
