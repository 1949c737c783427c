//! A workflow's `progress:` block: where a run's training step comes from (a JSON endpoint, a
//! stage's log or a JSONL metrics file) and what its total is. Parsing, checking and expanding
//! only; the reconciler's workers do the reading.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Dur, template};
use crate::text::one_line;

/// How often an HTTP progress source is read when the workflow says nothing.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(10);

/// Written `{http: URL, step: /pointer, total: …, every: 10s}`,
/// `{log: {stage: NAME, pattern: REGEX}, total: …}` or
/// `{jsonl: {file: "{run_dir}/…/metrics.jsonl", step: /step, total: …, fraction: /pointer}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgressSpec {
    /// A URL answering a GET with JSON (templated like probes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// The JSON pointer of the step in the HTTP answer (e.g. `/current_step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonl: Option<JsonlSource>,
    /// A number, a template (`{config.env.total_steps}`), or a JSON pointer into the answer;
    /// absent with a log pattern that has a `total` group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<TotalSpec>,
    /// How often the HTTP source is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<Dur>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSource {
    /// The stage whose log is followed.
    pub stage: String,
    /// A regex with a `step` group and, optionally, a `total` group.
    pub pattern: String,
}

/// A file of one JSON object per line (tinker-cookbook's `metrics.jsonl`), read as it grows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonlSource {
    /// The file, inside the run directory: `{run_dir}/…` or relative to it.
    pub file: String,
    /// The JSON pointer of the step in each line (e.g. `/step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// A number, a template, or a JSON pointer into each line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<TotalSpec>,
    /// The JSON pointer of the fraction done (0 to 1, e.g. `/progress~1done_frac`): where a
    /// line has no step and total, progress is counted in thousandths, step = 1000 × fraction
    /// of a total of 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<String>,
}

/// The total of a run whose progress is known only as a fraction.
pub const FRACTION_TOTAL: u64 = 1000;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TotalSpec {
    Number(u64),
    Text(String),
}

/// Where a run's step is read, with every placeholder filled in.
#[derive(Clone, Debug)]
pub enum ResolvedSource {
    Http { url: String, step: String, every: Duration },
    Log { path: std::path::PathBuf, pattern: regex::Regex },
    Jsonl { path: std::path::PathBuf, step: Option<String>, fraction: Option<String> },
}

impl ResolvedSource {
    /// The file followed line by line: a stage's log or a JSONL file.
    pub fn followed_file(&self) -> Option<&Path> {
        match self {
            ResolvedSource::Log { path, .. } | ResolvedSource::Jsonl { path, .. } => Some(path),
            ResolvedSource::Http { .. } => None,
        }
    }
}

/// Where a run's total comes from, once resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolvedTotal {
    Fixed(u64),
    /// A JSON pointer into the HTTP answer or the JSONL line.
    Pointer(String),
    /// The `total` group of the log pattern.
    Group,
    Unknown,
}

#[derive(Clone, Debug)]
pub struct ResolvedProgress {
    pub source: ResolvedSource,
    pub total: ResolvedTotal,
}

