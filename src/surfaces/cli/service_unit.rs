//! The systemd user unit `lachesis daemon --install-service` writes: a pure render of the
//! executable, the daemon flags the user gave and the settings variables to carry.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The unit's file name; also the name `systemctl --user … lachesis` finds it by.
pub const UNIT_NAME: &str = "lachesis.service";

/// Settings the daemon reads from its environment, carried into the unit because a user service
/// starts with systemd's environment, not the shell's. Paths and names only: never a key
/// (`LACHESIS_API_TOKEN`, `TINKER_API_KEY`, … stay in the home's `.env`, which the daemon reads
/// itself). `PATH` too: stages run `python3`, `sbatch`, … found on the shell's PATH, and a user
/// service's PATH is systemd's short default.
pub const CARRIED_VARIABLES: &[&str] = &["LACHESIS_PYTHON", "LACHESIS_LOG", "PATH"];

/// Carried settings that hold paths (colon-separated lists for `LACHESIS_ENV_DIRS`): made
/// absolute, since the service's working directory is not the shell's.
pub const CARRIED_PATHS: &[&str] = &["LACHESIS_WORKFLOWS", "LACHESIS_TINKER_ATROPOS", "LACHESIS_ENV_DIRS"];

#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    #[error("write the systemd unit: {what} holds a control character, which a unit file cannot carry")]
    ControlCharacter { what: String },
    #[error("write the systemd unit: {what} is not valid UTF-8")]
    NotUtf8 { what: String },
    #[error(
        "write the systemd unit: the database URL holds a password and a unit file is readable by others; \
         remove the password from the URL and put it in ~/.pgpass (mode 600), then install again"
    )]
    PasswordInUrl,
}

/// What the unit runs: `executable daemon ARGS…` with `environment` set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitSpec {
    /// This executable's absolute path.
    pub executable: PathBuf,
    /// The daemon flags the user gave (`--max-parallel`, `4`, …), without the service ones.
    pub daemon_args: Vec<String>,
    /// `NAME=VALUE` pairs for `Environment=`, in order.
    pub environment: Vec<(String, String)>,
}

/// The unit file's text. Fails on what a unit cannot carry safely (a newline would start a new
/// directive) and on a database URL with a password in it.
pub fn render(spec: &UnitSpec) -> Result<String, UnitError> {
    let executable = text(spec.executable.as_os_str(), "the executable's path")?;
    let mut exec = vec![quote(executable, "the executable's path", Expansion::Exec)?];
    exec.push("daemon".to_string());
    for arg in &spec.daemon_args {
        exec.push(quote(arg, &format!("the daemon flag {arg:?}"), Expansion::Exec)?);
    }
    let mut unit = String::from(
        "# Written by `lachesis daemon --install-service`; `lachesis daemon --uninstall-service` removes it.\n\
         # No secret here (the file is readable by others): the daemon reads keys from its home's .env.\n\
         [Unit]\n\
         Description=lachesis: queue and supervisor of RL training runs\n\
         \n\
         [Service]\n\
         Type=exec\n",
    );
    unit.push_str(&format!("ExecStart={}\n", exec.join(" ")));
    for (name, value) in &spec.environment {
        if name == "LACHESIS_DATABASE_URL" && url_has_password(value) {
            return Err(UnitError::PasswordInUrl);
        }
        let what = format!("the variable {name}");
        unit.push_str(&format!(
            "Environment={}\n",
            quote(&format!("{name}={value}"), &what, Expansion::Plain)?
        ));
    }
    unit.push_str(
        "# Stages run under their own shims in their own sessions, and the daemon re-attaches them when\n\
         # it starts again. systemd's default KillMode (control-group) would kill every process in the\n\
         # service's cgroup, all the stages too, on `systemctl --user restart` or stop; `mixed` would\n\
         # SIGKILL them after the grace. `process` signals the daemon alone.\n\
         KillMode=process\n\
         Restart=on-failure\n\
         RestartSec=5s\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
    );
    Ok(unit)
}

/// Where the unit goes: `$XDG_CONFIG_HOME/systemd/user/`, else `~/.config/systemd/user/` (a
/// relative XDG_CONFIG_HOME is ignored, as the XDG spec says). None without either.
pub fn unit_path(xdg_config_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    let config = match xdg_config_home.map(Path::new) {
        Some(dir) if dir.is_absolute() => dir.to_path_buf(),
        _ => Path::new(home.filter(|h| !h.is_empty())?).join(".config"),
    };
    Some(config.join("systemd").join("user").join(UNIT_NAME))
}

/// Whether a `postgres://user:password@host/db` (or `?password=`) URL holds a password.
pub fn url_has_password(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let in_userinfo = authority.rsplit_once('@').is_some_and(|(userinfo, _)| userinfo.contains(':'));
    let in_query = rest.split_once('?').is_some_and(|(_, query)| {
        query.split('&').any(|pair| pair.to_ascii_lowercase().starts_with("password="))
    });
    in_userinfo || in_query
}

fn text<'a>(value: &'a OsStr, what: &str) -> Result<&'a str, UnitError> {
    value.to_str().ok_or_else(|| UnitError::NotUtf8 { what: what.to_string() })
}

/// Which expansions systemd applies to a setting: `%` specifiers everywhere, `$VAR` in
/// `ExecStart=` only.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expansion {
    Exec,
    Plain,
}

