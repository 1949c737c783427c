//! A stage's plan: every placeholder filled in, the W&B identity, the claimed pool units and a
//! resume point added to its environment; what the launcher needs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::template::{self, TemplateError};
use super::{DEFAULT_START_TIMEOUT, Probe, StageSpec, check_log_path, checkpoints, wandb};

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
    use std::collections::BTreeSet;

    use super::super::{InvalidWorkflow, Workflow};

    fn parse(text: &str) -> Result<Workflow, InvalidWorkflow> {
        Workflow::parse(Path::new("workflows/t.yaml"), text)
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
}
