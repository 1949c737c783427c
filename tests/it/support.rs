//! Helpers: a temporary home with its own daemon process, the CLI, and waiting with deadlines.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lachesis::launch::process::{Liveness, liveness};
use lachesis::model::{Event, Run, RunState, Stage};
use lachesis::service::Service;
use lachesis::settings::Settings;
use uuid::Uuid;

pub const BIN: &str = env!("CARGO_BIN_EXE_lachesis");

/// Polls `check` until it returns Some, or panics with `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub struct TestHome {
    pub dir: tempfile::TempDir,
    pub database_url: Option<String>,
    /// Extra environment for every CLI and daemon process of this home.
    pub environ: Vec<(String, String)>,
    /// A umask the CLI and daemon processes start under (through `sh -c 'umask …'`).
    pub umask: Option<u32>,
    daemon: Option<Child>,
    service: Option<Service>,
}

impl TestHome {
    pub fn new() -> TestHome {
        TestHome {
            dir: tempfile::tempdir().unwrap(),
            database_url: None,
            environ: Vec::new(),
            umask: None,
            daemon: None,
            service: None,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn workflows(&self) -> PathBuf {
        self.path().join("workflows")
    }

    pub fn settings(&self) -> Settings {
        Settings::new(Some(self.path().to_path_buf()), self.database_url.clone())
    }

    /// Writes `workflows/NAME.yaml`.
    pub fn workflow(&self, name: &str, yaml: &str) {
        std::fs::create_dir_all(self.workflows()).unwrap();
        std::fs::write(self.workflows().join(format!("{name}.yaml")), yaml).unwrap();
    }

    pub async fn service(&mut self) -> Service {
        if self.service.is_none() {
            self.service = Some(Service::open(self.settings()).await.unwrap());
        }
        self.service.clone().unwrap()
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = match self.umask {
            Some(umask) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", &format!("umask {umask:03o} && exec \"$0\" \"$@\""), BIN]);
                sh
            }
            None => Command::new(BIN),
        };
        cmd.args(args)
            .env("LACHESIS_HOME", self.path())
            .env_remove("LACHESIS_WORKFLOWS")
            .env("NO_COLOR", "1");
        match &self.database_url {
            Some(url) => cmd.env("LACHESIS_DATABASE_URL", url),
            None => cmd.env_remove("LACHESIS_DATABASE_URL"),
        };
        cmd.envs(self.environ.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Runs the CLI to the end.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.command(args).stdin(Stdio::null()).output().unwrap()
    }

    /// Runs the CLI and returns its stdout, failing the test if it failed.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(out.status.success(), "lachesis {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Starts the sweep `file` (a path or a catalog name) through the CLI: its id and its
    /// members' runs, in order of k.
    pub fn start_sweep(&self, file: &str) -> (Uuid, Vec<Uuid>) {
        let out: serde_json::Value =
            serde_json::from_str(&self.cli_ok(&["sweep", "start", file, "--json"])).unwrap();
        let id = Uuid::parse_str(out["id"].as_str().unwrap()).unwrap();
        let members =
            out["members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().parse().unwrap()).collect();
        (id, members)
    }

    /// Queues a run through the CLI and returns its id.
    pub fn submit(&self, args: &[&str]) -> Uuid {
        let mut all = vec!["run", "start"];
        all.extend_from_slice(args);
        Uuid::parse_str(self.cli_ok(&all).trim()).unwrap()
    }

    pub fn start_daemon(&mut self) {
        self.start_daemon_with(&[]);
    }

    pub fn start_daemon_with(&mut self, extra: &[&str]) {
        assert!(self.daemon.is_none(), "daemon already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path().join("daemon.log"))
            .unwrap();
        let mut args = vec!["daemon", "--stop-grace", "3s"];
        if !extra.contains(&"--scan-interval") {
            args.extend(["--scan-interval", "500ms"]);
        }
        args.extend_from_slice(extra);
        let child =
            self.command(&args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(log).spawn().unwrap();
        self.daemon = Some(child);
    }

    /// SIGKILL, as a crash would. Returns once its shim fork server, which exits when the
    /// daemon's end of its socket closes, is gone too (the shims it forked stay).
    pub fn kill_daemon(&mut self) {
        let mut child = self.daemon.take().expect("no daemon running");
        let server = fork_server_of(child.id() as i32);
        child.kill().unwrap();
        child.wait().unwrap();
        wait_fork_server_gone(server);
    }

    /// Waits until the daemon killed itself at a crash point (`LACHESIS_FAILPOINT`), failing
    /// the test unless it ends by SIGKILL within `timeout`; then as `kill_daemon`.
    pub async fn wait_daemon_killed(&mut self, timeout: Duration) {
        use std::os::unix::process::ExitStatusExt;
        let mut child = self.daemon.take().expect("no daemon running");
        let log = self.path().join("daemon.log");
        let status = wait_for("the daemon to reach its crash point", timeout, || {
            let status = child.try_wait().unwrap();
            async move { status }
        })
        .await;
        assert_eq!(
            status.signal(),
            Some(9),
            "the daemon ended {status} instead of by SIGKILL; its log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        // It may have died before its fork server was looked up by parent: found by its home
        // and its socket instead (the shims it forked have /dev/null there, and stay).
        let servers: Vec<i32> = processes_mentioning(self.path())
            .into_iter()
            .filter(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let stdin = std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap_or_default();
                cmdline.ends_with(b"--serve\0") && stdin.to_string_lossy().starts_with("socket:")
            })
            .collect();
        for server in servers {
            wait_fork_server_gone(Some(server));
        }
    }

    pub fn daemon_pid(&self) -> Option<i32> {
        self.daemon.as_ref().map(|child| child.id() as i32)
    }

    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.path().join("daemon.log")).unwrap_or_default()
    }

    pub async fn run(&mut self, id: Uuid) -> Run {
        self.service().await.run(id).await.unwrap().unwrap()
    }

    pub async fn stages(&mut self, id: Uuid) -> Vec<Stage> {
        self.service().await.run_stages(id).await.unwrap()
    }

    pub async fn events(&mut self, id: Uuid) -> Vec<Event> {
        self.service().await.events_after(id, 0).await.unwrap()
    }

    /// The messages of a run's events, oldest first.
    pub async fn messages(&mut self, id: Uuid) -> Vec<String> {
        self.events(id).await.into_iter().map(|e| e.message).collect()
    }

    pub async fn wait_state(&mut self, id: Uuid, state: RunState, timeout: Duration) -> Run {
        let service = self.service().await;
        let log = self.path().join("daemon.log");
        let what = format!("run {id} to be {state}");
        let run = wait_for(&what, timeout, || {
            let service = service.clone();
            async move {
                let run = service.run(id).await.unwrap().unwrap();
                (run.state == state || run.state.is_terminal()).then_some(run)
            }
        })
        .await;
        assert_eq!(
            run.state,
            state,
            "run ended {} ({:?}) instead; daemon log:\n{}",
            run.state,
            run.reason,
            std::fs::read_to_string(log).unwrap_or_default()
        );
        run
    }

    /// Waits until the run is terminal and none of its stages may still be alive.
    pub async fn wait_settled(&mut self, id: Uuid, timeout: Duration) -> (Run, Vec<Stage>) {
        let service = self.service().await;
        wait_for(&format!("run {id} to settle"), timeout, || {
            let service = service.clone();
            async move {
                let run = service.run(id).await.unwrap().unwrap();
                let stages = service.run_stages(id).await.unwrap();
                (run.state.is_terminal() && stages.iter().all(|s| !s.record.state.is_live()))
                    .then_some((run, stages))
            }
        })
        .await
    }
}

