//! Running as a service: `daemon --install-service` / `--uninstall-service` write and remove a
//! systemd user unit under a scratch HOME and XDG_CONFIG_HOME (never the real user's config),
//! and `completions` prints each shell's script.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{BIN, TestHome, stderr};

/// A home whose CLI sees `config` as XDG_CONFIG_HOME and `user` as HOME.
fn scratch() -> TestHome {
    let mut home = TestHome::new();
    let config = home.path().join("config");
    let user = home.path().join("user");
    std::fs::create_dir_all(&user).unwrap();
    home.environ.push(("XDG_CONFIG_HOME".into(), config.display().to_string()));
    home.environ.push(("HOME".into(), user.display().to_string()));
    home
}

fn unit_path(home: &TestHome) -> PathBuf {
    home.path().join("config/systemd/user/lachesis.service")
}

fn lines<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines().filter_map(|line| line.strip_prefix(key)).collect()
}

#[test]
fn install_writes_a_unit_running_this_executable_with_the_flags_given() {
    let mut home = scratch();
    // Keys in the environment and in the home's .env: none of them may reach the unit.
    home.environ.push(("TINKER_API_KEY".into(), "tinker-secret-in-env".into()));
    home.environ.push(("LACHESIS_API_TOKEN".into(), "token-secret-in-env".into()));
    home.environ.push(("LACHESIS_NODE".into(), "box-a".into()));
    let dotenv = home.path().join(".env");
    std::fs::write(&dotenv, "WANDB_API_KEY=wandb-secret-in-file\n").unwrap();
    std::fs::set_permissions(&dotenv, std::fs::Permissions::from_mode(0o600)).unwrap();

    let out = home.cli_ok(&["daemon", "--max-parallel", "3", "--install-service", "--listen", "127.0.0.1:0"]);
    let path = unit_path(&home);
    assert!(out.contains(&format!("Wrote {}", path.display())), "{out}");
    assert!(
        out.contains("systemctl --user daemon-reload && systemctl --user enable --now lachesis"),
        "{out}"
    );
    assert!(out.contains("loginctl enable-linger $USER"), "{out}");

    let unit = std::fs::read_to_string(&path).unwrap();
    let executable = std::fs::canonicalize(BIN).unwrap();
    assert_eq!(
        lines(&unit, "ExecStart="),
        [format!("{} daemon --listen 127.0.0.1:0 --max-parallel 3 --node box-a", executable.display())],
        "the absolute path, the flags given (an environment variable's too), no default:\n{unit}"
    );
    let environment = lines(&unit, "Environment=");
    assert!(environment.contains(&format!("LACHESIS_HOME={}", home.path().display()).as_str()), "{unit}");
    assert_eq!(lines(&unit, "KillMode="), ["process"], "stages must survive `systemctl restart`");
    assert_eq!(lines(&unit, "Restart="), ["on-failure"]);
    for secret in ["tinker-secret-in-env", "token-secret-in-env", "wandb-secret-in-file", "TINKER_API_KEY"] {
        assert!(!unit.contains(secret), "{secret} leaked into the unit:\n{unit}");
    }
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
    verify(&home, &path);
}

/// `systemd-analyze --user verify` accepts the unit without a warning about it, where the
/// command exists.
fn verify(home: &TestHome, unit: &Path) {
    let runtime = home.path().join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["--user", "verify"])
        .arg(unit)
        .env("HOME", home.path().join("user"))
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_RUNTIME_DIR", &runtime)
        .output();
    let Ok(out) = out else {
        eprintln!("skipped systemd-analyze verify: no systemd-analyze on PATH (Debian's systemd package)");
        return;
    };
    let said = stderr(&out);
    assert!(out.status.success(), "systemd-analyze verify refused the unit: {said}");
    assert!(!said.contains("lachesis.service"), "systemd-analyze warned about the unit: {said}");
}

