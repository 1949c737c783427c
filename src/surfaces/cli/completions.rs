//! `lachesis completions SHELL`: the shell's completion script for every command and flag.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

use super::{Cli, CliResult};

#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// bash: `source <(lachesis completions bash)` in ~/.bashrc; zsh: save as `_lachesis` on
    /// $fpath; fish: save in ~/.config/fish/completions/lachesis.fish
    shell: Shell,
}

pub fn run(args: CompletionsArgs) -> CliResult {
    // Rendered into memory first: clap_complete panics on a failed write (`| head` closing the
    // pipe), a write of our own returns the error instead.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "lachesis", &mut script);
    std::io::stdout().lock().write_all(&script)?;
    Ok(ExitCode::SUCCESS)
}