impl Drop for TestHome {
    fn drop(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Leave no stage behind even when a test fails half-way.
        kill_processes_mentioning(self.path());
    }
}

/// Every process whose command line or environment mentions `needle` (the test's home).
/// The parent pid and state letter of `pid`, from /proc (None once it is gone).
pub fn parent_and_state(pid: i32) -> Option<(i32, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    Some((rest.next()?.parse().ok()?, state))
}

/// The live `lachesis-shim --serve` started by `daemon`, if any.
pub fn fork_server_of(daemon: i32) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let (parent, state) = parent_and_state(pid)?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        (parent == daemon && state != 'Z' && cmdline.ends_with(b"--serve\0")).then_some(pid)
    })
}

/// Waits for a daemon's fork server, which exits when the daemon's end of its socket closes.
fn wait_fork_server_gone(server: Option<i32>) {
    if let Some(server) = server {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !gone_or_zombie(server) {
            assert!(Instant::now() < deadline, "the fork server {server} outlived its daemon");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

pub fn gone_or_zombie(pid: i32) -> bool {
    parent_and_state(pid).is_none_or(|(_, state)| state == 'Z')
}

pub fn processes_mentioning(needle: &Path) -> Vec<i32> {
    let needle = needle.to_string_lossy().into_owned();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == std::process::id() as i32 {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let state = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = state.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'));
        let mentions = |bytes: &[u8]| String::from_utf8_lossy(bytes).contains(&needle);
        if !zombie && (mentions(&cmdline) || mentions(&environ)) {
            pids.push(pid);
        }
    }
    pids
}

fn kill_processes_mentioning(needle: &Path) {
    for pid in processes_mentioning(needle) {
        unsafe_kill(pid);
    }
}

fn unsafe_kill(pid: i32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// Asserts that no process recorded for these stages (shim or stage) is still alive. A shim
/// writes its stage's exit record, then exits itself: the run may settle in between, so each
/// process gets a few seconds to be gone (a stage left running stays alive past them).
pub fn assert_no_stage_alive(stages: &[Stage]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for stage in stages {
        let ids = [("shim", &stage.record.shim), ("process", &stage.record.process)];
        for (what, id) in ids.into_iter().filter_map(|(what, id)| Some((what, id.as_ref()?))) {
            let mut state = liveness(id);
            while !matches!(state, Liveness::Gone | Liveness::Zombie) && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(20));
                state = liveness(id);
            }
            assert!(
                matches!(state, Liveness::Gone | Liveness::Zombie),
                "stage {}'s {what} pid {} is still {:?}",
                stage.name,
                id.pid,
                state
            );
        }
    }
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file under `dir` whose bytes contain `needle` (the store, its WAL, logs, status files).
pub fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(std::fs::read_dir(&path).into_iter().flatten().flatten().map(|e| e.path()));
        } else if let Ok(bytes) = std::fs::read(&path)
            && bytes.windows(needle.len()).any(|w| w == needle)
        {
            found.push(path);
        }
    }
    found
}

