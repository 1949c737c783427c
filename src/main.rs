//! The `lachesis` binary: parse, dispatch, print. Errors are rendered here and only here.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    cli::output::exit_quietly_on_broken_pipe();
    let args = cli::Cli::parse();
    match cli::dispatch(args) {
        Ok(code) => code,
        Err(err) if cli::output::is_broken_pipe(err.as_ref()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("lachesis: {err}");
            ExitCode::FAILURE
        }
    }
}
