//! Keys from a `.env` file (`$LACHESIS_HOME/.env`, or `--env-file` / `LACHESIS_ENV_FILE`), for the
//! daemon and `lachesis mcp`: an agent's MCP client usually starts the server with almost no
//! environment. The real environment wins over the file; a file others can read is refused. Where
//! each key came from is remembered (never its value) so `doctor` can say.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Where a key's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// The process environment (it wins over the file).
    Environment,
    /// The env file at this path.
    File(PathBuf),
}

#[derive(Debug, thiserror::Error)]
pub enum EnvFileError {
    #[error(
        "refusing to read keys from {path}: it is readable by group or others (mode {mode:o}); run `chmod 600 {path}`"
    )]
    TooOpen { path: String, mode: u32 },
    #[error("read the env file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("parse the env file {path}: {detail}")]
    Parse { path: String, detail: String },
    #[error("load the env file {path}: keys were already loaded from an env file")]
    Twice { path: String },
}

/// The keys the file gave this process (those its environment lacked), set once at start. They
/// are never written into the process environment (`set_var` is unsound once threads exist):
/// lookups go through `var`, and children get them through `child_env`.
static FROM_FILE: OnceLock<FileKeys> = OnceLock::new();

#[derive(Debug, Default)]
struct FileKeys {
    path: PathBuf,
    values: BTreeMap<String, String>,
}

/// The keys a file at `path` holds, checked for its mode. `Ok(None)` when it does not exist and
/// `required` is false (the default file is optional; one named by a flag is not).
pub fn read(path: &Path, required: bool) -> Result<Option<Vec<(String, String)>>, EnvFileError> {
    let shown = path.display().to_string();
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound && !required => return Ok(None),
        Err(source) => return Err(EnvFileError::Read { path: shown, source }),
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(EnvFileError::TooOpen { path: shown, mode });
    }
    let iter = dotenvy::from_path_iter(path)
        .map_err(|e| EnvFileError::Parse { path: shown.clone(), detail: e.to_string() })?;
    let mut pairs = Vec::new();
    for item in iter {
        // dotenvy's parse errors name the line, never the value.
        let (key, value) =
            item.map_err(|e| EnvFileError::Parse { path: shown.clone(), detail: e.to_string() })?;
        pairs.push((key, value));
    }
    Ok(Some(pairs))
}

/// Takes the file's keys that the environment lacks, for `var` and `child_env`; returns how
/// many. Once per process: a second call is refused.
pub fn load(path: &Path, required: bool) -> Result<usize, EnvFileError> {
    let pairs = read(path, required)?.unwrap_or_default();
    let values: BTreeMap<String, String> =
        pairs.into_iter().filter(|(key, _)| std::env::var_os(key).is_none()).collect();
    let loaded = values.len();
    FROM_FILE
        .set(FileKeys { path: path.to_path_buf(), values })
        .map_err(|_| EnvFileError::Twice { path: path.display().to_string() })?;
    Ok(loaded)
}

/// A variable's value: the process environment's, else the env file's.
pub fn var(key: &str) -> Option<String> {
    std::env::var(key).ok().or_else(|| FROM_FILE.get()?.values.get(key).cloned())
}

/// Whether `key` is set (to anything), in the environment or the file.
pub fn is_set(key: &str) -> bool {
    std::env::var_os(key).is_some() || FROM_FILE.get().is_some_and(|keys| keys.values.contains_key(key))
}

/// The environment for a child process: the file's keys, then `own` (which wins). The child
/// inherits the rest of this process's environment as usual.
pub fn for_child(own: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut env = FROM_FILE.get().map(|keys| keys.values.clone()).unwrap_or_default();
    env.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// Where `key` came from, `None` when it is not set.
pub fn source(key: &str) -> Option<KeySource> {
    if std::env::var_os(key).is_some_and(|v| !v.is_empty()) {
        return Some(KeySource::Environment);
    }
    let keys = FROM_FILE.get()?;
    keys.values.get(key).filter(|v| !v.is_empty()).map(|_| KeySource::File(keys.path.clone()))
}

/// The file to read: the flag's or `LACHESIS_ENV_FILE`'s (then required), else `home/.env`.
pub fn choose(given: Option<PathBuf>, home: &Path) -> (PathBuf, bool) {
    match given {
        Some(path) => (path, true),
        None => (home.join(".env"), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str, mode: u32) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".env");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    #[test]
    fn a_private_file_is_read_with_quotes_and_comments() {
        let (_dir, path) = file("# keys\nexport A_KEY=\"one two\"\nB_KEY=three # note\n", 0o600);
        let pairs = read(&path, true).unwrap().unwrap();
        assert_eq!(pairs, vec![("A_KEY".into(), "one two".into()), ("B_KEY".into(), "three".into())]);
    }

    #[test]
    fn a_file_others_can_read_is_refused_with_the_fix() {
        let (_dir, path) = file("A_KEY=secret-value\n", 0o644);
        let err = read(&path, false).unwrap_err().to_string();
        assert!(err.contains("mode 644") && err.contains(&format!("chmod 600 {}", path.display())), "{err}");
        assert!(!err.contains("secret-value"));
    }

    #[test]
    fn a_missing_default_file_is_fine_but_a_named_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".env");
        assert!(read(&path, false).unwrap().is_none());
        assert!(read(&path, true).is_err());
    }

    /// The file's keys never enter this process's environment (the daemon has threads); lookups
    /// and children see them, and the real environment wins.
    #[test]
    fn the_environment_wins_over_the_file_and_stays_unchanged() {
        // Names only this test uses: tests share the process environment.
        let (_dir, path) = file("LACHESIS_ENVFILE_T1=file\nLACHESIS_ENVFILE_T2=file\n", 0o600);
        // SAFETY: no other test touches these names, and this runs before `load`.
        unsafe { std::env::set_var("LACHESIS_ENVFILE_T1", "real") };
        assert_eq!(load(&path, true).unwrap(), 1);
        assert_eq!(var("LACHESIS_ENVFILE_T1").as_deref(), Some("real"));
        assert_eq!(var("LACHESIS_ENVFILE_T2").as_deref(), Some("file"));
        assert!(std::env::var_os("LACHESIS_ENVFILE_T2").is_none(), "the process environment was changed");
        assert!(is_set("LACHESIS_ENVFILE_T2") && !is_set("LACHESIS_ENVFILE_UNSET"));
        let own = BTreeMap::from([("LACHESIS_ENVFILE_T2".to_string(), "stage".to_string())]);
        assert_eq!(for_child(&BTreeMap::new())["LACHESIS_ENVFILE_T2"], "file");
        assert_eq!(for_child(&own)["LACHESIS_ENVFILE_T2"], "stage", "a stage's own value wins");
        assert!(!for_child(&BTreeMap::new()).contains_key("LACHESIS_ENVFILE_T1"));
        assert_eq!(source("LACHESIS_ENVFILE_T1"), Some(KeySource::Environment));
        assert_eq!(source("LACHESIS_ENVFILE_T2"), Some(KeySource::File(path.clone())));
        assert_eq!(source("LACHESIS_ENVFILE_UNSET"), None);
        assert!(matches!(load(&path, true), Err(EnvFileError::Twice { .. })));
    }
}
