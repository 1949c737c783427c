use lachesis::service::Service;
use lachesis::settings::Settings;

use super::CliResult;
use super::output::print_json;

#[derive(clap::Args)]
pub struct DoctorArgs {
    #[arg(long)]
    json: bool,
}

pub async fn run(settings: Settings, args: DoctorArgs) -> CliResult {
    let service = Service::open(settings).await?;
    let checkup = lachesis::doctor::checkup(&service).await;
    if args.json {
        print_json(&checkup.to_json())?;
    } else {
        for c in &checkup.checks {
            let mark = match (c.ok, c.required) {
                (true, _) => "ok  ",
                (false, true) => "FAIL",
                (false, false) => "warn",
            };
            println!("{mark} {:<18} {}", c.name, c.detail);
        }
    }
    Ok(crate::cli::exit_code::ok_or_not(checkup.healthy()))
}
