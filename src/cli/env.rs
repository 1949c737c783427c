//! `lachesis env …`: discover, show and select environments.

use std::process::ExitCode;

use lachesis::service::Service;
use lachesis::settings::Settings;

use super::CliResult;
use super::output::{print_json, table};

#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum EnvCommand {
    /// List the environments found in the environment directories
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show one environment
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Select an environment for the next run (loads its configurable fields and defaults)
    Select {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(settings: Settings, command: EnvCommand) -> CliResult {
    let service = Service::open(settings).await?;
    match command {
        EnvCommand::List { json } => {
            let discovery = service.environments();
            for warning in &discovery.warnings {
                eprintln!("warning: {warning}");
            }
            if json {
                print_json(&discovery.environments)?;
            } else if discovery.environments.is_empty() {
                let dirs: Vec<String> =
                    service.settings.environment_dirs.iter().map(|d| d.display().to_string()).collect();
                println!("no environments found in {}", dirs.join(", "));
            } else {
                let mut t = table(["NAME", "CLASS", "DESCRIPTION", "FILE"]);
                for env in &discovery.environments {
                    t.add_row([
                        env.name.clone(),
                        env.class_name.clone(),
                        env.description.clone(),
                        env.file_path.display().to_string(),
                    ]);
                }
                println!("{t}");
            }
        }
        EnvCommand::Show { name, json } => {
            let env = service.environment(&name)?;
            if json {
                print_json(&env)?;
            } else {
                println!("name         {}", env.name);
                println!("class        {}", env.class_name);
                println!("config class {}", env.config_class);
                println!("file         {}", env.file_path.display());
                println!("description  {}", env.description);
            }
        }
        EnvCommand::Select { name, json } => {
            let selection = service.select(&name).await?;
            if json {
                print_json(&selection)?;
            } else {
                if let Some(why) = &selection.fell_back {
                    eprintln!("note: {why}");
                }
                println!(
                    "selected {} ({} configurable fields; `lachesis config show` lists them)",
                    selection.env_name,
                    selection.config.len()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
