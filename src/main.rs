//! The `lachesis` binary: parse, dispatch, print. Errors are rendered here and only here.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::dispatch(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("lachesis: {err}");
            ExitCode::FAILURE
        }
    }
}
