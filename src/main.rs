//! The `lachesis` binary: parse, dispatch, print. Errors are rendered here and only here.

use std::process::ExitCode;

mod cli;

fn main() -> ExitCode {
    cli::output::exit_quietly_on_broken_pipe();
    // Everything lachesis and its stages create is private to this user (the store holds --var
    // values and webhook passwords, logs hold prompts) whatever umask the shell had; files
    // that matter also get their mode set explicitly where they are created.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    // The shim fallback (no `lachesis-shim` beside us) skips the option parser, as that does.
    if std::env::args_os().nth(1).is_some_and(|arg| arg == "shim") {
        let code = lachesis::launch::shim::main(std::env::args_os().skip(2));
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let args = cli::parse();
    match cli::dispatch(args) {
        Ok(code) => code,
        Err(err) if cli::output::is_broken_pipe(err.as_ref()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("lachesis: {err}");
            ExitCode::FAILURE
        }
    }
}
