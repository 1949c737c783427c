//! Workflows: the YAML that says which processes a run starts, in which order, how to tell they
//! are up, what they hold exclusively and when the run is over.

mod catalog;
pub mod checkpoints;
mod duration;
mod names;
pub mod pipeline;
pub mod progress;
pub mod request;
pub mod retry;
mod slurm;
pub mod template;
pub mod wandb;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use catalog::{Catalog, CatalogError};
pub use checkpoints::CheckpointSpec;
pub use duration::{Dur, MAX_DURATION};
pub use names::{NAME_RULE, check_log_path, is_simple_name};
pub use progress::ProgressSpec;
pub use request::RunRequest;
pub use retry::RetryPolicy;
pub use slurm::SlurmOptions;
use template::TemplateError;

use crate::text::one_line;

/// Template variables every workflow may use, filled in by lachesis.
pub const BUILTIN_VARS: &[&str] = &[
    "run_id",
    "run_dir",
    "config_path",
    "env_file",
    "env_name",
    "python",
    "workflow_dir",
    "home",
    "tinker_atropos",
];

/// The longest stage, port or workflow name: names become file names and table cells.
pub const MAX_NAME_LEN: usize = 64;

/// Default wait for a stage with a probe and no delay.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(600);

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
}

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
#[derive(Debug, thiserror::Error)]
#[error("{}: {field}: {problem}", file.display())]
pub struct InvalidWorkflow {
    pub file: PathBuf,
    /// Where in the file, e.g. `stages[1].argv` or `line 4`.
    pub field: String,
    pub problem: String,
}

impl Workflow {
    /// Parses and validates one workflow file's text.
    pub fn parse(file: &Path, text: &str) -> Result<Workflow, InvalidWorkflow> {
        let workflow: Workflow = crate::yaml::from_str(text).map_err(|err| InvalidWorkflow {
            file: file.to_path_buf(),
            field: err.path.clone().unwrap_or_else(|| {
                err.line.map_or_else(|| "yaml".to_string(), |line| format!("line {line}"))
            }),
            problem: one_line(&err.message),
        })?;
        // Names and values from the file end up in the message: keep it on one line.
        workflow.validate().map_err(|(field, problem)| InvalidWorkflow {
            file: file.to_path_buf(),
            field: one_line(&field),
            problem: one_line(&problem),
        })?;
        Ok(workflow)
    }

    /// Every placeholder a template of this workflow may use.
    pub fn known_vars(&self) -> Vec<String> {
        let mut known: Vec<String> = BUILTIN_VARS.iter().map(|s| s.to_string()).collect();
        known.extend(self.vars.keys().cloned());
        known.extend(self.ports.keys().map(|p| format!("port.{p}")));
        known.extend(self.needs.names().map(|n| format!("{}{n}", crate::model::pool::VAR_PREFIX)));
        known
    }

