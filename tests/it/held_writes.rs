//! Held writes have an end. For each way a store refuses writes (a full disk; a lasting
//! refusal: a dropped table on SQLite, revoked privileges on PostgreSQL; a database away: a
//! write lock held elsewhere on SQLite, the connection gone on PostgreSQL), two
//! runs' stages exit while the daemon cannot record it: the daemon says so (GET /health is 503
//! with the fault, `doctor` fails its `writes` check, one `daemon_unhealthy` webhook), nothing
//! moves ahead of its facts, and once the store takes writes again what was held lands in
//! order, nothing lost, with one `daemon_healthy` webhook.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lachesis::model::{Exit, RunState};
use serde_json::Value;
use sqlx::Connection;
use uuid::Uuid;

use crate::faults::{Tmpfs, fill};
use crate::support::{Receiver, TestHome, wait_for};

const T: Duration = Duration::from_secs(60);

/// A home whose daemon posts to a webhook receiver, and a workflow whose stage exits 0 once
/// `go` exists.
struct Lab {
    home: TestHome,
    hook: Receiver,
    go: PathBuf,
    _flags: tempfile::TempDir,
}

impl Lab {
    async fn new(home: TestHome) -> Lab {
        let flags = tempfile::tempdir().unwrap();
        let go = flags.path().join("go");
        let hook = Receiver::start(Vec::new()).await;
        let mut home = home;
        home.environ.push(("LACHESIS_WEBHOOKS".into(), hook.url.clone()));
        home.workflow(
            "w",
            &format!(
                "name: w\nstages:\n  - name: main\n    argv: [sh, -c, \"while [ ! -e {} ]; do sleep 0.05; done; exit 0\"]\n",
                go.display()
            ),
        );
        Lab { home, hook, go, _flags: flags }
    }

    /// Starts the daemon and two runs, and waits until both run.
    async fn two_running(&mut self) -> [Uuid; 2] {
        if self.home.daemon_pid().is_none() {
            self.home.start_daemon();
        }
        let ids = [self.home.submit(&["--workflow", "w"]), self.home.submit(&["--workflow", "w"])];
        for id in ids {
            self.home.wait_state(id, RunState::Running, T).await;
        }
        ids
    }

    /// Lets both stages exit while the store refuses writes, and checks the daemon says so:
    /// health 503 with `kind`, `daemon_unhealthy` posted.
    async fn exits_held(&mut self, kind: &str) -> Value {
        std::fs::write(&self.go, b"").unwrap();
        // A write lock held elsewhere is found by waiting out the store's busy timeout (15 s),
        // once per write that meets it first (a heartbeat, a claim, then the exits): on the
        // suite's two loaded cores that took over a minute.
        let deadline = if kind == "away" { 3 * T } else { T };
        let failing = wait_unhealthy(&self.home, kind, deadline).await;
        assert!(failing["held_runs"].as_u64().unwrap() >= 1, "{failing}");
        assert!(failing["held_messages"].as_u64().unwrap() >= 1, "{failing}");
        let error = failing["error"].as_str().unwrap();
        assert!(!error.is_empty() && !error.contains('\n'), "{failing}");
        assert!(failing["since"].as_i64().unwrap() <= lachesis::model::now_millis());
        let hook = &self.hook;
        let posted = wait_for("the daemon_unhealthy webhook", T, || {
            let posted = hook.of_kind("daemon_unhealthy");
            async move { (!posted.is_empty()).then_some(posted) }
        })
        .await;
        assert_eq!(posted[0]["summary"]["kind"], kind, "{posted:?}");
        assert_eq!(posted[0]["state"], "unhealthy");
        failing
    }

    /// Once the store takes writes: both runs complete, their events in order, health 200, and
    /// one webhook of each kind.
    async fn healed(&mut self, ids: [Uuid; 2], kind: &str) {
        for id in ids {
            let (run, stages) = self.home.wait_settled(id, T).await;
            assert_eq!(
                (run.state, run.reason.as_deref()),
                (RunState::Completed, Some("stage 'main' finished")),
                "daemon log:\n{}",
                self.home.daemon_log()
            );
            assert_eq!(stages[0].record.exit, Some(Exit::Code(0)));
            let messages = self.home.messages(id).await;
            let mut rest = messages.iter();
            for want in ["claim", "started (pid", "all stages up", "exited with code 0", "complete"] {
                assert!(rest.any(|m| m.starts_with(want)), "no {want:?} (in order) among {messages:#?}");
            }
        }
        let home = &self.home;
        wait_for("GET /health to answer 200", T, || async move {
            let (status, body) = health(home).await;
            (status == 200 && body["writes_failing"].is_null()).then_some(())
        })
        .await;
        let hook = &self.hook;
        let healthy = wait_for("the daemon_healthy webhook", T, || {
            let posted = hook.of_kind("daemon_healthy");
            async move { (!posted.is_empty()).then_some(posted) }
        })
        .await;
        assert_eq!(healthy.len(), 1);
        assert_eq!(healthy[0]["summary"]["kind"], kind);
        assert_eq!(self.hook.of_kind("daemon_unhealthy").len(), 1, "posted once, however many rounds failed");
    }
}

