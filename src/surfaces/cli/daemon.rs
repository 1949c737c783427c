use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use lachesis::daemon::control::{self, DaemonStatus};
use lachesis::daemon::log::{DaemonLog, FILE_ROTATION, wants_colour};
use lachesis::daemon::{self, DaemonOptions};
use lachesis::settings::Settings;
use lachesis::workflow::Dur;

use super::CliResult;
use super::output::print_json;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DaemonArgs {
    #[command(subcommand)]
    action: Option<DaemonAction>,
    /// Start the daemon in its own session, with no terminal, logging to
    /// $LACHESIS_HOME/daemon.log (rotated; reopened on SIGHUP); return once it answers, and
    /// print its pid
    #[arg(long, conflicts_with = "service")]
    detach: bool,
    /// With --detach: print the pid and log path as JSON
    #[arg(long, requires = "detach")]
    json: bool,
    /// (internal) This is the daemon --detach started: log to $LACHESIS_HOME/daemon.log
    #[arg(long, hide = true, conflicts_with_all = ["service", "detach"])]
    detached: bool,
    /// Serve the HTTP API here (repeatable): HOST:PORT needs the bearer token
    /// (LACHESIS_API_TOKEN, else $LACHESIS_HOME/api-token, created on first start);
    /// unix:PATH is a 0600 socket that needs none
    #[arg(long, value_name = "HOST:PORT|unix:PATH")]
    listen: Vec<lachesis::api::Listen>,
    /// Runs started at once at most, whatever their resources
    #[arg(long, default_value_t = 8, value_parser = parse_max_parallel)]
    max_parallel: usize,
    /// SIGTERM-to-SIGKILL grace for workflows that set none
    #[arg(long, default_value = "10s")]
    stop_grace: Dur,
    /// Fallback store scan interval (wake-ups normally arrive at once); also how often lost
    /// nodes are looked for
    #[arg(long, default_value = "2s", value_parser = parse_positive)]
    scan_interval: Dur,
    /// This daemon's node id among several on one PostgreSQL store [default: the host name]
    #[arg(long, env = "LACHESIS_NODE")]
    node: Option<String>,
    /// A label runs can be pinned to (KEY=VALUE, repeatable; PostgreSQL only)
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// A counted pool of this node's devices (repeatable): gpu=0,1,2,3, or gpu=auto for the
    /// GPUs `nvidia-smi -L` lists. A run asks for units (`needs: {gpu: 2}`, `--needs gpu=2`)
    /// and gets distinct ones; the gpu pool's are its stages' CUDA_VISIBLE_DEVICES
    #[arg(long = "pool", value_name = "NAME=UNITS", env = "LACHESIS_POOLS", value_delimiter = ';')]
    pools: Vec<lachesis::model::pool::PoolSpec>,
    /// Let a pending run that lacks pool units or parallel slots take them from running
    /// preemptible runs of lower priority: they stop, queue again and resume from their last
    /// checkpoint (per daemon: its own pools and runs)
    #[arg(long)]
    preempt: bool,
    /// With --preempt: how much lower a victim's priority must be
    #[arg(long, value_name = "N", default_value_t = 1, requires = "preempt",
          value_parser = clap::value_parser!(i64).range(1..))]
    preempt_gap: i64,
    /// How long a heartbeat keeps this node's lease; after that other nodes fail (or requeue)
    /// its runs
    #[arg(long, env = "LACHESIS_LEASE", default_value = "60s")]
    lease: Dur,
    /// How often running runs' training metrics are read from W&B and stored (needs
    /// WANDB_API_KEY)
    #[arg(long, env = "LACHESIS_WANDB_INTERVAL", default_value = "5m")]
    wandb_interval: Dur,
    /// How often sweeps are looked at for decisions besides as their members' readings land
    /// here (readings recorded by another node's daemon, or by a process beside this one)
    #[arg(long, default_value = "3s", value_parser = parse_positive)]
    sweep_interval: Dur,
    /// Forget finished runs and tests (rows and directories) this long after they ended,
    /// checked hourly (e.g. 30d) [default: keep everything]
    #[arg(long, value_name = "AGE")]
    keep_finished: Option<Dur>,
    /// A stage log rotates past this size (e.g. 512MiB), for workflows whose stages set no
    /// `log_max_size`
    #[arg(long, env = "LACHESIS_LOG_MAX_SIZE", default_value = "1GiB", value_name = "SIZE")]
    log_max_size: lachesis::logs::ByteSize,
    /// Files a stage log keeps, the live one included (the oldest is dropped), for workflows
    /// whose stages set no `log_max_files`
    #[arg(long, env = "LACHESIS_LOG_MAX_FILES", default_value_t = 3, value_parser = parse_max_files)]
    log_max_files: u32,
    /// Post the morning report (`lachesis report`) at each due time of this cron expression
    /// (5-field crontab or @daily-style), e.g. '0 7 * * *'; a daemon that was down over a due
    /// time posts once when it starts
    #[arg(long, env = "LACHESIS_REPORT_CRON", value_name = "CRON")]
    report_cron: Option<String>,
    /// The time zone of --report-cron (an IANA name) [default: UTC]
    #[arg(long, env = "LACHESIS_REPORT_TZ", value_name = "ZONE", requires = "report_cron")]
    report_tz: Option<String>,
    /// The window the posted report covers
    #[arg(long, env = "LACHESIS_REPORT_SINCE", default_value = "12h", value_name = "AGE", value_parser = parse_positive)]
    report_since: Dur,
    /// Where the morning report is POSTed as JSON (repeatable); a URL with credentials
    /// (user:password@, ?token=) is refused here, where every user sees it: put it in
    /// LACHESIS_REPORT_WEBHOOK (comma-separated) in $LACHESIS_HOME/.env
    #[arg(long = "report-webhook", value_name = "URL")]
    report_webhooks: Vec<String>,
    /// Write a systemd user unit that runs this daemon with the flags given here (and the
    /// home, env file and store set), then exit; `systemctl --user enable --now lachesis` starts it
    #[arg(long, group = "service")]
    pub install_service: bool,
    /// Remove the unit --install-service wrote (after `systemctl --user disable --now lachesis`)
    #[arg(long, group = "service")]
    pub uninstall_service: bool,
    /// With --install-service: replace a different unit; with --uninstall-service: remove one
    /// lachesis did not write
    #[arg(long, requires = "service")]
    pub force: bool,
}

