//! `env list --check`: what listing never does, on request. Each verifiers environment's module
//! is imported in the Python of `LACHESIS_PYTHON` (as `verifiers.load_environment` would import
//! it, with a not-installed one's directory on `PYTHONPATH`), bounded by a deadline after which
//! the import and whatever it started are killed.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::super::DiscoveredEnv;
use crate::launch::collect::{CollectError, collect};

const IMPORT: &str = concat!(
    "import importlib, sys\n",
    "module = importlib.import_module(sys.argv[1])\n",
    "if not callable(getattr(module, 'load_environment', None)):\n",
    "    sys.exit('the module has no load_environment once imported')\n",
);

/// Imports `env`'s module; `Err` says in one line why it does not import.
///
/// # Errors
///
/// The import raised (the last line of its traceback), the module has no `load_environment`
/// once imported, the interpreter could not be run, or the import outlived `timeout`.
pub async fn import_check(python: &str, env: &DiscoveredEnv, timeout: Duration) -> Result<(), String> {
    let module = env.name.replace('-', "_");
    let mut command = Command::new(python);
    command
        .args(["-B", "-c", IMPORT, &module])
        .current_dir("/")
        .env("PYTHONPATH", env.source.import_dir().map(|d| d.as_os_str().to_owned()).unwrap_or_default())
        // An import must not reach for the network (hub downloads retry for a minute offline).
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .env("WANDB_MODE", "disabled")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Its own process group: a deadline also stops what the import started.
    command.process_group(0);
    let child = command.spawn().map_err(|err| format!("cannot run {python}: {err}"))?;
    match collect(child, timeout).await {
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => {
            let said = String::from_utf8_lossy(&output.stderr);
            let last = said.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
            Err(format!("import failed ({}): {}", output.status, crate::text::one_line(last.trim())))
        }
        Err(CollectError::Timeout) => {
            Err(format!("the import did not finish within {}s; killed", timeout.as_secs_f64()))
        }
        Err(CollectError::Wait(err)) => Err(format!("cannot wait for {python}: {err}")),
    }
}