/// GET /health over the home's socket: its status and body.
async fn health(home: &TestHome) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::UnixStream::connect(home.settings().api_socket_path()).await.unwrap();
    let request = "GET /health HTTP/1.1\r\nHost: lachesis\r\nConnection: close\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, serde_json::from_str(body).unwrap_or_default())
}

/// Waits until GET /health answers 503 with writes failing for `kind` and messages held;
/// returns what it says.
async fn wait_unhealthy(home: &TestHome, kind: &str, deadline: Duration) -> Value {
    wait_for(&format!("GET /health to say writes fail ({kind})"), deadline, || async move {
        let (status, body) = health(home).await;
        // Until the exits are held (a claim may fail first: the queue waits).
        let failing = &body["writes_failing"];
        (status == 503
            && body["status"] == "failing"
            && failing["kind"] == kind
            && failing["held_messages"] != 0)
            .then(|| failing.clone())
    })
    .await
}

/// `doctor --json`'s `writes` check.
fn doctor_writes(home: &TestHome) -> Value {
    let doctor: Value = serde_json::from_slice(&home.cli(&["doctor", "--json"]).stdout).unwrap();
    doctor["checks"].as_array().unwrap().iter().find(|c| c["name"] == "writes").cloned().unwrap_or_default()
}

async fn sqlite(home: &TestHome, sql: &str) {
    let db = home.path().join("lachesis.db");
    let mut conn =
        sqlx::sqlite::SqliteConnection::connect(&format!("sqlite://{}", db.display())).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(sql.to_string())).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
}

#[tokio::test]
async fn a_dropped_table_is_a_lasting_failure_reported_until_it_returns() {
    let mut lab = Lab::new(TestHome::new()).await;
    let ids = lab.two_running().await;
    assert_eq!(health(&lab.home).await.0, 200);
    assert_eq!(doctor_writes(&lab.home)["ok"], true);
    // As an operator's mistake would: the events table is gone (kept aside, to come back).
    sqlite(&lab.home, "ALTER TABLE events RENAME TO events_aside").await;
    let failing = lab.exits_held("lasting").await;
    assert!(failing["error"].as_str().unwrap().contains("no such table"), "{failing}");
    let check = doctor_writes(&lab.home);
    assert_eq!(check["ok"], false, "{check}");
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains("lasting") && detail.contains("no such table") && detail.contains("held"),
        "{check}"
    );
    for id in ids {
        assert_eq!(lab.home.run(id).await.state, RunState::Running, "nothing moved ahead of its facts");
    }
    // Tried again ever less often (1 s, 2 s, 4 s, …), never in a busy loop.
    let home = &lab.home;
    wait_for("the wait before the next try to grow past 3 s", T, || async move {
        let next = health(home).await.1["writes_failing"]["next_try"].as_i64()?;
        (next - lachesis::model::now_millis() > 3000).then_some(())
    })
    .await;
    sqlite(&lab.home, "ALTER TABLE events_aside RENAME TO events").await;
    lab.healed(ids, "lasting").await;
    assert_eq!(doctor_writes(&lab.home)["ok"], true);
}

#[tokio::test]
async fn a_full_disk_is_reported_as_full_and_what_it_held_lands() {
    let Some(tmpfs) = Tmpfs::mount("32m") else { return };
    let logs = tempfile::tempdir().unwrap();
    let mut home = TestHome::new();
    home.dir = tempfile::tempdir_in(tmpfs.path()).unwrap();
    // The daemon's log outside the full disk, so what it says survives.
    std::os::unix::fs::symlink(logs.path().join("daemon.log"), home.path().join("daemon.log")).unwrap();
    let mut lab = Lab::new(home).await;
    let ids = lab.two_running().await;
    let filler = lab.home.path().join("filler");
    // The WAL checkpointed and truncated first, so the next write needs room the disk lacks.
    sqlite(&lab.home, "PRAGMA wal_checkpoint(TRUNCATE)").await;
    fill(&filler, 0);
    lab.exits_held("full").await;
    std::fs::remove_file(&filler).unwrap();
    lab.healed(ids, "full").await;
    drop(lab);
    drop(tmpfs);
}

