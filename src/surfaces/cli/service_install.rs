//! `lachesis daemon --install-service` / `--uninstall-service`: writes or removes the systemd
//! user unit (`service_unit.rs` renders it). systemctl is never run: enabling, starting and
//! stopping stay the user's, and the printed next steps say how.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory};

use super::service_unit::{self, CARRIED_PATHS, CARRIED_VARIABLES, UNIT_NAME, UnitError, UnitSpec};
use super::{Cli, CliResult};

/// The daemon's own flags that are about the service, not the daemon: never carried into it.
const SERVICE_FLAGS: &[&str] = &["install_service", "uninstall_service", "force"];

/// A unit larger than this is not one lachesis wrote: compared as different, never read whole.
const MAX_UNIT_SIZE: u64 = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Unit(#[from] UnitError),
    #[error("find the systemd user directory: neither XDG_CONFIG_HOME nor HOME is set")]
    NoConfigDir,
    #[error("find this executable's path: {0}")]
    Executable(std::io::Error),
    #[error("read the command line again: {0}")]
    Arguments(String),
    #[error(
        "write {path}: it is a symbolic link, and lachesis never writes through one; remove it and try again"
    )]
    Symlink { path: String },
    #[error("use {path}: it exists and is not a regular file")]
    NotAFile { path: String },
    #[error("install the service: {path} exists and differs from this unit; add --force to replace it")]
    Differs { path: String },
    #[error("remove {path}: lachesis did not write it; add --force to remove it anyway")]
    NotOurs { path: String },
    #[error(
        "remove {path}: the service is still enabled; run `systemctl --user disable --now lachesis` first"
    )]
    Enabled { path: String },
    #[error("{action} {path}: {source}")]
    Io { action: &'static str, path: String, source: std::io::Error },
}

/// The first line of every unit lachesis writes: how `--uninstall-service` knows its own.
const MARKER: &str = "# Written by `lachesis daemon --install-service`";

/// What the global options said, for the unit's environment (each None when not given).
pub struct GlobalOptions {
    pub home: Option<PathBuf>,
    pub env_file: Option<PathBuf>,
    pub database_url: Option<String>,
}

pub fn install(globals: GlobalOptions, force: bool) -> CliResult {
    let path = unit_path()?;
    let spec = spec(globals)?;
    let unit = service_unit::render(&spec)?;
    let outcome = write_unit(&path, &unit, force)?;
    let shown = path.display();
    let mut out = std::io::stdout().lock();
    match outcome {
        Written::Created => writeln!(out, "Wrote {shown}")?,
        Written::Replaced => writeln!(out, "Replaced {shown}")?,
        Written::Unchanged => writeln!(out, "{shown} is already this unit; left as it is")?,
    }
    let runs = [spec.executable.display().to_string(), "daemon".to_string()];
    writeln!(
        out,
        "It runs: {}",
        runs.iter().chain(&spec.daemon_args).cloned().collect::<Vec<_>>().join(" ")
    )?;
    writeln!(out, "Next steps:")?;
    writeln!(out, "  systemctl --user daemon-reload && systemctl --user enable --now lachesis")?;
    writeln!(out, "  loginctl enable-linger $USER    # start it at boot, without waiting for a login")?;
    writeln!(out, "  journalctl --user -u lachesis -f  # its log")?;
    Ok(ExitCode::SUCCESS)
}