/// A local HTTP endpoint for webhooks: records each request body and answers the scripted
/// statuses in turn (then `fallback`, 200 unless set).
pub struct Receiver {
    pub url: String,
    /// The bodies of the requests answered 200.
    pub bodies: Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    /// Every request, whatever its answer.
    pub hits: Arc<std::sync::Mutex<Vec<Hit>>>,
    /// The status once the script is spent.
    fallback: Arc<std::sync::atomic::AtomicU16>,
    server: tokio::task::JoinHandle<()>,
}

/// One request a `Receiver` saw: its head (lowercased), raw body and the status it answered.
#[derive(Clone, Debug)]
pub struct Hit {
    pub head: String,
    pub body: Vec<u8>,
    pub status: u16,
}

impl Hit {
    /// The value of header `name` (lowercase), if sent.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| l.strip_prefix(&format!("{name}:")).map(|v| v.trim().to_string()))
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Receiver {
    pub async fn start(statuses: Vec<u16>) -> Receiver {
        Self::start_with(statuses, String::new()).await
    }

    /// Like `start`, answering every successful request with `reply` (JSON) and every other
    /// with a short text saying its status.
    pub async fn start_with(statuses: Vec<u16>, reply: String) -> Receiver {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let bodies = Arc::new(std::sync::Mutex::new(Vec::new()));
        let hits = Arc::new(std::sync::Mutex::new(Vec::new()));
        let fallback = Arc::new(std::sync::atomic::AtomicU16::new(200));
        let (seen, all, otherwise) = (Arc::clone(&bodies), Arc::clone(&hits), Arc::clone(&fallback));
        let script = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::from(statuses)));
        let reply = Arc::new(reply);
        let server = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (seen, all, script, reply) =
                    (Arc::clone(&seen), Arc::clone(&all), Arc::clone(&script), Arc::clone(&reply));
                let otherwise = Arc::clone(&otherwise);
                tokio::spawn(async move {
                    let mut data = Vec::new();
                    let mut buf = [0u8; 4096];
                    // Read the head, then as many body bytes as Content-Length says.
                    let (head, body) = loop {
                        let Ok(n) = socket.read(&mut buf).await else { return };
                        if n == 0 {
                            return;
                        }
                        data.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&data).to_string();
                        if let Some(end) = text.find("\r\n\r\n") {
                            let length = text[..end]
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                                })
                                .unwrap_or(0);
                            if data.len() >= end + 4 + length {
                                break (
                                    text[..end].to_ascii_lowercase(),
                                    data[end + 4..end + 4 + length].to_vec(),
                                );
                            }
                        }
                    };
                    let scripted = script.lock().unwrap().pop_front();
                    let status =
                        scripted.unwrap_or_else(|| otherwise.load(std::sync::atomic::Ordering::SeqCst));
                    if status == 200 {
                        seen.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or_default());
                    }
                    all.lock().unwrap().push(Hit { head, body, status });
                    let body = if status == 200 { reply.to_string() } else { format!("answered {status}") };
                    let head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(body.as_bytes()).await;
                });
            }
        });
        Receiver { url, bodies, hits, fallback, server }
    }

    /// The bodies received so far whose `kind` is `kind`.
    pub fn of_kind(&self, kind: &str) -> Vec<serde_json::Value> {
        self.bodies.lock().unwrap().iter().filter(|b| b["kind"] == kind).cloned().collect()
    }

    /// Answers `status` from now on, once the script is spent.
    pub fn answer(&self, status: u16) {
        self.fallback.store(status, std::sync::atomic::Ordering::SeqCst);
    }

    /// Every request so far.
    pub fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }
}