    /// Checks everything that can be checked before a run exists; errors are (field, problem).
    fn validate(&self) -> Result<(), (String, String)> {
        let bad = |field: &str, problem: String| Err((field.to_string(), problem));
        if !is_simple_name(&self.name) {
            return bad("name", format!("'{}' {NAME_RULE}", one_line(&self.name)));
        }
        if self.stages.is_empty() {
            return bad("stages", "a workflow needs at least one stage".into());
        }
        for cred in &self.credentials {
            if cred.is_empty() || !cred.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return bad("credentials", format!("'{cred}' is not an environment variable name"));
            }
        }
        for (name, port) in &self.ports {
            if !is_simple_name(name) {
                return bad(
                    &format!("ports.{name}"),
                    "port names must be letters, digits, '-' or '_'".into(),
                );
            }
            if *port == PortSpec::Fixed(0) {
                return bad(
                    &format!("ports.{name}"),
                    "port 0 is not a port (use `auto` to pick a free one)".into(),
                );
            }
        }
        if let Err(err) = self.needs.clone().checked() {
            return bad("needs", err.to_string());
        }
        if !self.needs.is_empty() && self.launcher == Launcher::Slurm {
            return bad("needs", "counted pools are the claiming node's devices; a Slurm job asks sbatch for its own (slurm options)".into());
        }
        for (name, value) in &self.vars {
            if name.starts_with("port.") || name.starts_with(crate::model::pool::VAR_PREFIX) {
                return bad(
                    &format!("vars.{name}"),
                    "names starting with 'port.' or 'pool.' are set by lachesis".into(),
                );
            }
            if BUILTIN_VARS.contains(&name.as_str()) {
                return bad(
                    &format!("vars.{name}"),
                    "this name is set by lachesis and can't be redefined".into(),
                );
            }
            // Vars are filled in when the run is queued, before its ports are picked: only the
            // built-in variables are known then.
            let builtins: Vec<String> = BUILTIN_VARS.iter().map(|s| s.to_string()).collect();
            if let Err(err) = template::check(value, &builtins) {
                return bad(&format!("vars.{name}"), format!("{err}; vars may use only built-in variables"));
            }
        }
        let known = self.known_vars();
        let mut names = BTreeSet::new();
        for (i, stage) in self.stages.iter().enumerate() {
            let at = |field: &str| format!("stages[{i}]{field}");
            if !is_simple_name(&stage.name) {
                return bad(&at(".name"), format!("'{}' {NAME_RULE}", one_line(&stage.name)));
            }
            if !names.insert(stage.name.as_str()) {
                return bad(&at(".name"), format!("another stage is already called '{}'", stage.name));
            }
            if stage.argv.first().is_none_or(|program| program.trim().is_empty()) {
                return bad(&at(".argv"), "must name a program to run".into());
            }
            for (j, arg) in stage.argv.iter().enumerate() {
                template::check(arg, &known).or_else(|e| bad(&at(&format!(".argv[{j}]")), e.to_string()))?;
            }
            let resuming = checkpoints::with_resume_vars(&known);
            for (j, arg) in stage.resume_args.iter().enumerate() {
                template::check(arg, &resuming)
                    .or_else(|e| bad(&at(&format!(".resume_args[{j}]")), e.to_string()))?;
            }
            for (field, text) in [("cwd", &stage.cwd), ("log", &stage.log)] {
                if let Some(text) = text {
                    template::check(text, &known)
                        .or_else(|e| bad(&at(&format!(".{field}")), e.to_string()))?;
                }
            }
            // A templated log is checked again once filled in (`plan`).
            if let Some(log) = &stage.log
                && template::variables(log).is_ok_and(|vars| vars.is_empty())
            {
                check_log_path(log).or_else(|problem| bad(&at(".log"), problem))?;
            }
            if let Some(count) = stage.log_max_files {
                crate::logs::limits::check_max_files(count)
                    .map(|_| ())
                    .or_else(|problem| bad(&at(".log_max_files"), problem))?;
            }
            for (key, value) in &stage.environ {
                if key.is_empty() || key.contains(['=', '\0']) {
                    return bad(
                        &at(".env"),
                        format!("'{}' is not an environment variable name", one_line(key)),
                    );
                }
                template::check(value, &known)
                    .or_else(|e| bad(&at(&format!(".env.{key}")), e.to_string()))?;
            }
            match &stage.probe {
                Some(Probe::Http { http: url }) => {
                    template::check(url, &known).or_else(|e| bad(&at(".probe.http"), e.to_string()))?;
                    if !url.starts_with("http://") {
                        return bad(&at(".probe.http"), format!("'{url}' must be an http:// URL"));
                    }
                }
                Some(Probe::Tcp { tcp: addr }) => {
                    template::check(addr, &known).or_else(|e| bad(&at(".probe.tcp"), e.to_string()))?;
                    if !addr.contains(':') {
                        return bad(&at(".probe.tcp"), format!("'{addr}' must be host:port"));
                    }
                }
                None => {}
            }
            if stage.start_timeout.is_some_and(|t| t.0.is_zero()) {
                return bad(&at(".start_timeout"), "must be longer than 0s".into());
            }
            if let (Some(delay), Some(timeout)) = (stage.start_delay, stage.start_timeout)
                && delay > timeout
            {
                return bad(
                    &at(".start_timeout"),
                    format!("{timeout} is shorter than the start delay {delay}"),
                );
            }
        }
        for name in &self.completion.stages {
            if !names.contains(name.as_str()) {
                return bad("completion.stages", format!("no stage is called '{name}'"));
            }
        }
        if let Some(retry) = &self.retry {
            retry.validate()?;
        }
        if let Some(progress) = &self.progress {
            let stages: Vec<&str> = self.stages.iter().map(|s| s.name.as_str()).collect();
            progress.validate(&stages, &known)?;
        }
        if let Some(checkpoints) = &self.checkpoints {
            let stages: Vec<&str> = self.stages.iter().map(|s| s.name.as_str()).collect();
            checkpoints.validate(&stages, &known)?;
        }
        if self.completion.require_total && self.progress.is_none() {
            return bad("completion.require_total", "needs a `progress:` block to know the step".into());
        }
        if self.stall_timeout.is_some_and(|d| d.0.is_zero()) {
            return bad("stall_timeout", "must be longer than 0s".into());
        }
        if self.time_limit.is_some_and(|d| d.0.is_zero()) {
            return bad("time_limit", "must be longer than 0s".into());
        }
        if let Some(slurm) = &self.slurm {
            if self.launcher != Launcher::Slurm {
                return bad("slurm", "Slurm settings need `launcher: slurm`".into());
            }
            if let Some(stage) = slurm.stage_options.keys().find(|s| !names.contains(s.as_str())) {
                return bad(&format!("slurm.stage_options.{stage}"), format!("no stage is called '{stage}'"));
            }
        }
        for (key, value) in &self.node_labels {
            if !is_simple_name(key) || !is_simple_name(value) {
                return bad(
                    &format!("node_labels.{key}"),
                    "labels are name: value, each letters, digits, '-', '_' or '.'".into(),
                );
            }
        }
        Ok(())
    }

    /// The stages whose exit decides the run.
    pub fn deciding_stages(&self) -> Vec<&str> {
        if self.completion.stages.is_empty() {
            self.stages.last().map(|s| vec![s.name.as_str()]).unwrap_or_default()
        } else {
            self.completion.stages.iter().map(String::as_str).collect()
        }
    }

    /// Whether any template of this workflow refers to `var`.
    pub fn uses_var(&self, var: &str) -> bool {
        let mentions = |text: &str| template::variables(text).is_ok_and(|vars| vars.contains(&var));
        self.stages.iter().any(|stage| {
            stage.argv.iter().any(|a| mentions(a))
                || stage.cwd.as_deref().is_some_and(mentions)
                || stage.environ.values().any(|v| mentions(v))
        }) || self.vars.values().any(|v| mentions(v))
    }

    /// The exclusive resources a run holds, given its resolved ports.
    pub fn resources(&self, ports: &BTreeMap<String, u16>) -> BTreeSet<String> {
        let mut held: BTreeSet<String> = self.resources.iter().cloned().collect();
        held.extend(ports.values().map(|p| format!("port:{p}")));
        held
    }
}