/// One word as systemd reads it back unchanged: bare when it is plain, else double-quoted with
/// `\` and `"` escaped; `%` (and `$` in a command line) doubled either way.
fn quote(word: &str, what: &str, expansion: Expansion) -> Result<String, UnitError> {
    if word.chars().any(char::is_control) {
        return Err(UnitError::ControlCharacter { what: what.to_string() });
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || "/_.,:=+@-".contains(c);
    let mut escaped = String::with_capacity(word.len() + 2);
    for c in word.chars() {
        match c {
            '%' => escaped.push_str("%%"),
            '$' if expansion == Expansion::Exec => escaped.push_str("$$"),
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            c => escaped.push(c),
        }
    }
    if !word.is_empty() && word.chars().all(plain) { Ok(escaped) } else { Ok(format!("\"{escaped}\"")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(executable: &str, args: &[&str], environment: &[(&str, &str)]) -> UnitSpec {
        UnitSpec {
            executable: PathBuf::from(executable),
            daemon_args: args.iter().map(|a| a.to_string()).collect(),
            environment: environment.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    fn line<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
        unit.lines().filter_map(|l| l.strip_prefix(key)).collect()
    }

    #[test]
    fn exec_start_and_environment_lines() {
        let table: &[(UnitSpec, &str, &[&str])] = &[
            (spec("/usr/bin/lachesis", &[], &[]), "/usr/bin/lachesis daemon", &[]),
            (
                spec("/opt/l/lachesis", &["--max-parallel", "4", "--listen", "127.0.0.1:7000"], &[]),
                "/opt/l/lachesis daemon --max-parallel 4 --listen 127.0.0.1:7000",
                &[],
            ),
            (
                spec("/home/a b/lachesis", &["--node", "gpu box"], &[("LACHESIS_HOME", "/home/a b/.l")]),
                "\"/home/a b/lachesis\" daemon --node \"gpu box\"",
                &["\"LACHESIS_HOME=/home/a b/.l\""],
            ),
            // `%` is a specifier and `$` a variable to systemd: doubled, they stay literal.
            (
                spec("/x/lachesis", &["--listen", "unix:/run/100%/$HOME.sock"], &[("PATH", "/a%b:/$c")]),
                "/x/lachesis daemon --listen \"unix:/run/100%%/$$HOME.sock\"",
                &["\"PATH=/a%%b:/$c\""],
            ),
            (
                spec("/x/lachesis", &["--label", "a\"b\\c"], &[]),
                "/x/lachesis daemon --label \"a\\\"b\\\\c\"",
                &[],
            ),
            (spec("/x/lachesis", &["--node", ""], &[]), "/x/lachesis daemon --node \"\"", &[]),
            (
                spec("/x/lachesis", &[], &[("LACHESIS_DATABASE_URL", "postgres://me@db:5432/l")]),
                "/x/lachesis daemon",
                &["LACHESIS_DATABASE_URL=postgres://me@db:5432/l"],
            ),
        ];
        for (spec, exec, environment) in table {
            let unit = render(spec).unwrap();
            assert_eq!(line(&unit, "ExecStart="), [*exec], "{spec:?}");
            assert_eq!(line(&unit, "Environment="), *environment, "{spec:?}");
            assert_eq!(line(&unit, "KillMode="), ["process"], "stages must outlive a restart");
            assert_eq!(line(&unit, "Restart="), ["on-failure"]);
            assert_eq!(line(&unit, "WantedBy="), ["default.target"]);
        }
    }

    #[test]
    fn refuses_what_a_unit_cannot_carry() {
        let newline = spec("/x/lachesis", &["--node", "a\nExecStartPre=/bin/evil"], &[]);
        assert!(matches!(render(&newline), Err(UnitError::ControlCharacter { .. })));
        let in_env = spec("/x/lachesis", &[], &[("PATH", "/bin\r")]);
        assert!(matches!(render(&in_env), Err(UnitError::ControlCharacter { .. })));
        let password = spec("/x/lachesis", &[], &[("LACHESIS_DATABASE_URL", "postgres://me:hunter2@db/l")]);
        let err = render(&password).unwrap_err();
        assert!(matches!(err, UnitError::PasswordInUrl));
        assert!(!err.to_string().contains("hunter2"));
    }

    #[test]
    fn passwords_in_urls() {
        let table = [
            ("postgres://me:secret@db/l", true),
            ("postgres://me@db/l", false),
            ("postgres://db:5432/l", false),
            ("postgres://me@db/l?sslmode=require&password=x", true),
            ("postgres://me@db/l?PASSWORD=x", true),
            ("postgres://a:b@c@db/l", true),
            ("sqlite:///home/me/l.db", false),
            ("sqlite:///home/me:x@y/l.db", false),
        ];
        for (url, expected) in table {
            assert_eq!(url_has_password(url), expected, "{url}");
        }
    }

    #[test]
    fn unit_paths() {
        let os = |s: &'static str| Some(OsStr::new(s));
        let table = [
            (os("/xdg"), os("/home/me"), Some("/xdg/systemd/user/lachesis.service")),
            (None, os("/home/me"), Some("/home/me/.config/systemd/user/lachesis.service")),
            (os("relative"), os("/home/me"), Some("/home/me/.config/systemd/user/lachesis.service")),
            (os(""), os("/home/me"), Some("/home/me/.config/systemd/user/lachesis.service")),
            (None, None, None),
            (None, os(""), None),
        ];
        for (xdg, home, expected) in table {
            assert_eq!(unit_path(xdg, home), expected.map(PathBuf::from), "{xdg:?} {home:?}");
        }
    }
}