#[derive(Debug, thiserror::Error)]
pub enum ProgressError {
    #[error("progress.total: {0}")]
    Template(#[from] template::TemplateError),
    #[error("progress.total: '{0}' is not a whole number of steps")]
    NotANumber(String),
    #[error("progress.http: {0}")]
    Url(template::TemplateError),
    #[error("progress.log.pattern: {0}")]
    Pattern(String),
    #[error("progress.jsonl.file: {0}")]
    File(String),
}

impl ProgressSpec {
    /// Checks the block; errors are (field, problem). `known` are the workflow's variables.
    pub(super) fn validate(&self, stages: &[&str], known: &[String]) -> Result<(), (String, String)> {
        let bad = |field: &str, problem: String| Err((format!("progress.{field}"), problem));
        if let Some(jsonl) = &self.jsonl {
            if self.http.is_some() || self.log.is_some() {
                return bad("jsonl", "give one of `http`, `log` or `jsonl`".into());
            }
            jsonl.validate(self, known)?;
        }
        match (&self.http, &self.log) {
            (Some(_), Some(_)) => return bad("http", "give either `http` or `log`, not both".into()),
            (None, None) if self.jsonl.is_some() => {}
            (None, None) => {
                return bad(
                    "http",
                    concat!(
                        "say where the step comes from: `http: URL`, `log: {stage, pattern}` ",
                        "or `jsonl: {file, step}`"
                    )
                    .into(),
                );
            }
            (Some(url), None) => {
                template::check(url, known).or_else(|e| bad("http", e.to_string()))?;
                if !url.starts_with("http://") && !url.starts_with("https://") {
                    return bad("http", format!("'{url}' must be an http:// URL"));
                }
                match &self.step {
                    Some(step) if step.starts_with('/') => {}
                    Some(step) => {
                        return bad("step", format!("'{step}' is not a JSON pointer (e.g. /current_step)"));
                    }
                    None => return bad("step", "an HTTP source needs the JSON pointer of the step".into()),
                }
            }
            (None, Some(log)) => {
                if self.step.is_some() {
                    return bad("step", "a log source takes its step from the pattern's `step` group".into());
                }
                if self.every.is_some() {
                    return bad(
                        "every",
                        "a log is followed as it is written, not read every so often".into(),
                    );
                }
                if !stages.contains(&log.stage.as_str()) {
                    return bad("log.stage", format!("no stage is called '{}'", log.stage));
                }
                let pattern = compile(&log.pattern).map_err(|e| ("progress.log.pattern".to_string(), e))?;
                if matches!(&self.total, Some(TotalSpec::Text(t)) if t.starts_with('/')) {
                    return bad("total", "a JSON pointer needs an HTTP source".into());
                }
                if self.total.is_none() && pattern.capture_names().flatten().all(|n| n != "total") {
                    return bad(
                        "total",
                        "give a total, or a `total` group in the pattern (e.g. (?P<total>\\d+))".into(),
                    );
                }
            }
        }
        if let Some(every) = self.every
            && every.0 < Duration::from_millis(100)
        {
            return bad("every", format!("{every} is too often (at least 100ms)"));
        }
        match self.total() {
            Some(TotalSpec::Text(text)) if text.starts_with('/') => {}
            Some(TotalSpec::Text(text)) if text.contains('{') => {
                for name in
                    template::variables(text).map_err(|e| ("progress.total".to_string(), e.to_string()))?
                {
                    if !name.starts_with("config.") && !known.iter().any(|k| k == name) {
                        return bad(
                            "total",
                            format!(
                                "unknown variable '{{{name}}}' (use the run config's values as {{config.env.total_steps}}, or {})",
                                known.join(", ")
                            ),
                        );
                    }
                }
            }
            Some(TotalSpec::Text(text)) if text.trim().parse::<u64>().is_err() => {
                return bad("total", format!("'{text}' is not a number, a {{template}} or a /json/pointer"));
            }
            _ => {}
        }
        Ok(())
    }

    /// The total, written beside the source or (for a JSONL file) inside it.
    fn total(&self) -> Option<&TotalSpec> {
        self.jsonl.as_ref().and_then(|j| j.total.as_ref()).or(self.total.as_ref())
    }

    /// The JSONL file followed, if the source is one (the run's variables filled in).
    pub fn jsonl_file(&self, vars: &BTreeMap<String, String>) -> Option<PathBuf> {
        if self.http.is_some() || self.log.is_some() {
            return None;
        }
        self.jsonl.as_ref()?.resolve_file(vars).ok()
    }

