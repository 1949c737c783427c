//! This node's counted pools (the rule and the pure assignment are `model::pool`): resolved
//! from the daemon's `--pool` values at start (`gpu=auto` asks `nvidia-smi -L`), and published in the home (`pools.json`, 0600) so that a submission made
//! without the daemon (`run start --count`, `--from`, `--wait`, or with the daemon down) checks
//! its needs against the same pools. The daemon writes the file each time it starts; a home
//! whose daemon never started with `--pool` has none, and then has no pools.

use std::path::{Path, PathBuf};

use crate::model::pool::{PoolError, PoolSpec, Pools, gpus_listed};

/// The pools file in `home`.
pub fn file(home: &Path) -> PathBuf {
    home.join("pools.json")
}

#[derive(Debug, thiserror::Error)]
pub enum NodePoolsError {
    #[error("--pool: {0}")]
    Bad(#[from] PoolError),
    #[error("--pool gpu=auto: cannot run `nvidia-smi -L`: {0} (list the GPUs instead: --pool gpu=0,1)")]
    NoNvidiaSmi(std::io::Error),
    #[error("--pool gpu=auto: `nvidia-smi -L` failed ({status}): {stderr}")]
    NvidiaSmiFailed { status: String, stderr: String },
    #[error("--pool gpu=auto: `nvidia-smi -L` lists no GPU")]
    NoGpu,
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("{path}: {problem} (the daemon writes it when it starts; start it again)")]
    Read { path: String, problem: String },
}

/// The pools `specs` describe, asking `nvidia-smi -L` (from PATH) for `gpu=auto`.
pub fn resolve(specs: &[PoolSpec]) -> Result<Pools, NodePoolsError> {
    let gpus = if Pools::wants_gpus(specs) { Some(list_gpus()?) } else { None };
    Ok(Pools::from_specs(specs, gpus.as_deref())?)
}

/// The GPU indexes `nvidia-smi -L` lists.
fn list_gpus() -> Result<Vec<String>, NodePoolsError> {
    let out = std::process::Command::new("nvidia-smi")
        .arg("-L")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(NodePoolsError::NoNvidiaSmi)?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(NodePoolsError::NvidiaSmiFailed {
            status: out.status.to_string(),
            stderr: crate::text::one_line(stderr.trim()),
        });
    }
    let gpus = gpus_listed(&String::from_utf8_lossy(&out.stdout));
    if gpus.is_empty() {
        return Err(NodePoolsError::NoGpu);
    }
    Ok(gpus)
}

/// Publishes `pools` in `home` (written aside, then renamed: a reader sees the old file or the
/// new one).
pub fn publish(home: &Path, pools: &Pools) -> Result<(), NodePoolsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = file(home);
    let err = |source| NodePoolsError::Write { path: path.display().to_string(), source };
    let aside = home.join(".pools.json.tmp");
    let text = serde_json::to_vec(pools).map_err(|e| err(std::io::Error::other(e)))?;
    // A restart with the same pools writes nothing: a daemon that comes back on a full disk
    // has nothing to write here.
    if std::fs::read(&path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    let _ = std::fs::remove_file(&aside);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&aside)
        .and_then(|mut out| out.write_all(&text).and_then(|()| out.sync_all()))
        .and_then(|()| std::fs::rename(&aside, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&aside);
    }
    written.map_err(err)
}

/// The pools the home's daemon published; none when it never did.
pub fn published(home: &Path) -> Result<Pools, NodePoolsError> {
    let path = file(home);
    let shown = || path.display().to_string();
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Pools::default()),
        Err(err) => return Err(NodePoolsError::Read { path: shown(), problem: err.to_string() }),
    };
    // The daemon writes a few hundred bytes; anything far bigger is not its file.
    if bytes.len() > 1 << 20 {
        return Err(NodePoolsError::Read { path: shown(), problem: "larger than 1 MiB".into() });
    }
    let pools: Pools = serde_json::from_slice(&bytes)
        .map_err(|e| NodePoolsError::Read { path: shown(), problem: e.to_string() })?;
    pools.checked().map_err(|e| NodePoolsError::Read { path: shown(), problem: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_pools_read_back_and_a_home_without_them_has_none() {
        let home = tempfile::tempdir().unwrap();
        assert!(published(home.path()).unwrap().is_empty());
        let specs: Vec<PoolSpec> = ["gpu=0,1,2,3", "nvme=a"].iter().map(|t| t.parse().unwrap()).collect();
        let pools = resolve(&specs).unwrap();
        publish(home.path(), &pools).unwrap();
        assert_eq!(published(home.path()).unwrap(), pools);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(file(home.path())).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(file(home.path()), b"{\"GPU\": [\"0\"]}").unwrap();
        let err = published(home.path()).unwrap_err().to_string();
        assert!(err.contains("pools.json") && !err.contains('\n'), "{err}");
    }
}
