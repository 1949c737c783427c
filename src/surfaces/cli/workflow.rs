use std::process::ExitCode;

use lachesis::settings::Settings;

use super::CliResult;
use super::output::{print_json, table};

#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum WorkflowCommand {
    /// List the workflows in the workflow directory
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show one workflow as lachesis reads it
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(settings: Settings, command: WorkflowCommand) -> CliResult {
    let catalog = settings.catalog()?;
    match command {
        WorkflowCommand::List { json } => {
            let default = catalog.default_name();
            let rows: Vec<serde_json::Value> = catalog
                .names()
                .into_iter()
                .map(|name| match catalog.load(&name) {
                    Ok(wf) => serde_json::json!({
                        "name": name, "default": name == default, "stages": wf.stages.iter().map(|s| &s.name).collect::<Vec<_>>(),
                        "credentials": wf.credentials, "description": wf.description,
                    }),
                    Err(err) => serde_json::json!({ "name": name, "error": err.to_string() }),
                })
                .collect();
            if json {
                print_json(&rows)?;
            } else {
                let mut t = table(["WORKFLOW", "STAGES", "NEEDS", "DESCRIPTION"]);
                for row in &rows {
                    let name = row["name"].as_str().unwrap_or_default();
                    let mark = if row["default"].as_bool() == Some(true) { " (default)" } else { "" };
                    let list = |v: &serde_json::Value| {
                        v.as_array()
                            .map(|a| a.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(", "))
                            .unwrap_or_default()
                    };
                    let description =
                        row["description"].as_str().or(row["error"].as_str()).unwrap_or_default();
                    t.add_row([
                        format!("{name}{mark}"),
                        list(&row["stages"]),
                        list(&row["credentials"]),
                        description.to_string(),
                    ]);
                }
                println!("{t}");
                println!("workflows in {}", catalog.dir().display());
            }
        }
        WorkflowCommand::Show { name, json } => {
            let wf = catalog.load(&name)?;
            if json {
                print_json(&wf)?;
            } else {
                print!("{}", lachesis::yaml::to_string(&wf)?);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
