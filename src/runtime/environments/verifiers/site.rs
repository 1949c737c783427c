//! What the Python of `LACHESIS_PYTHON` imports from: its `sys.path` and its standard-library
//! module names, asked of the interpreter once (it runs no environment's code) and kept for as
//! long as the interpreter file is unchanged, so a daemon's listings don't start Python each time.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::Deserialize;

/// Python starts in tens of milliseconds; one that takes longer than this is broken.
const ASK_TIMEOUT: Duration = Duration::from_secs(20);

/// The answer is small; more than this is not an answer.
const MAX_ANSWER_BYTES: usize = 4 << 20;

const ASK: &str = "import json, sys\n\
names = set(getattr(sys, 'stdlib_module_names', ())) | set(sys.builtin_module_names)\n\
print(json.dumps({'path': [p for p in sys.path if p], 'stdlib': sorted(names)}))\n";

/// Where an interpreter imports from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct PythonSite {
    /// `sys.path` in order, without the working directory: the first that holds a module is
    /// the one imported.
    pub path: Vec<PathBuf>,
    /// Modules a distribution cannot shadow (`json`, `random`, `sys`, …).
    pub stdlib: Vec<String>,
}

impl PythonSite {
    pub(super) fn is_stdlib(&self, module: &str) -> bool {
        self.stdlib.binary_search_by(|name| name.as_str().cmp(module)).is_ok()
    }
}

type CacheKey = (String, Option<SystemTime>);

static CACHE: Mutex<Option<(CacheKey, PythonSite)>> = Mutex::new(None);

/// Asks `python` (a path, or a name on `PATH`) where it imports from. `Err` is one line for
/// the listing's warnings: the interpreter is missing, hung or said something unreadable.
pub async fn python_site(python: &str) -> Result<PythonSite, String> {
    let key = (python.to_owned(), modified(python));
    if let Some((cached_key, site)) = CACHE.lock().ok().and_then(|c| c.clone())
        && cached_key == key
        && key.1.is_some()
    {
        return Ok(site);
    }
    let site = ask(python).await?;
    if let Ok(mut cache) = CACHE.lock() {
        *cache = Some((key, site.clone()));
    }
    Ok(site)
}

/// When the interpreter file (a path, or the first of a bare name on `PATH`) last changed:
/// an upgrade or a new venv at the same path asks again.
fn modified(python: &str) -> Option<SystemTime> {
    let candidates: Vec<PathBuf> = if python.contains('/') {
        vec![PathBuf::from(python)]
    } else {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).map(|dir| dir.join(python)).collect())
            .unwrap_or_default()
    };
    candidates.iter().find_map(|path| std::fs::metadata(path).ok().filter(|m| m.is_file())?.modified().ok())
}

async fn ask(python: &str) -> Result<PythonSite, String> {
    let mut command = tokio::process::Command::new(python);
    command
        .args(["-c", ASK])
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().map_err(|err| format!("cannot run {python}: {err}"))?;
    let output = match tokio::time::timeout(ASK_TIMEOUT, child.wait_with_output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(err)) => return Err(format!("cannot run {python}: {err}")),
        Err(_) => return Err(format!("{python} did not answer within {}s; killed", ASK_TIMEOUT.as_secs())),
    };
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        let last = said.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
        return Err(format!("{python} failed ({}): {}", output.status, crate::text::one_line(last)));
    }
    if output.stdout.len() > MAX_ANSWER_BYTES {
        return Err(format!("{python} answered with more than {MAX_ANSWER_BYTES} bytes"));
    }
    let mut site: PythonSite = serde_json::from_slice(&output.stdout)
        .map_err(|err| format!("{python} gave an unreadable answer: {err}"))?;
    site.stdlib.sort();
    Ok(site)
}
