//! The command line: the global options, the command list, and the dispatch to each command's
//! file.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use super::{
    completions, config, daemon, doctor, env, gc, mcp, node, report, run, schedule, service_install, sweep,
    test, webhooks, workflow,
};
use lachesis::settings::Settings;

pub type CliResult = Result<ExitCode, Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(
    name = "lachesis",
    version,
    about = "Queue, start and supervise RL training runs (Atropos + Tinker), restart-safe",
    after_long_help = super::exit_code::HELP
)]
pub struct Cli {
    /// State directory: the SQLite store, run directories, workflows [default: ~/.lachesis]
    #[arg(long, global = true, env = "LACHESIS_HOME")]
    home: Option<PathBuf>,
    /// Use this database instead of the embedded SQLite file (postgres://… or sqlite://PATH)
    #[arg(long, global = true, env = "LACHESIS_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Read missing keys from this file (mode 600) instead of $LACHESIS_HOME/.env; for the
    /// daemon, `mcp` and `doctor`
    #[arg(long, global = true, env = "LACHESIS_ENV_FILE")]
    env_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
#[command(defer = true)]
enum Command {
    /// Run the supervisor: claims queued runs, starts and watches their stages
    Daemon(daemon::DaemonArgs),
    /// Discover and select Atropos environments
    #[command(subcommand)]
    Env(env::EnvCommand),
    /// Show and edit the selected environment's configuration
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Start, list, inspect and stop runs
    #[command(subcommand)]
    Run(run::RunCommand),
    /// The morning report: runs and tests that ended in a window (--since 12h) or still run,
    /// with outcomes, steps, checkpoints, metrics, failed stages' last log lines and counts
    Report(report::ReportArgs),
    /// Inference tests of an environment against models
    #[command(subcommand)]
    Test(test::TestCommand),
    /// Search a configuration space with member runs; stop the losers early
    #[command(subcommand)]
    Sweep(sweep::SweepCommand),
    /// Cron schedules that enqueue inference tests
    #[command(subcommand)]
    Schedule(schedule::ScheduleCommand),
    /// List and show workflows
    #[command(subcommand)]
    Workflow(workflow::WorkflowCommand),
    /// The daemons (nodes) sharing a PostgreSQL store
    #[command(subcommand)]
    Node(node::NodeCommand),
    /// Webhook deliveries, newest first (delivered, pending, failed); `resend ID` sends a failed one again
    Webhooks(webhooks::WebhooksArgs),
    /// Check what runs need: Python, atroposlib, checkout, keys (never shown), store, daemon, ports
    Doctor(doctor::DoctorArgs),
    /// Serve the RL tools (rl_list_environments, rl_start_training, …) to an agent over MCP on stdio
    Mcp(mcp::McpArgs),
    /// Forget finished runs and tests older than a limit: rows, events, logs and directories
    Gc(gc::GcArgs),
    /// Print a completion script for a shell (bash, zsh, fish, elvish, powershell)
    Completions(completions::CompletionsArgs),
    /// (internal) Copies stdin to stdout with secrets redacted; Slurm stages' output filter
    /// (`mask` was its name before 0.2: jobs submitted then still call it so)
    #[command(hide = true, alias = "mask")]
    Redact,
}

/// The command line, parsed as `Cli::parse` would, minus tearing the parser down afterwards:
/// freeing every subcommand's definitions cost more instructions than parsing `run start`.
pub fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let mut command = Cli::command();
    let matches = command.try_get_matches_from_mut(std::env::args_os()).unwrap_or_else(|err| err.exit());
    let parsed = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.format(&mut command).exit());
    std::mem::forget(command);
    parsed
}

pub fn dispatch(cli: Cli) -> CliResult {
    if let Command::Redact = cli.command {
        let code = lachesis::secrets::filter_main();
        return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)));
    }
    if let Command::Completions(args) = cli.command {
        return completions::run(args);
    }
    // Before the env file is read: writing a unit needs none of its keys.
    if let Command::Daemon(args) = &cli.command
        && (args.install_service || args.uninstall_service)
    {
        if args.uninstall_service {
            return service_install::uninstall(args.force);
        }
        let globals = service_install::GlobalOptions {
            home: cli.home,
            env_file: cli.env_file,
            database_url: cli.database_url,
        };
        return service_install::install(globals, args.force);
    }
    if !matches!(cli.command, Command::Daemon(_) | Command::Mcp(_)) {
        one_malloc_arena();
    }
    let settings = Settings::new(cli.home, cli.database_url);
    if matches!(
        cli.command,
        Command::Daemon(_)
            | Command::Mcp(_)
            | Command::Doctor(_)
            | Command::Run(_)
            | Command::Test(_)
            | Command::Sweep(_)
    ) {
        // Keys the environment lacks; looked up through environ::var, handed to children. Run
        // and test commands check credentials when no daemon takes their request.
        let (path, required) = lachesis::environ::choose(cli.env_file, &settings.home);
        lachesis::environ::load(&path, required)?;
    }
    match cli.command {
        Command::Daemon(args) => daemon::run(settings, args),
        Command::Run(command) => current_thread()?.block_on(run::run(settings, command)),
        Command::Env(command) => current_thread()?.block_on(env::run(settings, command)),
        Command::Config(command) => current_thread()?.block_on(config::run(settings, command)),
        Command::Test(command) => current_thread()?.block_on(test::run(settings, command)),
        Command::Report(args) => current_thread()?.block_on(report::run(settings, args)),
        Command::Schedule(command) => current_thread()?.block_on(schedule::run(settings, command)),
        Command::Workflow(command) => workflow::run(settings, command),
        Command::Node(command) => current_thread()?.block_on(node::run(settings, command)),
        Command::Gc(args) => current_thread()?.block_on(gc::run(settings, args)),
        Command::Webhooks(args) => current_thread()?.block_on(webhooks::run(settings, args)),
        Command::Sweep(command) => current_thread()?.block_on(sweep::run(settings, command)),
        Command::Doctor(args) => current_thread()?.block_on(doctor::run(settings, args)),
        Command::Mcp(args) => current_thread()?.block_on(mcp::run(settings, args)),
        Command::Redact | Command::Completions(_) => unreachable!("handled above"),
    }
}

/// A short command's second thread (SQLite's worker) would otherwise get a malloc arena of its
/// own: a fresh 64 MB mapping and its first-touch page faults, about a tenth of `run start`'s CPU.
/// Long-lived, busy processes (daemon, MCP server) keep glibc's default.
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// CLI commands do a few queries: one thread starts fastest.
fn current_thread() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}
