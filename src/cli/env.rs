//! `lachesis env …`: discover, show and select environments.

use std::process::ExitCode;

use lachesis::service::Service;
use lachesis::settings::Settings;

use super::CliResult;
use super::output::{print_json, table};

#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum EnvCommand {
    /// List the environments: Atropos classes and vf-init layouts in the environment
    /// directories, and verifiers packages installed in LACHESIS_PYTHON
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
            let discovery = service.environments().await;
            for warning in &discovery.warnings {
                eprintln!("warning: {}", lachesis::text::one_line(&warning.to_string()));
            }
            if json {
                print_json(&discovery.environments)?;
            } else if discovery.environments.is_empty() {
                let dirs: Vec<String> =
                    service.settings.environment_dirs.iter().map(|d| d.display().to_string()).collect();
                println!("no environments found in {}", dirs.join(", "));
            } else {
                let mut t = table(["NAME", "KIND", "CLASS", "DESCRIPTION", "FROM"]);
                for env in &discovery.environments {
                    let from = match &env.source {
                        lachesis::environments::EnvSource::Package { .. } => env.source.describe(),
                        lachesis::environments::EnvSource::Directory { .. } => {
                            env.file_path.display().to_string()
                        }
                    };
                    t.add_row([
                        env.name.clone(),
                        env.kind.to_string(),
                        env.class_name.clone(),
                        env.description.clone(),
                        from,
                    ]);
                }
                println!("{t}");
            }
        }
        EnvCommand::Show { name, json } => {
            let env = service.environment(&name).await?;
            if json {
                print_json(&env)?;
            } else {
                println!("name         {}", env.name);
                println!("kind         {}", env.kind);
                println!("from         {}", env.source.describe());
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
