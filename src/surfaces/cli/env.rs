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
        /// Also import each verifiers environment in the Python (runs its module's code; off
        /// by default) and say whether it imports
        #[arg(long)]
        check: bool,
        /// With --check: the most one import may take before it is killed
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration, value_name = "DURATION")]
        check_timeout: std::time::Duration,
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
        EnvCommand::List { json, check, check_timeout } => {
            let discovery = service.environments().await;
            for warning in &discovery.warnings {
                eprintln!("warning: {}", lachesis::text::one_line(&warning.to_string()));
            }
            let mut checks = Vec::new();
            if check {
                for env in &discovery.environments {
                    if env.kind == lachesis::environments::EnvKind::Verifiers {
                        eprintln!("checking {}: importing it in {}…", env.name, service.settings.python);
                    }
                    let said = service.check_environment(env, check_timeout).await;
                    let text = match said {
                        None => "not imported (atropos: `env select` introspects it)".to_string(),
                        Some(Ok(())) => "ok".to_string(),
                        Some(Err(why)) => why,
                    };
                    checks.push(text);
                }
            }
            if json && check {
                let listed: Vec<serde_json::Value> = discovery
                    .environments
                    .iter()
                    .zip(&checks)
                    .map(|(env, said)| {
                        let mut value = serde_json::to_value(env).unwrap_or_default();
                        value["check"] = serde_json::Value::String(said.clone());
                        value
                    })
                    .collect();
                print_json(&listed)?;
            } else if json {
                print_json(&discovery.environments)?;
            } else if discovery.environments.is_empty() {
                let dirs: Vec<String> =
                    service.settings.environment_dirs.iter().map(|d| d.display().to_string()).collect();
                println!("no environments found in {}", dirs.join(", "));
            } else {
                let mut t = table(["NAME", "KIND", "CLASS", "DESCRIPTION", "FROM"]);
                if check {
                    t.set_header(["NAME", "KIND", "CLASS", "DESCRIPTION", "FROM", "CHECK"]);
                }
                for (i, env) in discovery.environments.iter().enumerate() {
                    let from = match &env.source {
                        lachesis::environments::EnvSource::Package { .. } => env.source.describe(),
                        lachesis::environments::EnvSource::Directory { .. } => {
                            env.file_path.display().to_string()
                        }
                    };
                    let mut row = vec![
                        env.name.clone(),
                        env.kind.to_string(),
                        env.class_name.clone(),
                        env.description.clone(),
                        from,
                    ];
                    if let Some(said) = checks.get(i) {
                        row.push(said.clone());
                    }
                    t.add_row(row);
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
            let selection = service.select_environment(&name).await?;
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