pub fn uninstall(force: bool) -> CliResult {
    let path = unit_path()?;
    let shown = path.display().to_string();
    let mut out = std::io::stdout().lock();
    if !remove_unit(&path, force)? {
        writeln!(out, "No unit at {shown}; nothing to remove")?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(out, "Removed {shown}")?;
    writeln!(out, "Next step: systemctl --user daemon-reload")?;
    writeln!(out, "(stages of runs still going keep running; a daemon started by hand re-attaches them)")?;
    Ok(ExitCode::SUCCESS)
}

fn unit_path() -> Result<PathBuf, ServiceError> {
    let xdg = std::env::var_os("XDG_CONFIG_HOME");
    let home = std::env::var_os("HOME");
    service_unit::unit_path(xdg.as_deref(), home.as_deref()).ok_or(ServiceError::NoConfigDir)
}

/// The unit's contents from this invocation: this executable, the daemon flags given on the
/// command line or through their environment variables (a user service does not see the
/// shell's), the home, env file and store when set, and the carried settings variables.
fn spec(globals: GlobalOptions) -> Result<UnitSpec, ServiceError> {
    let executable = std::env::current_exe().map_err(ServiceError::Executable)?;
    // Linux names a replaced executable "… (deleted)": a unit must not point at that.
    if !executable.is_file() {
        let gone =
            std::io::Error::new(std::io::ErrorKind::NotFound, "it was replaced or removed since it started");
        return Err(ServiceError::Executable(gone));
    }
    let command = built_command();
    let matches = command
        .clone()
        .try_get_matches_from(std::env::args_os())
        .map_err(|err| ServiceError::Arguments(err.kind().to_string()))?;
    let daemon_args = match (command.find_subcommand("daemon"), matches.subcommand_matches("daemon")) {
        (Some(definition), Some(matches)) => given_flags(definition, matches)?,
        _ => Vec::new(),
    };
    let mut environment = Vec::new();
    // Settings made absolute here: the service's working directory is not the shell's.
    let absolute = |path: PathBuf| std::path::absolute(&path).unwrap_or(path);
    for (name, path) in [("LACHESIS_HOME", globals.home), ("LACHESIS_ENV_FILE", globals.env_file)] {
        if let Some(path) = path.map(absolute) {
            let value =
                path.into_os_string().into_string().map_err(|_| UnitError::NotUtf8 { what: name.into() })?;
            environment.push((name.to_string(), value));
        }
    }
    if let Some(url) = globals.database_url {
        environment.push(("LACHESIS_DATABASE_URL".to_string(), url));
    }
    for name in CARRIED_PATHS {
        if let Some(value) = std::env::var_os(name) {
            let paths = std::env::split_paths(&value).filter(|p| !p.as_os_str().is_empty()).map(absolute);
            let joined = std::env::join_paths(paths).unwrap_or(value);
            let value = joined.into_string().map_err(|_| UnitError::NotUtf8 { what: format!("${name}") })?;
            environment.push((name.to_string(), value));
        }
    }
    for name in CARRIED_VARIABLES {
        if let Some(value) = std::env::var_os(name) {
            let value = value.into_string().map_err(|_| UnitError::NotUtf8 { what: format!("${name}") })?;
            environment.push((name.to_string(), value));
        }
    }
    Ok(UnitSpec { executable, daemon_args, environment })
}

/// The command line's definition with every subcommand's arguments in place (they are deferred
/// until built) and the global ones copied into each.
fn built_command() -> clap::Command {
    let mut command = Cli::command();
    command.build();
    command
}

/// The daemon flags this command line gave (or their environment variables), as `--flag value`
/// words, in the definition's order; defaults stay out so a newer lachesis's defaults apply.
pub fn given_flags(definition: &clap::Command, matches: &ArgMatches) -> Result<Vec<String>, ServiceError> {
    let mut words = Vec::new();
    for arg in definition.get_arguments() {
        let id = arg.get_id().as_str();
        let Some(long) = arg.get_long() else { continue };
        let given =
            matches!(matches.value_source(id), Some(ValueSource::CommandLine | ValueSource::EnvVariable));
        // Global options (home, env file, store) go into the unit's environment instead.
        if SERVICE_FLAGS.contains(&id) || arg.is_global_set() || !given {
            continue;
        }
        if !arg.get_action().takes_values() {
            words.push(format!("--{long}"));
            continue;
        }
        for value in matches.get_raw(id).into_iter().flatten() {
            let value = value.to_str().ok_or_else(|| UnitError::NotUtf8 { what: format!("--{long}") })?;
            words.push(format!("--{long}"));
            words.push(value.to_string());
        }
    }
    Ok(words)
}

enum Written {
    Created,
    Replaced,
    Unchanged,
}

/// Writes `unit` at `path` through a temporary file renamed over it: the rename replaces a link
/// itself rather than following it, and a reader never sees half a unit.
fn write_unit(path: &Path, unit: &str, force: bool) -> Result<Written, ServiceError> {
    let shown = path.display().to_string();
    let existed = match existing_unit(path)? {
        Some(current) if current == unit => return Ok(Written::Unchanged),
        Some(_) if !force => return Err(ServiceError::Differs { path: shown }),
        Some(_) => true,
        None => false,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    create_dirs(dir)?;
    let temporary = dir.join(format!(".{UNIT_NAME}.{}.tmp", std::process::id()));
    let io = |action, source| ServiceError::Io { action, path: shown.clone(), source };
    let written = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&temporary)?;
        // 0644, readable by others, whatever the umask: a unit holds no secret, and this is the
        // mode systemctl and package managers give units.
        file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        file.write_all(unit.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if let Err(source) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(io("write", source));
    }
    Ok(if existed { Written::Replaced } else { Written::Created })
}

/// The unit at `path`, None when there is none; a link or a non-file there is refused. A file
/// too large or not UTF-8 reads as an empty string (different from any unit).
fn existing_unit(path: &Path) -> Result<Option<String>, ServiceError> {
    let shown = path.display().to_string();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ServiceError::Io { action: "inspect", path: shown, source }),
    };
    if meta.file_type().is_symlink() {
        return Err(ServiceError::Symlink { path: shown });
    }
    if !meta.is_file() {
        return Err(ServiceError::NotAFile { path: shown });
    }
    let read = || -> std::io::Result<Vec<u8>> {
        let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
        let mut bytes = Vec::new();
        file.take(MAX_UNIT_SIZE + 1).read_to_end(&mut bytes)?;
        Ok(bytes)
    };
    let bytes = read().map_err(|source| ServiceError::Io { action: "read", path: shown, source })?;
    Ok(Some(String::from_utf8(bytes).unwrap_or_default()))
}

