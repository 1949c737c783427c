//! The workflow file's schema: a workflow, its stages, ports, probes and completion rule, as
//! serde reads them, and what a parsed workflow answers about itself.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{CheckpointSpec, Dur, MetricSpec, ProgressSpec, RetryPolicy, SlurmOptions};

/// Template variables every workflow may use, filled in by lachesis.
pub const BUILTIN_VARS: &[&str] = &[
    "run_id",
    "run_dir",
    "config_path",
    "env_file",
    "env_name",
    // The environment's configured values as one JSON object (a verifiers environment's
    // `load_environment` arguments), and the directory that imports a not-installed one (empty
    // for an installed package: Python ignores an empty PYTHONPATH).
    "env_args",
    "env_import_dir",
    "python",
    "workflow_dir",
    "home",
    "tinker_atropos",
];

/// The longest stage, port or workflow name: names become file names and table cells.
pub const MAX_NAME_LEN: usize = 64;

/// Default wait for a stage with a probe and no delay.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(600);

/// How long an attempt runs before it may be preempted, when the workflow does not say.
pub const DEFAULT_MIN_RUNTIME: Duration = Duration::from_secs(600);

/// Preemptions after which a run is no longer preemptible, when the workflow does not say.
pub const DEFAULT_MAX_PREEMPTIONS: u32 = 5;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workflow {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The workflow used when a surface names none.
    #[serde(default)]
    pub default: bool,
    /// Environment variables a run needs (API keys); never stored, only checked for presence.
    #[serde(default)]
    pub credentials: Vec<String>,
    /// Exclusive resources beyond the fixed ports (e.g. `gpu:0`).
    #[serde(default)]
    pub resources: Vec<String>,
    /// Units of the claiming node's counted pools each run takes (`needs: {gpu: 2}`): distinct
    /// units per live run, seen by its stages as `{pool.gpu}`, `LACHESIS_POOL_GPU` and
    /// `CUDA_VISIBLE_DEVICES`.
    #[serde(default, skip_serializing_if = "crate::model::Needs::is_empty")]
    pub needs: crate::model::Needs,
    /// Named ports: a number is fixed and held exclusively; `auto` picks a free one per run.
    #[serde(default)]
    pub ports: BTreeMap<String, PortSpec>,
    /// Variables with defaults, overridable per run with `--var name=value`.
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    pub stages: Vec<StageSpec>,
    #[serde(default)]
    pub completion: Completion,
    /// SIGTERM-to-SIGKILL grace when stopping a stage; the daemon's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_grace: Option<Dur>,
    /// The kind of environment its stages train (`environment: verifiers`), as written; read
    /// through `Workflow::trains`, which parsing has checked. Absent: Atropos when a stage runs
    /// the environment's file (`{env_file}`), any kind otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// Infrastructure settings tools and agents may not change (the locked profile).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub locked: serde_json::Map<String, serde_json::Value>,
    /// Which failures are transient, and how many attempts a run gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Only nodes with all these labels may claim the workflow's runs (e.g. `gpu: h100`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    /// Where stages run: processes on the claiming node, or Slurm jobs.
    #[serde(default, skip_serializing_if = "Launcher::is_local")]
    pub launcher: Launcher,
    /// sbatch settings, with `launcher: slurm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmOptions>,
    /// Where the run's training step comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressSpec>,
    /// A running run whose step has not moved for this long fails as stalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_timeout: Option<Dur>,
    /// An attempt still going this long after its start is stopped and fails (or is retried,
    /// by `retry_on_time_limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<Dur>,
    /// Where the run's trainer says it saved a checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<CheckpointSpec>,
    /// Where the run's training metrics appear, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricSpec>,
    /// The metrics, by name, that the report, `run status` and the run page show of a run (their
    /// last values): `report: [env/all/reward/total]`. Empty: the sweep's metric, else the W&B
    /// keys of `model::headline::DEFAULT_HEADLINE`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub report: Vec<String>,
    /// A daemon started with `--preempt` may stop it for a run of higher priority and queue it
    /// again, to resume from its last checkpoint.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preemptible: bool,
    /// How long an attempt runs before it may be preempted (default 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_runtime: Option<Dur>,
    /// Preemptions after which the run is no longer preemptible (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_preemptions: Option<u32>,
    /// Sent to a victim's stages to ask for a checkpoint now; the stop follows the next
    /// checkpoint recorded, or `preempt_wait`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_signal: Option<PreemptSignal>,
    /// How long a victim asked with `preempt_signal` gets to checkpoint (default 2m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_wait: Option<Dur>,
}