#[tokio::test]
async fn a_write_lock_held_elsewhere_is_an_sqlite_store_away() {
    let mut lab = Lab::new(TestHome::new()).await;
    let ids = lab.two_running().await;
    // Another process takes the write lock and keeps it past the store's busy timeout (15 s).
    let db = lab.home.path().join("lachesis.db");
    let mut other =
        sqlx::sqlite::SqliteConnection::connect(&format!("sqlite://{}", db.display())).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE").execute(&mut other).await.unwrap();
    let failing = lab.exits_held("away").await;
    assert!(failing["error"].as_str().unwrap().contains("database is locked"), "{failing}");
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    other.close().await.unwrap();
    lab.healed(ids, "away").await;
}

/// A PostgreSQL database owned by a role of its own (not a superuser, so privileges bind it):
/// the daemon's URL, and the admin connection to change its privileges.
async fn postgres_owned_by_a_role() -> Option<(String, String, sqlx::PgConnection)> {
    let url = crate::support::fresh_postgres().await?;
    let (base, db) = url.rsplit_once('/').unwrap();
    let role = format!("r_{db}");
    let mut admin = sqlx::PgConnection::connect(&format!("{base}/postgres")).await.unwrap();
    for sql in [format!("CREATE ROLE {role} LOGIN"), format!("ALTER DATABASE {db} OWNER TO {role}")] {
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut admin).await.unwrap();
    }
    admin.close().await.unwrap();
    let on_db = sqlx::PgConnection::connect(&url).await.unwrap();
    let (scheme, rest) = base.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    Some((format!("{scheme}://{role}@{host}/{db}"), role, on_db))
}

#[tokio::test]
async fn revoked_privileges_are_a_lasting_failure_on_postgres() {
    let Some((url, role, mut admin)) = postgres_owned_by_a_role().await else { return };
    let mut home = TestHome::new();
    home.database_url = Some(url);
    let mut lab = Lab::new(home).await;
    let ids = lab.two_running().await;
    let revoke = format!("REVOKE INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public FROM {role}");
    sqlx::query(sqlx::AssertSqlSafe(revoke)).execute(&mut admin).await.unwrap();
    let failing = lab.exits_held("lasting").await;
    assert!(failing["error"].as_str().unwrap().contains("permission denied"), "{failing}");
    let grant = format!("GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}");
    sqlx::query(sqlx::AssertSqlSafe(grant)).execute(&mut admin).await.unwrap();
    lab.healed(ids, "lasting").await;
}

/// A TCP proxy to PostgreSQL that can go away: it drops every connection and refuses new ones
/// (closing them at once) until it is back. On a thread of its own, so that the test's blocking
/// CLI calls never stall the daemon's database traffic.
struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    /// Bumped when it goes away: connections of an older generation end.
    generation: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Proxy {
    fn start(target: String) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let generation = Arc::new(tokio::sync::watch::Sender::new(0u64));
        let (up2, generation2) = (Arc::clone(&up), Arc::clone(&generation));
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((mut client, _)) = listener.accept().await {
                    if !up2.load(Ordering::SeqCst) {
                        continue; // dropped: closed at once
                    }
                    let mut ended = generation2.subscribe();
                    let target = target.clone();
                    tokio::spawn(async move {
                        let Ok(mut server) = tokio::net::TcpStream::connect(&target).await else { return };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = ended.changed() => {}
                        }
                    });
                }
            });
        });
        Proxy { port, up, generation }
    }

    fn away(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    fn back(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_database_away_is_reported_as_away_and_what_it_held_lands() {
    let Some(url) = crate::support::fresh_postgres().await else { return };
    let (scheme_user, rest) = url.rsplit_once('@').unwrap();
    let (host, db) = rest.split_once('/').unwrap();
    let proxy = Proxy::start(host.to_string());
    let mut home = TestHome::new();
    home.database_url = Some(format!("{scheme_user}@127.0.0.1:{}/{db}", proxy.port));
    let mut lab = Lab::new(home).await;
    let ids = lab.two_running().await;
    proxy.away();
    lab.exits_held("away").await;
    proxy.back();
    lab.healed(ids, "away").await;
}