/// Creates the unit's directory and its missing parents as 0755 (the umask lachesis runs under
/// would make them 0700; systemd reads either, 0755 is what a config directory has).
fn create_dirs(dir: &Path) -> Result<(), ServiceError> {
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    let io = |source| ServiceError::Io { action: "create", path: dir.display().to_string(), source };
    std::fs::create_dir_all(dir).map_err(io)?;
    for created in missing {
        std::fs::set_permissions(created, std::fs::Permissions::from_mode(0o755)).map_err(io)?;
    }
    Ok(())
}

/// Removes the unit at `path`: false when there was none. Refused while the unit is enabled
/// (`systemctl disable` needs the file to find what to undo) and, without `force`, when
/// lachesis did not write it.
fn remove_unit(path: &Path, force: bool) -> Result<bool, ServiceError> {
    let shown = path.display().to_string();
    let Some(current) = existing_unit(path)? else { return Ok(false) };
    let dir = path.parent().unwrap_or(Path::new("."));
    let wanted_by = dir.join("default.target.wants").join(UNIT_NAME);
    if std::fs::symlink_metadata(&wanted_by).is_ok() {
        return Err(ServiceError::Enabled { path: shown });
    }
    if !current.starts_with(MARKER) && !force {
        return Err(ServiceError::NotOurs { path: shown });
    }
    std::fs::remove_file(path).map_err(|source| ServiceError::Io {
        action: "remove",
        path: shown,
        source,
    })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn daemon_flags(argv: &[&str]) -> Vec<String> {
        let command = built_command();
        let matches = command.clone().try_get_matches_from(argv).unwrap();
        given_flags(command.find_subcommand("daemon").unwrap(), matches.subcommand_matches("daemon").unwrap())
            .unwrap()
    }

    #[test]
    fn carries_the_flags_given_and_no_default() {
        let table: &[(&[&str], &[&str])] = &[
            (&["lachesis", "daemon", "--install-service"], &[]),
            (
                &[
                    "lachesis",
                    "daemon",
                    "--max-parallel=4",
                    "--install-service",
                    "--listen",
                    "127.0.0.1:7000",
                ],
                &["--listen", "127.0.0.1:7000", "--max-parallel", "4"],
            ),
            (
                &[
                    "lachesis",
                    "--home",
                    "/h",
                    "daemon",
                    "--label",
                    "a=b",
                    "--label",
                    "c=d",
                    "--install-service",
                ],
                &["--label", "a=b", "--label", "c=d"],
            ),
            (
                &["lachesis", "daemon", "--install-service", "--force", "--stop-grace", "30s"],
                &["--stop-grace", "30s"],
            ),
        ];
        for (argv, expected) in table {
            assert_eq!(daemon_flags(argv), *expected, "{argv:?}");
        }
    }

    #[test]
    fn service_flags_exclude_each_other() {
        let parse = |argv: &[&str]| Cli::command().try_get_matches_from(argv).is_ok();
        assert!(!parse(&["lachesis", "daemon", "--install-service", "--uninstall-service"]));
        assert!(!parse(&["lachesis", "daemon", "--force"]));
        assert!(parse(&["lachesis", "daemon", "--uninstall-service", "--force"]));
    }
}