/// A stage with every placeholder filled in: what the launcher needs.
#[derive(Clone, Debug, PartialEq)]
pub struct StagePlan {
    pub name: String,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// Added to the process environment it inherits.
    pub environ: BTreeMap<String, String>,
    pub log_path: PathBuf,
    pub start_delay: Option<Duration>,
    pub probe: Option<Probe>,
    pub start_timeout: Duration,
    pub log_limits: crate::logs::LogLimits,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("stage '{stage}': {source}")]
    Template {
        stage: String,
        #[source]
        source: TemplateError,
    },
    #[error("stage '{stage}': log: {problem}")]
    Log { stage: String, problem: String },
    #[error("stage '{stage}': cannot resume: {problem}")]
    Resume { stage: String, problem: String },
}

impl StagePlan {
    /// Whether the stage counts as up as soon as it started: no delay and no probe, or a zero
    /// delay. Decided by the caller at once, since a readiness task would race the stage's
    /// own exit (a quick `true` would "exit during start-up").
    pub fn up_at_once(&self) -> bool {
        match self.start_delay {
            Some(delay) => delay.is_zero(),
            None => self.probe.is_none(),
        }
    }

    pub fn up_at_once_how(&self) -> &'static str {
        if self.start_delay.is_some() { "start delay of 0s" } else { "no start delay or probe" }
    }
}