    /// Fills the placeholders: `vars` are the run's resolved variables, `config` its run
    /// config (for `{config.…}` in the total), `logs` each stage's log path.
    pub fn resolve(
        &self,
        vars: &BTreeMap<String, String>,
        config: &serde_json::Value,
        log_of: impl Fn(&str) -> Option<std::path::PathBuf>,
    ) -> Result<ResolvedProgress, ProgressError> {
        let source = match (&self.http, &self.log) {
            (Some(url), _) => ResolvedSource::Http {
                url: template::expand(url, vars).map_err(ProgressError::Url)?,
                step: self.step.clone().unwrap_or_default(),
                every: self.every.map_or(DEFAULT_EVERY, |d| d.0),
            },
            (None, Some(log)) => ResolvedSource::Log {
                path: log_of(&log.stage).unwrap_or_else(|| Path::new(&log.stage).with_extension("log")),
                pattern: compile(&log.pattern).map_err(ProgressError::Pattern)?,
            },
            (None, None) => match &self.jsonl {
                Some(jsonl) => ResolvedSource::Jsonl {
                    path: jsonl.resolve_file(vars)?,
                    step: jsonl.step.clone(),
                    fraction: jsonl.fraction.clone(),
                },
                None => return Err(ProgressError::Pattern("no source".into())),
            },
        };
        let total = match self.total() {
            None if matches!(&source, ResolvedSource::Log { .. }) => ResolvedTotal::Group,
            None => ResolvedTotal::Unknown,
            Some(TotalSpec::Number(n)) => ResolvedTotal::Fixed(*n),
            Some(TotalSpec::Text(text)) if text.starts_with('/') => ResolvedTotal::Pointer(text.clone()),
            Some(TotalSpec::Text(text)) => {
                let mut all = vars.clone();
                flatten_config("config", config, &mut all);
                let expanded = template::expand(text, &all)?;
                let number = expanded.trim();
                ResolvedTotal::Fixed(
                    number
                        .parse::<u64>()
                        .or_else(|_| number.parse::<f64>().map(|f| f as u64))
                        .map_err(|_| ProgressError::NotANumber(expanded.clone()))?,
                )
            }
        };
        Ok(ResolvedProgress { source, total })
    }
}

impl JsonlSource {
    /// Checks the source; `spec` is the block around it.
    fn validate(&self, spec: &ProgressSpec, known: &[String]) -> Result<(), (String, String)> {
        let bad = |field: &str, problem: &str| Err((format!("progress.{field}"), problem.to_string()));
        if spec.step.is_some() {
            return bad("step", "a JSONL source names its step inside it: `jsonl: {file, step: /step}`");
        }
        if spec.every.is_some() {
            return bad("every", "a JSONL file is followed as it is written, not read every so often");
        }
        if spec.total.is_some() && self.total.is_some() {
            return bad("total", "give the total once, inside `jsonl`");
        }
        template::check(&self.file, known).map_err(|e| ("progress.jsonl.file".to_string(), e.to_string()))?;
        check_file(&self.file).map_err(|problem| ("progress.jsonl.file".to_string(), problem))?;
        for (field, pointer) in [("jsonl.step", &self.step), ("jsonl.fraction", &self.fraction)] {
            if let Some(pointer) = pointer
                && !pointer.starts_with('/')
            {
                let problem = format!("'{}' is not a JSON pointer (e.g. /step)", one_line(pointer));
                return Err((format!("progress.{field}"), problem));
            }
        }
        if self.step.is_none() && self.fraction.is_none() {
            return bad(
                "jsonl.step",
                "give the JSON pointer of the step (e.g. /step) or of a `fraction` done",
            );
        }
        Ok(())
    }

    /// The file's path: the template filled in, inside the run directory.
    fn resolve_file(&self, vars: &BTreeMap<String, String>) -> Result<PathBuf, ProgressError> {
        resolve_run_file(&self.file, vars).map_err(ProgressError::File)
    }
}

/// A file named in a workflow (`{run_dir}/…` or relative), its template filled in, and
/// refused unless it stays inside the run directory (`vars["run_dir"]`): the daemon reads it.
pub(super) fn resolve_run_file(file: &str, vars: &BTreeMap<String, String>) -> Result<PathBuf, String> {
    let expanded = template::expand(file, vars).map_err(|e| e.to_string())?;
    let run_dir = PathBuf::from(vars.get("run_dir").map_or("", String::as_str));
    let path = run_dir.join(&expanded);
    let inside = path.strip_prefix(&run_dir).ok().filter(|rest| {
        rest.components().next().is_some() && rest.components().all(|c| matches!(c, Component::Normal(_)))
    });
    match inside {
        Some(_) => Ok(path),
        None => Err(format!(
            "'{}' is not a file inside the run directory {}",
            one_line(&expanded),
            run_dir.display()
        )),
    }
}

/// A JSONL file as written in a workflow: `{run_dir}/…` or relative to the run directory, and
/// never out of it (the daemon reads it).
pub(super) fn check_file(file: &str) -> Result<(), String> {
    let outside =
        |why: &str| Err(format!("'{}' {why}: the file must be inside the run directory", one_line(file)));
    if file.trim().is_empty() {
        return outside("is empty");
    }
    if file.split(['/', '\\']).any(|part| part == "..") {
        return outside("goes up with '..'");
    }
    let rest = file.strip_prefix("{run_dir}").unwrap_or(file);
    if rest.starts_with('{') || (rest.len() < file.len() && !rest.starts_with('/')) {
        return outside("must start with {run_dir}/ or be relative to the run directory");
    }
    if rest.len() == file.len() && (file.starts_with('/') || file.starts_with('~')) {
        return outside("is absolute (write {run_dir}/… or a relative path)");
    }
    Ok(())
}

/// `config.env.total_steps = "2500"` and so on, for every scalar of the run config.
fn flatten_config(prefix: &str, value: &serde_json::Value, out: &mut BTreeMap<String, String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                flatten_config(&format!("{prefix}.{key}"), value, out);
            }
        }
        serde_json::Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        serde_json::Value::Number(n) => {
            out.insert(prefix.to_string(), n.to_string());
        }
        serde_json::Value::Bool(b) => {
            out.insert(prefix.to_string(), b.to_string());
        }
        _ => {}
    }
}

