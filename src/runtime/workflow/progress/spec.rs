//! Checking a workflow's `progress:` block (its data is `model::workflow::progress`) and
//! resolving it against a run's values; `reading.rs` reads what it resolves to.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use super::reading::{ResolvedProgress, ResolvedSource, ResolvedTotal};
use crate::model::workflow::{JsonlSource, ProgressSpec, TotalSpec};
use crate::text::one_line;
use crate::workflow::template;

/// How often an HTTP progress source is read when the workflow says nothing.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(10);

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
    pub(in crate::runtime::workflow) fn validate(
        &self,
        stages: &[&str],
        known: &[String],
    ) -> Result<(), (String, String)> {
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
pub(in crate::runtime::workflow) fn resolve_run_file(
    file: &str,
    vars: &BTreeMap<String, String>,
) -> Result<PathBuf, String> {
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
pub(in crate::runtime::workflow) fn check_file(file: &str) -> Result<(), String> {
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
pub(in crate::runtime::workflow) fn compile(pattern: &str) -> Result<regex::Regex, String> {
    let regex = regex::Regex::new(pattern)
        .map_err(|e| format!("not a regex: {}", e.to_string().lines().last().unwrap_or("")))?;
    if !regex.capture_names().flatten().any(|n| n == "step") {
        return Err(format!("'{pattern}' has no `step` group (write (?P<step>\\d+))"));
    }
    Ok(regex)
}