impl StageSpec {
    /// The stage's log file as written in the workflow, relative to the run directory.
    pub fn log_file(&self) -> String {
        self.log.clone().unwrap_or_else(|| format!("{}.log", self.name))
    }

    /// Fills the placeholders with `vars` (which must already hold every variable's value).
    pub fn plan(&self, vars: &BTreeMap<String, String>, run_dir: &Path) -> Result<StagePlan, PlanError> {
        let fill = |text: &str| {
            template::expand(text, vars)
                .map_err(|source| PlanError::Template { stage: self.name.clone(), source })
        };
        let mut argv = self.argv.iter().map(|a| fill(a)).collect::<Result<Vec<_>, _>>()?;
        let resume = checkpoints::resume_of(vars)
            .map_err(|problem| PlanError::Resume { stage: self.name.clone(), problem })?;
        if resume.is_some() {
            for arg in &self.resume_args {
                argv.push(fill(arg)?);
            }
        }
        let cwd = match &self.cwd {
            Some(cwd) => expand_home(&fill(cwd)?),
            None => run_dir.to_path_buf(),
        };
        let mut env: BTreeMap<String, String> =
            self.environ.iter().map(|(k, v)| Ok((k.clone(), fill(v)?))).collect::<Result<_, PlanError>>()?;
        if let Some(run_id) = vars.get("run_id") {
            wandb::add_identity(&mut env, run_id, &self.name);
        }
        // The units the claim assigned win over the workflow's own value: two runs must never
        // see one device.
        env.extend(crate::model::pool::environ(vars));
        // The values of the runs it waited for, once its claim read them (`after.NAME.KIND`).
        for (key, value) in vars {
            let Some((name, kind)) = key.strip_prefix("after.").and_then(|rest| rest.split_once('.')) else {
                continue;
            };
            env.entry(crate::model::dependency::after_env(name, kind)).or_insert_with(|| value.clone());
        }
        if let Some(point) = resume {
            env.insert("LACHESIS_RESUME_STEP".into(), point.step.to_string());
            env.insert("LACHESIS_RESUME_PATH".into(), point.path);
        }
        let log = fill(&self.log_file())?;
        check_log_path(&log).map_err(|problem| PlanError::Log { stage: self.name.clone(), problem })?;
        let probe = match &self.probe {
            Some(Probe::Http { http }) => Some(Probe::Http { http: fill(http)? }),
            Some(Probe::Tcp { tcp }) => Some(Probe::Tcp { tcp: fill(tcp)? }),
            None => None,
        };
        Ok(StagePlan {
            name: self.name.clone(),
            argv,
            cwd,
            environ: env,
            log_path: run_dir.join(log),
            start_delay: self.start_delay.map(|d| d.0),
            probe,
            start_timeout: self.start_timeout.map_or(DEFAULT_START_TIMEOUT, |d| d.0),
            log_limits: crate::logs::LogLimits {
                max_size: self.log_max_size.map(|s| s.0),
                max_files: self.log_max_files,
            },
        })
    }
}

