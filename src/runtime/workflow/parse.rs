//! Reading a workflow file: parsing its YAML, then checking everything that can be checked
//! before a run exists, each error naming the file and the field.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::text::one_line;

use super::{BUILTIN_VARS, Launcher, NAME_RULE, PortSpec, Probe, Workflow};
use super::{check_log_path, checkpoints, is_simple_name, template};

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

    /// Checks everything that can be checked before a run exists; errors are (field, problem).
    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        let bad = |field: &str, problem: String| Err((field.to_string(), problem));
        if !is_simple_name(&self.name) {
            return bad("name", format!("'{}' {NAME_RULE}", one_line(&self.name)));
        }
        if self.stages.is_empty() {
            return bad("stages", "a workflow needs at least one stage".into());
        }
        self.check_environment().or_else(|problem| bad("environment", problem))?;
        check_report(&self.report).or_else(|problem| bad("report", problem))?;
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
        if let Some(metrics) = &self.metrics {
            let stages: Vec<&str> = self.stages.iter().map(|s| s.name.as_str()).collect();
            metrics.validate(&stages, &known)?;
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
}

/// The most headline metrics a workflow names: a line of the report, not a table.
const MAX_REPORT_METRICS: usize = 8;

/// `report:` names metrics as runs write them: a few, each non-empty, on one line.
fn check_report(names: &[String]) -> Result<(), String> {
    if names.len() > MAX_REPORT_METRICS {
        return Err(format!(
            "names {} metrics; a report line shows at most {MAX_REPORT_METRICS}",
            names.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for name in names {
        if name.trim().is_empty() || name.len() > 256 || name.chars().any(char::is_control) {
            return Err(format!("'{}' is not a metric name", one_line(name)));
        }
        if !seen.insert(name) {
            return Err(format!("'{name}' is named twice"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::time::Duration;

    use crate::workflow::{Dur, MAX_DURATION};

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
    fn report_names_a_few_distinct_metrics() {
        let wf = parse(&format!("{MINIMAL}report: [env/all/reward/total, loss]\n")).unwrap();
        assert_eq!(wf.report, ["env/all/reward/total", "loss"]);
        for (bad, says) in [
            ("report: [loss, loss]", "named twice"),
            ("report: ['']", "not a metric name"),
            ("report: [a, b, c, d, e, f, g, h, i]", "at most 8"),
        ] {
            let err = parse(&format!("{MINIMAL}{bad}\n")).unwrap_err().to_string();
            assert!(err.contains("report") && err.contains(says), "{bad}: {err}");
        }
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
    fn snapshots_round_trip_through_json() {
        let wf = parse("name: t\nstop_grace: 3s\nports: {a: auto, b: 9}\nstages:\n  - {name: a, argv: [x], start_delay: 250ms, probe: {tcp: \"127.0.0.1:9\"}}\n").unwrap();
        let json = serde_json::to_string(&wf).unwrap();
        assert_eq!(serde_json::from_str::<Workflow>(&json).unwrap(), wf);
    }
}
