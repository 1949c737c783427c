use std::process::ExitCode;

use lachesis::service::Service;
use lachesis::settings::Settings;

use super::CliResult;

pub async fn run(settings: Settings) -> CliResult {
    // stdout is the protocol: nothing else may print there.
    let service = Service::open(settings).await?;
    lachesis::mcp::serve(service).await?;
    Ok(ExitCode::SUCCESS)
}