#[test]
fn a_second_install_is_fine_when_identical_and_refused_when_different_without_force() {
    let home = scratch();
    home.cli_ok(&["daemon", "--max-parallel", "2", "--install-service"]);
    let path = unit_path(&home);
    let first = std::fs::read_to_string(&path).unwrap();

    let again = home.cli_ok(&["daemon", "--max-parallel", "2", "--install-service"]);
    assert!(again.contains("already this unit"), "{again}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), first);

    let out = home.cli(&["daemon", "--max-parallel", "5", "--install-service"]);
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(said.contains("differs") && said.contains("--force"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "one line: {said}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), first, "a refused install leaves the unit as it was");

    let out = home.cli_ok(&["daemon", "--max-parallel", "5", "--install-service", "--force"]);
    assert!(out.contains("Replaced"), "{out}");
    let unit = std::fs::read_to_string(&path).unwrap();
    assert!(lines(&unit, "ExecStart=")[0].ends_with("daemon --max-parallel 5"), "{unit}");
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
    let leftovers: Vec<_> =
        std::fs::read_dir(path.parent().unwrap()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(leftovers, ["lachesis.service"], "no temporary file left behind");
}

#[test]
fn a_symlink_at_the_unit_path_is_never_written_through() {
    let home = scratch();
    let path = unit_path(&home);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let victim = home.path().join("victim");
    std::fs::write(&victim, "not a unit\n").unwrap();
    std::os::unix::fs::symlink(&victim, &path).unwrap();

    for args in [
        &["daemon", "--install-service"][..],
        &["daemon", "--install-service", "--force"],
        &["daemon", "--uninstall-service", "--force"],
    ] {
        let out = home.cli(args);
        assert!(!out.status.success(), "{args:?} went through the link");
        assert!(stderr(&out).contains("symbolic link"), "{args:?}: {}", stderr(&out));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "not a unit\n");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink());
    }
}

#[test]
fn uninstall_removes_the_unit_once_disabled() {
    let home = scratch();
    home.cli_ok(&["daemon", "--install-service"]);
    let path = unit_path(&home);

    // `systemctl --user enable` leaves this link; disabling needs the unit file, so it comes first.
    let wants = path.parent().unwrap().join("default.target.wants");
    std::fs::create_dir_all(&wants).unwrap();
    std::os::unix::fs::symlink(&path, wants.join("lachesis.service")).unwrap();
    let out = home.cli(&["daemon", "--uninstall-service"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("systemctl --user disable --now lachesis"), "{}", stderr(&out));
    assert!(path.exists());

    std::fs::remove_file(wants.join("lachesis.service")).unwrap();
    let out = home.cli_ok(&["daemon", "--uninstall-service"]);
    assert!(out.contains("Removed") && out.contains("systemctl --user daemon-reload"), "{out}");
    assert!(!path.exists());
    let out = home.cli_ok(&["daemon", "--uninstall-service"]);
    assert!(out.contains("nothing to remove"), "{out}");
}

#[test]
fn uninstall_leaves_a_unit_lachesis_did_not_write_unless_forced() {
    let home = scratch();
    let path = unit_path(&home);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "[Service]\nExecStart=/usr/bin/true\n").unwrap();
    let out = home.cli(&["daemon", "--uninstall-service"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("did not write it"), "{}", stderr(&out));
    assert!(path.exists());
    home.cli_ok(&["daemon", "--uninstall-service", "--force"]);
    assert!(!path.exists());
}

#[test]
fn without_xdg_config_home_the_unit_goes_under_home() {
    let mut home = scratch();
    home.environ.retain(|(name, _)| name != "XDG_CONFIG_HOME");
    home.environ.push(("XDG_CONFIG_HOME".into(), String::new()));
    home.cli_ok(&["daemon", "--install-service"]);
    assert!(home.path().join("user/.config/systemd/user/lachesis.service").is_file());
    assert!(!unit_path(&home).exists());
}

#[test]
fn what_a_unit_cannot_hold_safely_is_refused_and_nothing_written() {
    let mut home = scratch();
    // A newline would start a directive of its own.
    let out = home.cli(&["daemon", "--install-service", "--node", "a\nExecStartPre=/bin/sh"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("control character"), "{}", stderr(&out));
    // A password in the store's URL would be readable by every user.
    home.database_url = Some("postgres://me:hunter2@127.0.0.1:1/lachesis".into());
    let out = home.cli(&["daemon", "--install-service"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("password") && !stderr(&out).contains("hunter2"), "{}", stderr(&out));
    assert!(!unit_path(&home).exists());
    // Without one, the URL is carried so the service uses the same store.
    home.database_url = Some("postgres://me@127.0.0.1:1/lachesis".into());
    home.cli_ok(&["daemon", "--install-service"]);
    let unit = std::fs::read_to_string(unit_path(&home)).unwrap();
    assert!(
        lines(&unit, "Environment=").contains(&"LACHESIS_DATABASE_URL=postgres://me@127.0.0.1:1/lachesis")
    );
}

#[test]
fn completions_for_each_shell_cover_the_commands() {
    let home = scratch();
    for shell in ["bash", "zsh", "fish"] {
        let script = home.cli_ok(&["completions", shell]);
        assert!(script.contains("run") && script.contains("install-service"), "{shell}: {script}");
    }
    let out = home.cli(&["completions", "tcsh"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("invalid value 'tcsh'"), "{}", stderr(&out));
}

#[test]
fn settings_the_service_would_not_see_are_carried_with_their_paths_made_absolute() {
    let mut home = scratch();
    home.environ.push(("LACHESIS_WORKFLOWS".into(), "flows".into()));
    home.environ.push(("LACHESIS_ENV_DIRS".into(), "envs:/abs/envs".into()));
    home.environ.push(("LACHESIS_PYTHON".into(), "python3.12".into()));
    let out = home.command(&["daemon", "--install-service"]).current_dir(home.path()).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let unit = std::fs::read_to_string(unit_path(&home)).unwrap();
    let environment = lines(&unit, "Environment=");
    let root = home.path().display();
    for expected in [
        format!("LACHESIS_WORKFLOWS={root}/flows"),
        format!("LACHESIS_ENV_DIRS={root}/envs:/abs/envs"),
        "LACHESIS_PYTHON=python3.12".to_string(),
    ] {
        assert!(environment.contains(&expected.as_str()), "{expected} missing:\n{unit}");
    }
}
