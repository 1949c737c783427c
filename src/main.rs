//! The `lachesis` binary: parse, dispatch, print. Errors are rendered here and only here.

use std::process::ExitCode;

// The CLI sits with the other surfaces (src/surfaces/cli/); it is the binary's, not the library's.
#[path = "surfaces/cli/mod.rs"]
mod cli;

fn main() -> ExitCode {
    open_closed_standard_descriptors();
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
            // Not eprintln!, which panics when stderr fails (a full disk, a gone reader).
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "lachesis: {err}");
            ExitCode::from(cli::exit_code::for_error(err.as_ref()))
        }
    }
}

/// Started with stdin, stdout or stderr closed (`lachesis daemon >&- 2>&-`), the next file
/// opened would take its number, and a write meant for stderr would land in it (the store,
/// a stage's log). Each closed one is opened on /dev/null first.
fn open_closed_standard_descriptors() {
    use std::os::fd::IntoRawFd;
    for fd in 0..3 {
        // SAFETY: F_GETFD only reads the descriptor's flags.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1 {
            continue;
        }
        // The lowest free number is `fd` (those below it are open by now).
        let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") else { return };
        if null.into_raw_fd() != fd {
            return;
        }
    }
}