/// A pattern with a `step` group.
pub(super) fn compile(pattern: &str) -> Result<regex::Regex, String> {
    let regex = regex::Regex::new(pattern)
        .map_err(|e| format!("not a regex: {}", e.to_string().lines().last().unwrap_or("")))?;
    if !regex.capture_names().flatten().any(|n| n == "step") {
        return Err(format!("'{pattern}' has no `step` group (write (?P<step>\\d+))"));
    }
    Ok(regex)
}

/// One reading of a source: the step, and the total when the source carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    pub step: u64,
    pub total: Option<u64>,
}

impl ResolvedProgress {
    /// The reading in one JSON answer, if it has a step.
    pub fn read_json(&self, answer: &serde_json::Value) -> Option<Reading> {
        let ResolvedSource::Http { step, .. } = &self.source else { return None };
        let step = as_count(answer.pointer(step)?)?;
        let total = match &self.total {
            ResolvedTotal::Fixed(n) => Some(*n),
            ResolvedTotal::Pointer(p) => answer.pointer(p).and_then(as_count),
            _ => None,
        };
        Some(Reading { step, total })
    }

    /// The reading in one line of a followed file (a log or a JSONL file), if it has one.
    pub fn read_line(&self, line: &str) -> Option<Reading> {
        if let ResolvedSource::Jsonl { .. } = &self.source {
            return self.read_jsonl(line).ok().flatten();
        }
        let ResolvedSource::Log { pattern, .. } = &self.source else { return None };
        let caps = pattern.captures(line)?;
        let step = caps.name("step")?.as_str().parse().ok()?;
        let total = match &self.total {
            ResolvedTotal::Fixed(n) => Some(*n),
            ResolvedTotal::Group => caps.name("total").and_then(|t| t.as_str().parse().ok()),
            _ => None,
        };
        Some(Reading { step, total })
    }
}

impl ResolvedProgress {
    /// The reading in one line of a JSONL file: `Ok(None)` for a line without a step (a blank
    /// line, another record), an error for a line that is not JSON. A step with a total wins;
    /// else a fraction counts in thousandths (see `JsonlSource::fraction`); else the step alone.
    pub fn read_jsonl(&self, line: &str) -> Result<Option<Reading>, serde_json::Error> {
        let ResolvedSource::Jsonl { step, fraction, .. } = &self.source else { return Ok(None) };
        if line.trim().is_empty() {
            return Ok(None);
        }
        let record: serde_json::Value = serde_json::from_str(line)?;
        let step = step.as_deref().and_then(|p| record.pointer(p)).and_then(as_count);
        let total = match &self.total {
            ResolvedTotal::Fixed(n) => Some(*n),
            ResolvedTotal::Pointer(p) => record.pointer(p).and_then(as_count),
            _ => None,
        };
        let fraction = fraction.as_deref().and_then(|p| record.pointer(p)).and_then(as_fraction);
        Ok(match (step, total, fraction) {
            (Some(step), Some(total), _) => Some(Reading { step, total: Some(total) }),
            (_, _, Some(done)) => Some(Reading {
                step: (done * FRACTION_TOTAL as f64).round() as u64,
                total: Some(FRACTION_TOTAL),
            }),
            (Some(step), None, None) => Some(Reading { step, total: None }),
            (None, _, None) => None,
        })
    }