/// The signals a workflow may name as `preempt_signal`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PreemptSignal {
    #[serde(rename = "SIGUSR1")]
    Usr1,
    #[serde(rename = "SIGUSR2")]
    Usr2,
    #[serde(rename = "SIGINT")]
    Int,
    #[serde(rename = "SIGHUP")]
    Hup,
}

impl PreemptSignal {
    pub fn signal(self) -> rustix::process::Signal {
        use rustix::process::Signal;
        match self {
            PreemptSignal::Usr1 => Signal::USR1,
            PreemptSignal::Usr2 => Signal::USR2,
            PreemptSignal::Int => Signal::INT,
            PreemptSignal::Hup => Signal::HUP,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PreemptSignal::Usr1 => "SIGUSR1",
            PreemptSignal::Usr2 => "SIGUSR2",
            PreemptSignal::Int => "SIGINT",
            PreemptSignal::Hup => "SIGHUP",
        }
    }
}

/// How long a victim asked to checkpoint gets, when the workflow does not say.
pub const DEFAULT_PREEMPT_WAIT: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Launcher {
    /// Each stage under a shim on the node that claimed the run.
    #[default]
    Local,
    /// Each stage submitted with sbatch and tracked by its job id.
    Slurm,
}

impl Launcher {
    pub fn is_local(&self) -> bool {
        *self == Launcher::Local
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PortSpec {
    Fixed(u16),
    Auto(AutoPort),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoPort {
    Auto,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    pub name: String,
    /// Program and arguments; no shell is involved.
    pub argv: Vec<String>,
    /// Appended to `argv` on an attempt that resumes from a checkpoint (`{resume.step}` and
    /// `{resume.path}` are valid here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resume_args: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Variables added to the stage's process environment (`env:` in YAML).
    #[serde(default, rename = "env", skip_serializing_if = "BTreeMap::is_empty")]
    pub environ: BTreeMap<String, String>,
    /// Log file, relative to the run directory; `{name}.log` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// The stage counts as up after this long, unless its probe answers first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_delay: Option<Dur>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<Probe>,
    /// How long a probe may take to answer when there is no delay to fall back on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timeout: Option<Dur>,
    /// The log rotates past this size (`1GiB`, `100MiB`, bytes); the daemon's default if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_max_size: Option<crate::logs::ByteSize>,
    /// Files the log keeps, the live one included (1 to 100); the daemon's default if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_max_files: Option<u32>,
}

/// Written `{http: URL}` or `{tcp: HOST:PORT}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum Probe {
    /// GET this URL; any 2xx answer means up.
    Http { http: String },
    /// Connect to this `host:port`.
    Tcp { tcp: String },
}

/// Which stage exits decide the run. When one of `stages` exits, the run completes (exit 0) or
/// fails (anything else); any other stage exiting while the run is up fails it. Empty means the
/// last stage.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Completion {
    #[serde(default)]
    pub stages: Vec<String>,
    /// A deciding stage exiting 0 completes the run only once the step has reached the total.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_total: bool,
}

/// A workflow file that can't be used, with where and why.
impl Workflow {
    /// How long an attempt runs before it may be preempted.
    pub fn min_runtime(&self) -> Duration {
        self.min_runtime.map_or(DEFAULT_MIN_RUNTIME, |d| d.0)
    }

    /// How long a victim asked with `preempt_signal` gets to checkpoint.
    pub fn preempt_wait(&self) -> Duration {
        self.preempt_wait.map_or(DEFAULT_PREEMPT_WAIT, |d| d.0)
    }

    /// Preemptions after which a run of it is no longer preemptible.
    pub fn max_preemptions(&self) -> u32 {
        self.max_preemptions.unwrap_or(DEFAULT_MAX_PREEMPTIONS)
    }

    /// Every placeholder a template of this workflow may use.
    pub fn known_vars(&self) -> Vec<String> {
        let mut known: Vec<String> = BUILTIN_VARS.iter().map(|s| s.to_string()).collect();
        known.extend(self.vars.keys().cloned());
        known.extend(self.ports.keys().map(|p| format!("port.{p}")));
        known.extend(self.needs.names().map(|n| format!("{}{n}", crate::model::pool::VAR_PREFIX)));
        known
    }

    /// The stages whose exit decides the run.
    pub fn deciding_stages(&self) -> Vec<&str> {
        if self.completion.stages.is_empty() {
            self.stages.last().map(|s| vec![s.name.as_str()]).unwrap_or_default()
        } else {
            self.completion.stages.iter().map(String::as_str).collect()
        }
    }

    /// The exclusive resources a run holds, given its resolved ports.
    pub fn resources(&self, ports: &BTreeMap<String, u16>) -> BTreeSet<String> {
        let mut held: BTreeSet<String> = self.resources.iter().cloned().collect();
        held.extend(ports.values().map(|p| format!("port:{p}")));
        held
    }
}