#[derive(clap::Subcommand)]
enum DaemonAction {
    /// Stop the home's daemon: SIGTERM, then wait until it is gone (its stages keep running,
    /// and the next daemon re-attaches them)
    Stop {
        /// How long to wait for it to exit
        #[arg(long, default_value = "30s", value_parser = parse_positive)]
        timeout: Dur,
        #[arg(long)]
        json: bool,
    },
    /// The home's daemon: pid, uptime, version, store, node, log and health (exits 1 unless
    /// it runs and is healthy)
    Status {
        #[arg(long)]
        json: bool,
    },
}

fn parse_max_files(text: &str) -> Result<u32, String> {
    let count = text.trim().parse::<u32>().map_err(|_| format!("'{text}' is not a number of files"))?;
    lachesis::logs::limits::check_max_files(count)
}

/// A duration longer than zero (an interval of 0 would spin); at most 30 days, like every
/// duration.
fn parse_positive(text: &str) -> Result<Dur, String> {
    text.parse::<Dur>()?.positive()
}

/// The most runs a daemon may start at once.
const MAX_PARALLEL: usize = 4096;

pub(super) fn parse_max_parallel(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_PARALLEL).contains(&n) => Ok(n),
        _ => Err(format!("'{text}' is not a number of runs from 1 to {MAX_PARALLEL}")),
    }
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    let simple = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    match text.split_once('=') {
        Some((key, value)) if simple(key) && simple(value) => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("'{text}' is not KEY=VALUE (letters, digits, '-', '_' or '.')")),
    }
}

pub fn run(settings: Settings, args: DaemonArgs) -> CliResult {
    match args.action {
        Some(DaemonAction::Stop { timeout, json }) => return stop(&settings, timeout.0, json),
        Some(DaemonAction::Status { json }) => return status(&settings, json),
        None if args.detach => return detach(&settings, args.json),
        None => {}
    }
    name_the_process();
    // The detached daemon keeps its log in the home; any other writes to its stderr. Neither
    // can stop it by failing (see daemon::log).
    let log = if args.detached {
        DaemonLog::file(&control::log_path(&settings.home), FILE_ROTATION, true)
    } else {
        DaemonLog::stderr()
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LACHESIS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(wants_colour(args.detached))
        .log_internal_errors(false)
        .with_writer(log.clone())
        .init();
    let served = serve(settings, args, log.clone());
    // What the daemon said last (why it exits) is in the log before the process ends.
    log.flush(Duration::from_secs(2));
    served
}

fn serve(settings: Settings, args: DaemonArgs, log: DaemonLog) -> CliResult {
    let report = lachesis::report_poster::ReportPost::from_settings(
        args.report_cron.as_deref(),
        args.report_tz.as_deref(),
        args.report_since.0,
        &args.report_webhooks,
    )?;
    let options = DaemonOptions {
        listen: args.listen,
        max_parallel: args.max_parallel,
        stop_grace: args.stop_grace.0,
        scan_interval: args.scan_interval.0,
        node: args.node,
        labels: args.labels.into_iter().collect(),
        lease: args.lease.0,
        wandb_interval: args.wandb_interval.0,
        sweep_interval: args.sweep_interval.0,
        keep_finished: args.keep_finished.map(|d| d.0),
        log_rotation: lachesis::logs::Rotation {
            max_size: args.log_max_size.0,
            max_files: args.log_max_files,
        },
        report,
        pools: args.pools,
        preempt_gap: args.preempt.then_some(args.preempt_gap),
        log: Some(log),
    };
    // One thread runs every task: a message between the API, the reconciler and a stage's
    // watcher stays on it instead of waking another thread (about 90 context switches per run
    // instead of 120, and 15% less of the daemon's CPU). Nothing here holds the thread: children
    // are tokio's, log followers read on their own threads, SQLite has sqlx's worker, and the
    // log has its writer.
    raise_open_file_limit();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(daemon::run(settings, options))?;
    Ok(ExitCode::SUCCESS)
}

/// The daemon is `lachesis` in `ps`, `top` and `pgrep lachesis`, detached or not: re-executed
/// through `/proc/self/exe`, the kernel would name it `exe`.
fn name_the_process() {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string (at most 16 bytes are kept).
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"lachesis".as_ptr());
    }
}