    /// `read_followed` for an attempt that resumed at step `from`: a line whose own step is
    /// below it is not read. It is an earlier attempt's, kept by a trainer that rewrote its file
    /// on resuming (tinker-cookbook keeps the metrics rows before its checkpoint). A JSONL source
    /// without a `step` pointer can't tell, and reads every line.
    pub fn read_followed_from(
        &self,
        line: &str,
        from: Option<u64>,
    ) -> Result<Option<Reading>, serde_json::Error> {
        let reading = self.read_followed(line)?;
        match from {
            Some(from) if reading.is_some() => {
                Ok(reading.filter(|_| self.line_step(line).is_none_or(|step| step >= from)))
            }
            _ => Ok(reading),
        }
    }

    /// The training step a followed line names, as the trainer counts it (not in thousandths).
    fn line_step(&self, line: &str) -> Option<u64> {
        match &self.source {
            ResolvedSource::Jsonl { step: Some(pointer), .. } => {
                serde_json::from_str::<serde_json::Value>(line).ok()?.pointer(pointer).and_then(as_count)
            }
            ResolvedSource::Log { pattern, .. } => {
                pattern.captures(line)?.name("step")?.as_str().parse().ok()
            }
            _ => None,
        }
    }

    /// One line of a followed file: a log line's match or a JSONL line's reading (an error for
    /// a JSONL line that is not JSON).
    pub fn read_followed(&self, line: &str) -> Result<Option<Reading>, serde_json::Error> {
        match self.source {
            ResolvedSource::Jsonl { .. } => self.read_jsonl(line),
            _ => Ok(self.read_line(line)),
        }
    }
}

/// A fraction done, 0 to 1 (a number or a string of one).
fn as_fraction(value: &serde_json::Value) -> Option<f64> {
    let number = value.as_f64().or_else(|| value.as_str()?.trim().parse().ok())?;
    (0.0..=1.0).contains(&number).then_some(number)
}

