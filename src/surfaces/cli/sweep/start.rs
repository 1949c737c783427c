//! `lachesis sweep start FILE`: queue a sweep's members; prints its id and members.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lachesis::model::short_id;
use lachesis::service::{RunRequest, Service};

use crate::cli::CliResult;
use crate::cli::output::print_json;

/// The largest sweep file read (a sweep file is a page of YAML).
const MAX_SWEEP_FILE: u64 = 1 << 20;

#[derive(clap::Args)]
pub struct StartArgs {
    /// The sweep file (`-`: standard input), or a name in the workflows' `sweeps/` directory
    file: PathBuf,
    /// Queue every member held: none is claimed until released
    #[arg(long)]
    hold: bool,
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, StartArgs { file, hold, json }: StartArgs) -> CliResult {
    let (text, origin) = sweep_text(service, &file)?;
    let overrides = RunRequest { hold: hold.then_some(true), ..RunRequest::default() };
    let started = service.submit_sweep(&text, Some(&origin), overrides).await?;
    if json {
        print_json(&serde_json::json!({
            "id": started.sweep.id,
            "workflow": started.sweep.workflow,
            "members": started.members,
            "max_live": started.sweep.max_live,
        }))?;
    } else {
        println!("{}", started.sweep.id);
        let ids: Vec<String> = started.members.iter().map(short_id).collect();
        let live = started.sweep.max_live.map_or_else(String::new, |n| format!(", at most {n} at once"));
        eprintln!("{} members queued{live}: {}", ids.len(), ids.join(" "));
    }
    Ok(ExitCode::SUCCESS)
}

/// The sweep `FILE` names and its directory (where a W&B `program:` runs): a file of the
/// user's, read as given (`-`: standard input, from the current directory); else a name in the
/// workflows' `sweeps/`, read as every surface reads one (`Catalog::sweep_text`: a regular file,
/// never through a symlink).
fn sweep_text(service: &Service, file: &Path) -> Result<(String, PathBuf), Box<dyn std::error::Error>> {
    if file.as_os_str() == "-" || file.exists() || file.components().count() > 1 {
        let text = crate::cli::input::read_text(file, MAX_SWEEP_FILE, "sweep file")?;
        let origin = match file.parent().filter(|p| file.as_os_str() != "-" && !p.as_os_str().is_empty()) {
            Some(parent) => parent.to_path_buf(),
            None => std::env::current_dir()?,
        };
        return Ok((text, std::path::absolute(origin)?));
    }
    let catalog = service.settings.catalog()?;
    Ok((catalog.sweep_text(&file.to_string_lossy())?, catalog.sweeps_dir()))
}