/// `~/x` → `$HOME/x`; workflow paths are written for people.
pub fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Workflow, InvalidWorkflow> {
        Workflow::parse(Path::new("workflows/t.yaml"), text)
    }

    const MINIMAL: &str = "name: t\nstages:\n  - name: main\n    argv: [\"true\"]\n";

    #[test]
    fn parses_a_minimal_workflow_with_defaults() {
        let wf = parse(MINIMAL).unwrap();
        assert_eq!(wf.deciding_stages(), vec!["main"]);
        assert!(wf.resources(&BTreeMap::new()).is_empty());
    }

    #[test]
    fn durations_accept_units_and_numbers() {
        assert_eq!("500ms".parse::<Dur>().unwrap().0, Duration::from_millis(500));
        assert_eq!("2m".parse::<Dur>().unwrap().0, Duration::from_secs(120));
        assert_eq!("1.5s".parse::<Dur>().unwrap().0, Duration::from_millis(1500));
        assert_eq!("1h 30m".parse::<Dur>().unwrap().0, Duration::from_secs(5400));
        assert_eq!("0".parse::<Dur>().unwrap().0, Duration::ZERO);
        assert!("5 parsecs".parse::<Dur>().is_err());
        assert!("-1s".parse::<Dur>().is_err());
        let wf = parse("name: t\nstages:\n  - {name: a, argv: [x], start_delay: 5}\n").unwrap();
        assert_eq!(wf.stages[0].start_delay, Some(Dur(Duration::from_secs(5))));
    }

    #[test]
    fn durations_past_the_maximum_are_errors_not_panics() {
        for text in
            ["99999999999999999999999h", "1e300", "31 days", "1e19", "18446744073709551616s", "inf", "NaN"]
        {
            let err = text.parse::<Dur>().unwrap_err();
            assert!(!err.contains('\n'), "{err}");
        }
        assert_eq!("30 days".parse::<Dur>().unwrap().0, MAX_DURATION);
        for (field, value) in [
            ("stop_grace", "1e300"),
            ("stop_grace", "-3"),
            ("stop_grace", ".nan"),
            ("stop_grace", "\"99999999999999999999999h\""),
        ] {
            let text = format!("name: t\n{field}: {value}\nstages:\n  - {{name: a, argv: [x]}}\n");
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains("not a duration") || err.contains("maximum"), "{value}: {err}");
        }
        for stage_field in
            ["start_delay: 1e19", "start_timeout: 1e300", "start_delay: \"99999999999999999999999h\""]
        {
            let text = format!("name: t\nstages:\n  - {{name: a, argv: [x], {stage_field}}}\n");
            assert!(parse(&text).is_err(), "{stage_field}");
        }
        let text = "name: t\nretry: {max_attempts: 2, backoff: 1e300}\nstages:\n  - {name: a, argv: [x]}\n";
        assert!(parse(text).is_err());
    }

    #[test]
    fn logs_stay_in_the_run_directory_and_names_are_plain() {
        for (log, want) in [
            ("/home/u/.lachesis/lachesis.db", "must be relative"),
            ("../../lachesis.db", "no '..'"),
            ("a/../../x", "no '..'"),
            (".status/api.exit.json", "lachesis keeps"),
            ("./.status/x", "lachesis keeps"),
            ("config.yaml", "lachesis keeps"),
            ("", "must name a file"),
            ("logs/", "must name a file"),
            ("a\nb", "control character"),
        ] {
            let text =
                format!("name: t\nstages:\n  - {{name: a, argv: [x], log: {}}}\n", serde_json::json!(log));
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains("stages[0].log: ") && err.contains(want), "{log:?}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
        assert!(parse("name: t\nstages:\n  - {name: a, argv: [x], log: logs/a.log}\n").is_ok());
        // Templated logs are checked once filled in.
        let wf = parse("name: t\nstages:\n  - {name: a, argv: [x], log: \"{home}/lachesis.db\"}\n").unwrap();
        let vars = BTreeMap::from([("home".to_string(), "/home/u/.lachesis".to_string())]);
        let err = wf.stages[0].plan(&vars, Path::new("/runs/r1")).unwrap_err().to_string();
        assert!(err.contains("stage 'a': log: ") && err.contains("must be relative"), "{err}");
        for name in ["..", ".", "a/b", "", "a\u{7}b", &"x".repeat(65)] {
            let text = format!("name: t\nstages:\n  - {{name: {}, argv: [x]}}\n", serde_json::json!(name));
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains("stages[0].name: ") && !err.contains('\n'), "{name:?}: {err}");
        }
    }

    #[test]
    fn vars_may_use_builtins_only_and_stages_may_use_tinker_atropos() {
        let err = parse("name: t\nports: {api: 1}\nvars: {url: \"http://x:{port.api}\"}\nstages:\n  - {name: a, argv: [x]}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("vars.url: unknown variable '{port.api}'"), "{err}");
        assert!(parse("name: t\nstages:\n  - {name: a, argv: [x], cwd: \"{tinker_atropos}\"}\n").is_ok());
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let cases = [
            ("name: t\nstages: []\n", "workflows/t.yaml: stages: a workflow needs at least one stage"),
            (
                "name: t\nstages:\n  - {name: a, argv: []}\n",
                "workflows/t.yaml: stages[0].argv: must name a program to run",
            ),
            (
                "name: t\nstages:\n  - {name: a, argv: [x, \"{nope}\"]}\n",
                "workflows/t.yaml: stages[0].argv[1]: unknown variable '{nope}'",
            ),
            (
                "name: t\nstages:\n  - {name: a, argv: [x]}\n  - {name: a, argv: [y]}\n",
                "stages[1].name: another stage is already called 'a'",
            ),
            (
                "name: t\nstages:\n  - {name: a, argv: [x]}\ncompletion: {stages: [b]}\n",
                "completion.stages: no stage is called 'b'",
            ),
            (
                "name: t\nstages:\n  - {name: a, argv: [x], probe: {http: \"localhost:1\"}}\n",
                "stages[0].probe.http: 'localhost:1' must be an http:// URL",
            ),
            (
                "name: t\nports: {api: 0}\nstages:\n  - {name: a, argv: [x]}\n",
                "ports.api: port 0 is not a port",
            ),
            (
                "name: t\nstages:\n  - {name: a, argv: [x], start_delay: 10s, start_timeout: 1s}\n",
                "stages[0].start_timeout: 1s is shorter",
            ),
            (
                "name: t\nstages:\n  - {name: a, argv: [x]}\ncompletion: {require_total: true}\n",
                "completion.require_total: needs a `progress:` block",
            ),
            (
                "name: t\nstages:\n  - {name: a, argv: [x]}\nstall_timeout: 0s\n",
                "stall_timeout: must be longer",
            ),
            (
                "name: t\nstages:\n  - {name: a, argv: [x]}\nprogress: {log: {stage: b, pattern: '(?P<step>1)'}, total: 3}\n",
                "progress.log.stage: no stage is called 'b'",
            ),
        ];
        for (text, want) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} does not contain {want:?}");
        }
    }

    #[test]
    fn malformed_yaml_reports_a_line() {
        let err = parse("name: t\nstages:\n  - name: a\n   argv: [x\n").unwrap_err();
        assert_eq!(err.to_string(), "workflows/t.yaml: stages[0]: missing field `argv` at line 3 column 5");
        let err = parse("name: t\nstages: [\n").unwrap_err();
        assert!(err.to_string().contains("at line 3"), "{err}");
        let err = parse(": : :\n").unwrap_err();
        assert!(err.field.starts_with("line ") || err.field == "yaml", "{err}");
        let err = parse("name: t\nstop_grace: 1e300\nstages:\n  - {name: a, argv: [x]}\n").unwrap_err();
        assert_eq!(err.field, "stop_grace", "{err}");
        let err = parse("name: t\nstages:\n  - {name: a, arg: [x]}\n").unwrap_err();
        assert!(err.problem.contains("unknown field `arg`"), "{err}");
    }

    #[test]
    fn plans_expand_every_field_and_ports_become_resources() {
        let wf = parse(
            "name: t\nports: {api: 8000, other: auto}\nvars: {root: /srv}\nstages:\n  - name: api\n    argv: [run-api, --port, \"{port.api}\"]\n    cwd: \"{root}\"\n    env: {RUN: \"{run_id}\"}\n    probe: {http: \"http://127.0.0.1:{port.api}/\"}\n",
        )
        .unwrap();
        let vars: BTreeMap<String, String> = [("root", "/srv"), ("run_id", "r1"), ("port.api", "8000")]
            .into_iter()
            .map(|(a, b)| (a.into(), b.into()))
            .collect();
        let plan = wf.stages[0].plan(&vars, Path::new("/runs/r1")).unwrap();
        assert_eq!(plan.argv, ["run-api", "--port", "8000"]);
        assert_eq!(plan.cwd, PathBuf::from("/srv"));
        assert_eq!(plan.environ["RUN"], "r1");
        assert_eq!(plan.log_path, PathBuf::from("/runs/r1/api.log"));
        assert_eq!(plan.probe, Some(Probe::Http { http: "http://127.0.0.1:8000/".into() }));
        let ports = BTreeMap::from([("api".to_string(), 8000u16), ("other".to_string(), 40123u16)]);
        assert_eq!(wf.resources(&ports), BTreeSet::from(["port:8000".to_string(), "port:40123".to_string()]));
    }

    #[test]
    fn needs_name_pool_variables_and_the_assigned_units_win_the_environment() {
        let wf = parse(
            "name: t\nneeds: {gpu: 2}\nstages:\n  - {name: a, argv: [x, \"{pool.gpu}\"], env: {CUDA_VISIBLE_DEVICES: \"7\"}}\n",
        )
        .unwrap();
        let vars = BTreeMap::from([("pool.gpu".to_string(), "1,2".to_string())]);
        let plan = wf.stages[0].plan(&vars, Path::new("/runs/r1")).unwrap();
        assert_eq!(plan.argv, ["x", "1,2"]);
        assert_eq!(plan.environ["CUDA_VISIBLE_DEVICES"], "1,2", "the assignment wins");
        assert_eq!(plan.environ["LACHESIS_POOL_GPU"], "1,2");
        let own = parse("name: t\nstages:\n  - {name: a, argv: [x], env: {CUDA_VISIBLE_DEVICES: \"7\"}}\n")
            .unwrap();
        let plan = own.stages[0].plan(&BTreeMap::new(), Path::new("/runs/r1")).unwrap();
        assert_eq!(plan.environ["CUDA_VISIBLE_DEVICES"], "7", "a run without needs keeps the workflow's");
        let stage = "stages:\n  - {name: a, argv: [x]}\n";
        for (head, want) in [
            ("name: t\nstages:\n  - {name: a, argv: [x, \"{pool.gpu}\"]}\n", "unknown variable '{pool.gpu}'"),
            ("name: t\nneeds: {GPU: 1}\n", "needs: 'GPU': a pool name is"),
            ("name: t\nneeds: {gpu: 2000}\n", "needs: 'gpu=2000': the count must be"),
            ("name: t\nneeds: {gpu: -1}\n", "needs"),
            ("name: t\nvars: {pool.gpu: x}\n", "vars.pool.gpu: names starting with 'port.' or 'pool.'"),
            ("name: t\nlauncher: slurm\nneeds: {gpu: 1}\n", "needs: counted pools are the claiming node's"),
        ] {
            let text = if head.contains("stages") { head.to_string() } else { format!("{head}{stage}") };
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(want) && !err.contains('\n'), "{head:?}: {err}");
        }
    }

    #[test]
    fn snapshots_round_trip_through_json() {
        let wf = parse("name: t\nstop_grace: 3s\nports: {a: auto, b: 9}\nstages:\n  - {name: a, argv: [x], start_delay: 250ms, probe: {tcp: \"127.0.0.1:9\"}}\n").unwrap();
        let json = serde_json::to_string(&wf).unwrap();
        assert_eq!(serde_json::from_str::<Workflow>(&json).unwrap(), wf);
    }
}