pub use lachesis::service::fresh_postgres;

/// The files under `dir`, at any depth, whose extension is `extension`.
pub fn files_under(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path, extension));
        } else if path.extension().is_some_and(|e| e == extension) {
            files.push(path);
        }
    }
    files
}

/// Every process's command line, as `ps` shows it to any user: (pid, argv joined by spaces).
pub fn command_lines() -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .filter_map(|e| {
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let text = String::from_utf8_lossy(&raw).replace('\0', " ");
            Some((e.file_name().to_string_lossy().into_owned(), text))
        })
        .collect()
}

/// Reads every process's command line every 25 ms until stopped: for a test that a secret never
/// shows in `ps`, and that the processes it expects were seen running.
pub struct ArgvWatch {
    watching: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(usize, Vec<String>)>,
}

impl ArgvWatch {
    /// Counts the readings of a line containing `marker`, and keeps the lines holding `secret`.
    pub fn start(secret: &'static str, marker: &'static str) -> ArgvWatch {
        let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let flag = watching.clone();
        let thread = std::thread::spawn(move || {
            let (mut seen, mut leaks) = (0, Vec::new());
            while flag.load(std::sync::atomic::Ordering::Relaxed) {
                for (pid, cmdline) in command_lines() {
                    if cmdline.contains(secret) {
                        leaks.push(format!("{pid}: {cmdline}"));
                    }
                    if cmdline.contains(marker) {
                        seen += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(25));
            }
            (seen, leaks)
        });
        ArgvWatch { watching, thread }
    }

    /// Stops it: (readings that saw the marker, lines that held the secret).
    pub fn stop(self) -> (usize, Vec<String>) {
        self.watching.store(false, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}