pub(super) fn as_count(value: &serde_json::Value) -> Option<u64> {
    value
        .as_u64()
        .or_else(|| value.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
        .or_else(|| value.as_str()?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(yaml: &str) -> ProgressSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn known() -> Vec<String> {
        vec!["port.api".into(), "run_dir".into()]
    }

    #[test]
    fn http_progress_reads_pointers_and_a_config_total() {
        let s = spec(
            "{http: 'http://127.0.0.1:{port.api}/status', step: /current_step, total: '{config.env.total_steps}', every: 2s}",
        );
        s.validate(&["api"], &known()).unwrap();
        let vars = BTreeMap::from([("port.api".to_string(), "8000".to_string())]);
        let r = s.resolve(&vars, &json!({"env": {"total_steps": 2500}}), |_| None).unwrap();
        assert!(
            matches!(&r.source, ResolvedSource::Http { url, every, .. } if url == "http://127.0.0.1:8000/status" && *every == Duration::from_secs(2))
        );
        assert_eq!(r.total, ResolvedTotal::Fixed(2500));
        assert_eq!(r.read_json(&json!({"current_step": 42})), Some(Reading { step: 42, total: Some(2500) }));
        assert_eq!(r.read_json(&json!({"other": 1})), None);
        let pointer = spec("{http: 'http://h/s', step: /a/step, total: /a/total}");
        let r = pointer.resolve(&vars, &json!({}), |_| None).unwrap();
        assert_eq!(
            r.read_json(&json!({"a": {"step": 3, "total": "9"}})),
            Some(Reading { step: 3, total: Some(9) })
        );
    }

    #[test]
    fn log_progress_takes_step_and_total_groups() {
        let s = spec(r"{log: {stage: trainer, pattern: 'Step (?P<step>\d+)/(?P<total>\d+)'}}");
        s.validate(&["trainer"], &known()).unwrap();
        let r = s.resolve(&BTreeMap::new(), &json!({}), |_| Some("/r/trainer.log".into())).unwrap();
        assert_eq!(r.read_line("Step 3/5"), Some(Reading { step: 3, total: Some(5) }));
        assert_eq!(r.read_line("Loss: 0.3"), None);
    }

    #[test]
    fn bad_blocks_name_their_field() {
        let cases = [
            ("{step: /x}", "progress.http"),
            ("{http: 'http://h/', log: {stage: t, pattern: '(?P<step>\\d+)'}}", "progress.http"),
            ("{http: 'http://h/'}", "progress.step"),
            ("{http: 'http://h/', step: current_step}", "progress.step"),
            ("{http: 'ftp://h/', step: /s}", "progress.http"),
            ("{http: 'http://{nope}/', step: /s}", "progress.http"),
            ("{log: {stage: nope, pattern: '(?P<step>\\d+)'}, total: 5}", "progress.log.stage"),
            ("{log: {stage: t, pattern: '(\\d+)'}, total: 5}", "progress.log.pattern"),
            ("{log: {stage: t, pattern: '(?P<step>'}, total: 5}", "progress.log.pattern"),
            ("{log: {stage: t, pattern: '(?P<step>\\d+)'}}", "progress.total"),
            ("{http: 'http://h/', step: /s, total: many}", "progress.total"),
            ("{http: 'http://h/', step: /s, total: '{nope}'}", "progress.total"),
            ("{http: 'http://h/', step: /s, every: 1ms}", "progress.every"),
        ];
        for (yaml, field) in cases {
            let err = spec(yaml).validate(&["t"], &known()).unwrap_err();
            assert_eq!(err.0, field, "{yaml}: {}", err.1);
        }
    }

    fn run_vars() -> BTreeMap<String, String> {
        BTreeMap::from([("run_dir".to_string(), "/runs/r1".to_string())])
    }

    fn jsonl(yaml: &str) -> ResolvedProgress {
        let s = spec(yaml);
        s.validate(&["t"], &known()).unwrap();
        s.resolve(&run_vars(), &json!({"env": {"total_steps": 40}}), |_| None).unwrap()
    }

    #[test]
    fn jsonl_lines_map_to_step_and_total() {
        let by_pointer = jsonl("{jsonl: {file: '{run_dir}/logs/metrics.jsonl', step: /step, total: /n}}");
        let file = by_pointer.source.followed_file();
        assert_eq!(file, Some(Path::new("/runs/r1/logs/metrics.jsonl")));
        let fixed = jsonl("{jsonl: {file: metrics.jsonl, step: /step, total: '{config.env.total_steps}'}}");
        let fraction = jsonl("{jsonl: {file: m.jsonl, step: /step, fraction: /progress~1done_frac}}");
        let step_only = jsonl("{jsonl: {file: m.jsonl, step: /a~1b/step}}");
        let reading = |step, total| Ok(Some(Reading { step, total: Some(total) }));
        // `Err(())`: the line is not JSON.
        type Expected = Result<Option<Reading>, ()>;
        let cases: [(&ResolvedProgress, &str, Expected); 17] = [
            (&by_pointer, r#"{"step": 3, "n": 10}"#, reading(3, 10)),
            (&by_pointer, r#"{"step": "7", "n": " 10 "}"#, reading(7, 10)),
            (&by_pointer, r#"{"step": 4.0, "n": 10}"#, reading(4, 10)),
            (&by_pointer, r#"{"step": 3}"#, Ok(Some(Reading { step: 3, total: None }))),
            (&by_pointer, r#"{"loss": 0.3}"#, Ok(None)),
            (&by_pointer, r#"{"step": -2, "n": 10}"#, Ok(None)),
            (&by_pointer, r#"{"step": "three"}"#, Ok(None)),
            (&by_pointer, "", Ok(None)),
            (&by_pointer, r#"{"step": 3, "n"#, Err(())),
            (&by_pointer, "not json", Err(())),
            (&by_pointer, "[1, 2]", Ok(None)),
            (&fixed, r#"{"step": 12}"#, reading(12, 40)),
            (&fraction, r#"{"step": 5, "progress/done_frac": 0.25}"#, reading(250, 1000)),
            (&fraction, r#"{"progress/done_frac": "1"}"#, reading(1000, 1000)),
            (
                &fraction,
                r#"{"step": 5, "progress/done_frac": 1.5}"#,
                Ok(Some(Reading { step: 5, total: None })),
            ),
            (&step_only, r#"{"a/b": {"step": 9}}"#, Ok(Some(Reading { step: 9, total: None }))),
            (&step_only, r#"{"a": {"b": {"step": 9}}}"#, Ok(None)),
        ];
        for (source, line, expected) in cases {
            assert_eq!(source.read_jsonl(line).map_err(|_| ()), expected, "{line}");
            assert_eq!(source.read_line(line), expected.ok().flatten(), "{line}");
        }
    }

    #[test]
    fn a_resumed_attempt_reads_no_line_below_its_step() {
        let by_step = jsonl("{jsonl: {file: m.jsonl, step: /step, fraction: /progress~1done_frac}}");
        let fraction_only = jsonl("{jsonl: {file: m.jsonl, fraction: /progress~1done_frac}}");
        let kept = r#"{"step": 5, "progress/done_frac": 0.6}"#;
        let new = r#"{"step": 6, "progress/done_frac": 0.7}"#;
        let read = |source: &ResolvedProgress, line, from| source.read_followed_from(line, from).unwrap();
        assert_eq!(read(&by_step, kept, Some(6)), None, "an earlier attempt's row, kept on resuming");
        assert_eq!(read(&by_step, new, Some(6)), Some(Reading { step: 700, total: Some(1000) }));
        assert_eq!(read(&by_step, kept, None), Some(Reading { step: 600, total: Some(1000) }));
        assert!(read(&fraction_only, kept, Some(6)).is_some(), "without a step pointer it can't tell");
        let log = ResolvedProgress {
            source: ResolvedSource::Log {
                path: "t.log".into(),
                pattern: compile(r"Step (?P<step>\d+)").unwrap(),
            },
            total: ResolvedTotal::Unknown,
        };
        assert_eq!(read(&log, "Step 5", Some(6)), None);
        assert_eq!(read(&log, "Step 6", Some(6)), Some(Reading { step: 6, total: None }));
    }

    #[test]
    fn a_jsonl_file_stays_inside_the_run_directory() {
        let refused = [
            "../metrics.jsonl",
            "{run_dir}/../x.jsonl",
            "logs/../../x.jsonl",
            "/tmp/metrics.jsonl",
            "~/metrics.jsonl",
            "{home}/metrics.jsonl",
            "{run_dir}x.jsonl",
            "",
        ];
        for file in refused {
            let yaml = format!("{{jsonl: {{file: '{file}', step: /step, total: 5}}}}");
            let err = spec(&yaml).validate(&["t"], &[known(), vec!["home".into()]].concat()).unwrap_err();
            assert_eq!(err.0, "progress.jsonl.file", "{file}: {}", err.1);
            assert!(err.1.contains("inside the run directory"), "{}", err.1);
        }
        // A variable that expands to a way out is refused when the run's values are known.
        let s = spec("{jsonl: {file: '{run_dir}/{sub}/m.jsonl', step: /step}}");
        s.validate(&["t"], &[known(), vec!["sub".into()]].concat()).unwrap();
        let mut vars = run_vars();
        vars.insert("sub".into(), "../../etc".into());
        let err = s.resolve(&vars, &json!({}), |_| None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "progress.jsonl.file: '/runs/r1/../../etc/m.jsonl' is not a file inside the run directory /runs/r1"
        );
    }

    #[test]
    fn bad_jsonl_blocks_name_their_field() {
        let cases = [
            ("{jsonl: {file: m.jsonl}}", "progress.jsonl.step"),
            ("{jsonl: {file: m.jsonl, step: step}}", "progress.jsonl.step"),
            ("{jsonl: {file: m.jsonl, step: /s, fraction: done}}", "progress.jsonl.fraction"),
            ("{jsonl: {file: m.jsonl, step: /s, total: 3}, total: 3}", "progress.total"),
            ("{jsonl: {file: m.jsonl}, step: /s}", "progress.step"),
            ("{jsonl: {file: m.jsonl, step: /s}, every: 1s}", "progress.every"),
            ("{jsonl: {file: '{nope}/m.jsonl', step: /s}}", "progress.jsonl.file"),
            ("{jsonl: {file: m.jsonl, step: /s, total: many}}", "progress.total"),
            ("{jsonl: {file: m.jsonl, step: /s}, log: {stage: t, pattern: '(?P<step>1)'}}", "progress.jsonl"),
        ];
        for (yaml, field) in cases {
            let err = spec(yaml).validate(&["t"], &known()).unwrap_err();
            assert_eq!(err.0, field, "{yaml}: {}", err.1);
        }
    }

    #[test]
    fn a_total_template_that_is_not_a_number_says_so() {
        let s = spec("{http: 'http://h/', step: /s, total: '{config.env.name}'}");
        let err = s.resolve(&BTreeMap::new(), &json!({"env": {"name": "gsm8k"}}), |_| None).unwrap_err();
        assert_eq!(err.to_string(), "progress.total: 'gsm8k' is not a whole number of steps");
    }
}
