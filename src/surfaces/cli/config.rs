//! `lachesis config …`: the selected environment's configuration for the next run.

use std::process::ExitCode;

use lachesis::service::Service;
use lachesis::settings::Settings;

use super::CliResult;
use super::output::{print_json, table};

#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum ConfigCommand {
    /// Show configurable and locked fields with their current values
    Show {
        #[arg(long)]
        json: bool,
    },
    /// Set a configurable field (checked against its type and the locked profile)
    Set { field: String, value: String },
}

pub async fn run(settings: Settings, command: ConfigCommand) -> CliResult {
    let service = Service::open(settings).await?;
    match command {
        ConfigCommand::Show { json } => {
            let view = service.environment_config().await?;
            if json {
                print_json(&view)?;
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "environment {} ({}, {}), config class {}",
                view.environment,
                view.kind,
                view.source.clone().unwrap_or_else(|| view.env_file.clone()),
                view.config_class
            );
            if let Some(why) = &view.fell_back {
                println!("note: {why}");
            }
            let mut t = table(["FIELD", "TYPE", "VALUE", "DEFAULT", "DESCRIPTION"]);
            for f in &view.configurable_fields {
                // A required field shows what it needs instead of a default.
                let default = if f.required { "(required)".to_string() } else { f.default.to_string() };
                t.add_row([
                    f.name.clone(),
                    f.type_name.clone(),
                    f.value.to_string(),
                    default,
                    f.description.clone().unwrap_or_default(),
                ]);
            }
            println!("\nconfigurable\n{t}");
            let mut t = table(["FIELD", "LOCKED VALUE"]);
            for f in &view.locked_fields {
                t.add_row([f.name.clone(), f.value.to_string()]);
            }
            println!("\nlocked by workflow '{}' (edit the workflow file to change)\n{t}", view.workflow);
            if !view.workflow_vars.is_empty() {
                let mut t = table(["VAR", "DEFAULT"]);
                for (name, default) in &view.workflow_vars {
                    t.add_row([name.clone(), default.clone()]);
                }
                println!("\nvars of workflow '{}' (per run: --var NAME=VALUE)\n{t}", view.workflow);
            }
        }
        ConfigCommand::Set { field, value } => {
            let value = service.set_environment_config(&field, &value).await?;
            println!("{field} = {value}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