/// How long `--detach` waits for the daemon to answer (a PostgreSQL store's migrations, a slow
/// disk).
const START_WITHIN: Duration = Duration::from_secs(60);

/// `daemon --detach`: this same command line, as the detached daemon, in its own session.
fn detach(settings: &Settings, json: bool) -> CliResult {
    let args = detached_args(std::env::args_os().skip(1));
    // The running executable itself, even if an upgrade has replaced the file since.
    let exe = Path::new("/proc/self/exe");
    let started = current_thread()?.block_on(control::detach(settings, exe, args, START_WITHIN, say))?;
    if json {
        print_json(&started)?;
    } else {
        println!("{}", started.pid);
        say(&format!("lachesis daemon started; its log: {}", started.log.display()));
    }
    Ok(ExitCode::SUCCESS)
}

/// The daemon's arguments for its detached self: `--detach` becomes `--detached`, and what only
/// the starting command prints (`--json`) is left out.
fn detached_args(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    args.filter(|arg| arg != "--json")
        .map(|arg| if arg == "--detach" { OsString::from("--detached") } else { arg })
        .collect()
}

fn stop(settings: &Settings, within: Duration, json: bool) -> CliResult {
    let stopped = current_thread()?.block_on(control::stop(settings, within, say))?;
    if json {
        print_json(&stopped)?;
    } else {
        println!(
            "stopped the daemon (pid {}); its stages run on until the next daemon re-attaches them",
            stopped.pid
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn status(settings: &Settings, json: bool) -> CliResult {
    let status = current_thread()?.block_on(control::status(settings))?;
    if json {
        print_json(&status)?;
    } else {
        print!("{}", status_text(&status));
    }
    use crate::cli::exit_code::{NOT_OK, SUCCESS, UNREACHABLE, code};
    // A script tells "no daemon" from "a daemon that is not well".
    Ok(code(match (status.ok, status.running) {
        (true, _) => SUCCESS,
        (false, true) => NOT_OK,
        (false, false) => UNREACHABLE,
    }))
}

fn status_text(status: &DaemonStatus) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if !status.running {
        let _ = writeln!(out, "no daemon is running on {}", status.home.display());
        return out;
    }
    let pid = status.pid.map_or_else(|| "?".into(), |p| p.to_string());
    let up = status
        .uptime_secs
        .map(|s| format!(", up {}", humantime::format_duration(Duration::from_secs(s))))
        .unwrap_or_default();
    let unknown = || "? (it left no daemon.json: an older lachesis?)".to_string();
    let _ = writeln!(out, "daemon   running (pid {pid}{up})");
    let _ = writeln!(out, "version  {}", status.version.clone().unwrap_or_else(unknown));
    let _ = writeln!(out, "store    {}", status.store.clone().unwrap_or_else(unknown));
    let _ = writeln!(out, "node     {}", status.node.clone().unwrap_or_else(unknown));
    let log = match (&status.log, status.pid) {
        (Some(log), _) => log.display().to_string(),
        (None, Some(_)) => "its stderr".into(),
        (None, None) => unknown(),
    };
    let _ = writeln!(out, "log      {log}");
    let verdict = if status.ok { "ok" } else { "unhealthy" };
    match (status.health_status, &status.health) {
        (Some(code), Some(serde_json::Value::Object(fields))) => {
            let _ = writeln!(out, "health   {verdict} (GET /health: {code})");
            for (key, value) in fields {
                let value = value.as_str().map_or_else(|| value.to_string(), str::to_string);
                let _ = writeln!(out, "  {key}: {value}");
            }
        }
        (Some(code), _) => {
            let _ = writeln!(out, "health   {verdict} (GET /health: {code})");
        }
        (None, _) => {
            let _ =
                writeln!(out, "health   unhealthy (no answer on {})", status.home.join("api.sock").display());
        }
    }
    out
}

/// A note on stderr for the user; a stderr that cannot take it is no reason to fail.
fn say(note: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{note}");
}

fn current_thread() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}

/// Each live stage holds descriptors in the daemon (its report pipe, a pidfd), so the usual soft
/// limit of 1,024 would throttle a burst of starts (they wait and retry, never fail) long before
/// the hard limit. Raised as servers do; a refusal leaves the soft limit as it was.
fn raise_open_file_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = Rlimit { current: limit.maximum, maximum: limit.maximum };
        if let Err(err) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!("cannot raise the open-file limit: {err}");
        }
    }
}
