//! Who may reach the API and read the home: the token on every TCP listener, none on the
//! unix socket, private files whatever the umask, another user refused.

use super::*;

#[tokio::test]
async fn every_tcp_listener_needs_the_token_and_a_unix_socket_does_not() {
    use std::os::unix::fs::PermissionsExt;
    let mut home = TestHome::new();
    home.environ.push(("LACHESIS_API_TOKEN".into(), "short-token".into()));
    let refused = home.cli(&["daemon", "--listen", "127.0.0.1:1"]);
    assert!(!refused.status.success());
    let err = crate::support::stderr(&refused);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("the API token from LACHESIS_API_TOKEN is 11 bytes long: use at least 16"), "{err}");
    home.environ.clear();

    // Loopback too: without LACHESIS_API_TOKEN the daemon makes one, 0600, and says where.
    let socket = home.path().join("api.sock");
    let unix = format!("unix:{}", socket.display());
    let mut api = start_with(&mut home, "127.0.0.1", None, &["--listen", &unix]).await;
    let token_file = home.path().join("api-token");
    assert_eq!(std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777, 0o600);
    let token = api.token.clone().unwrap();
    assert!(token.len() >= 64 && token.chars().all(|c| c.is_ascii_hexdigit()), "{token}");
    assert!(home.daemon_log().contains(&token_file.display().to_string()), "{}", home.daemon_log());
    assert!(!home.daemon_log().contains(&token), "the token itself is never logged");
    assert_eq!(api.get("/runs").await.0, StatusCode::OK);
    api.token = Some(format!("{}x", &token[..token.len() - 1]));
    let (s, b) = api.get("/runs").await;
    assert_eq!((s, code(&b)), (StatusCode::UNAUTHORIZED, "unauthorized"));
    api.token = None;
    assert_eq!(api.get("/health").await.0, StatusCode::UNAUTHORIZED);
    let (s, _) = api.post("/runs", json!({ "workflow": "demo" })).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // The unix socket: the same API, 0600, no token.
    assert_eq!(std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777, 0o600);
    let answer = unix_get(&socket, "/runs").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(unix_get(&socket, "/health").await.contains("\"ok\""));
}

#[tokio::test]
async fn files_are_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let mut home = TestHome::new();
    home.umask = Some(0o022);
    // As a home made under umask 022 would be.
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let _api = start(&mut home, "127.0.0.1", None).await;
    let id = home.submit(&["--workflow", "demo", "--var", "steps=1"]);
    home.wait_state(id, lachesis::model::RunState::Completed, Duration::from_secs(30)).await;

    let mode = |path: &std::path::Path| std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(home.path()), 0o700);
    let run_dir = home.path().join("runs").join(id.to_string());
    for file in ["lachesis.db", "lachesis.db-wal", "lachesis.db-shm", "api-token"] {
        assert_eq!(mode(&home.path().join(file)), 0o600, "{file}");
    }
    for file in ["trainer.log", "api.log"] {
        assert_eq!(mode(&run_dir.join(file)), 0o600, "{file}");
    }
    // Everything lachesis and its stages made is private (the harness's daemon.log is ours).
    let mut stack = vec![home.path().to_path_buf()];
    let mut status_files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path == home.path().join("daemon.log") {
                continue;
            }
            assert_eq!(mode(&path) & 0o077, 0, "{} is mode {:o}", path.display(), mode(&path));
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else if path.parent().is_some_and(|p| p.ends_with(".status")) {
                status_files += 1;
            }
        }
    }
    assert!(status_files >= 2, "the stages' status files were checked");
}

/// A GET over a unix socket, answered whole (the connection closes after one request).
async fn unix_get(socket: &std::path::Path, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: lachesis\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

#[tokio::test]
async fn another_user_gets_401_on_loopback_and_cannot_read_the_home() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to run curl as another user (setpriv)");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let mut home = TestHome::new();
    // As a home made under umask 022 would be: the daemon makes it private.
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let api = start(&mut home, "127.0.0.1", None).await;
    let (s, run) = api.post("/runs", json!({ "workflow": "demo", "vars": { "steps": "1" } })).await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    wait_for("the run's stage logs", Duration::from_secs(30), || {
        let dir = home.path().join("runs").join(&id);
        async move { dir.join("trainer.log").exists().then_some(()) }
    })
    .await;
    assert_eq!(std::fs::metadata(home.path()).unwrap().permissions().mode() & 0o777, 0o700);

    let as_nobody = |argv: &[&str]| {
        std::process::Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--"])
            .args(argv)
            .output()
            .unwrap()
    };
    let url = format!("{}/runs", api.base);
    let out = as_nobody(&["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", &url]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "401", "{}", crate::support::stderr(&out));
    let home_path = home.path().display().to_string();
    let out = as_nobody(&["ls", &home_path]);
    assert!(!out.status.success() && crate::support::stderr(&out).contains("Permission denied"));
    for file in ["lachesis.db", "lachesis.db-wal", "api-token", &format!("runs/{id}/trainer.log")] {
        let path = home.path().join(file);
        assert!(path.exists(), "{file}");
        let out = as_nobody(&["cat", &path.display().to_string()]);
        assert!(!out.status.success(), "{file} was readable by another user");
        assert!(crate::support::stderr(&out).contains("Permission denied"), "{file}");
    }
}
