use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use lachesis::service::Service;
use lachesis::settings::Settings;

use super::CliResult;

#[derive(clap::Args)]
pub struct McpArgs {
    /// Don't start a daemon when none serves the store (runs then wait for one)
    #[arg(long)]
    no_daemon: bool,
}

/// How long the server waits for a daemon it started to listen before serving anyway.
const DAEMON_READY: Duration = Duration::from_secs(10);

pub async fn run(settings: Settings, args: McpArgs) -> CliResult {
    // stdout is the protocol: nothing else may print there.
    if !args.no_daemon && !lachesis::wake::poke(&settings.socket_path(), lachesis::wake::Poke::Probe) {
        match start_daemon(&settings) {
            Ok(pid) => eprintln!(
                "lachesis mcp: started a daemon (pid {pid}), logging to {}",
                settings.home.join("daemon.log").display()
            ),
            Err(err) => eprintln!("lachesis mcp: could not start a daemon: {err}"),
        }
    }
    let service = Service::open(settings).await?;
    lachesis::mcp::serve(service).await?;
    Ok(ExitCode::SUCCESS)
}

/// Starts `lachesis daemon` for this home in a session of its own (so it outlives this server and
/// its client's signals), appending to `$LACHESIS_HOME/daemon.log`; waits until it listens. A
/// daemon elsewhere holding the store's lock makes it exit at once, saying so in that log.
fn start_daemon(settings: &Settings) -> std::io::Result<u32> {
    std::fs::create_dir_all(&settings.home)?;
    let log = std::fs::OpenOptions::new().create(true).append(true).open(settings.home.join("daemon.log"))?;
    let mut cmd = Command::new(std::env::current_exe()?);
    // The home in argv (not secret) so the daemon can be told apart; the database URL, which may
    // hold a password, stays in the environment it inherits.
    cmd.arg("--home").arg(&settings.home).arg("daemon");
    if let Some(url) = &settings.database_url {
        cmd.env("LACHESIS_DATABASE_URL", url);
    }
    cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            rustix::process::setsid().map(|_| ()).map_err(std::io::Error::from)
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id();
    // Reap it if it exits while this server runs; otherwise it is reparented when we exit.
    std::thread::spawn(move || child.wait());
    wait_listening(&settings.socket_path());
    Ok(pid)
}

fn wait_listening(socket: &Path) {
    let deadline = Instant::now() + DAEMON_READY;
    while Instant::now() < deadline && !lachesis::wake::poke(socket, lachesis::wake::Poke::Probe) {
        std::thread::sleep(Duration::from_millis(100));
    }
}
