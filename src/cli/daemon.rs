use std::process::ExitCode;

use lachesis::daemon::{self, DaemonOptions};
use lachesis::settings::Settings;
use lachesis::workflow::Dur;

use super::CliResult;

#[derive(clap::Args)]
pub struct DaemonArgs {
    /// Serve the HTTP API here (e.g. 127.0.0.1:7077); other addresses than 127.0.0.1/::1 need
    /// LACHESIS_API_TOKEN
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Runs started at once at most, whatever their resources
    #[arg(long, default_value_t = 8)]
    max_parallel: usize,
    /// SIGTERM-to-SIGKILL grace for workflows that set none
    #[arg(long, default_value = "10s")]
    stop_grace: Dur,
    /// Fallback store scan interval (wake-ups normally arrive at once)
    #[arg(long, default_value = "2s")]
    scan_interval: Dur,
}

pub fn run(settings: Settings, args: DaemonArgs) -> CliResult {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LACHESIS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let options = DaemonOptions {
        listen: args.listen,
        max_parallel: args.max_parallel,
        stop_grace: args.stop_grace.0,
        scan_interval: args.scan_interval.0,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(daemon::run(settings, options))?;
    Ok(ExitCode::SUCCESS)
}
