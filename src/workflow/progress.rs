//! A workflow's `progress:` block: where a run's training step comes from (a JSON endpoint or a
//! stage's log) and what its total is. Parsing, checking and expanding only; the reconciler's
//! workers do the reading.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Dur, template};

/// How often an HTTP progress source is read when the workflow says nothing.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(10);

/// Written `{http: URL, step: /pointer, total: …, every: 10s}` or
/// `{log: {stage: NAME, pattern: REGEX}, total: …}`.
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
}

/// Where a run's total comes from, once resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolvedTotal {
    Fixed(u64),
    /// A JSON pointer into the HTTP answer.
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
}

impl ProgressSpec {
    /// Checks the block; errors are (field, problem). `known` are the workflow's variables.
    pub(super) fn validate(&self, stages: &[&str], known: &[String]) -> Result<(), (String, String)> {
        let bad = |field: &str, problem: String| Err((format!("progress.{field}"), problem));
        match (&self.http, &self.log) {
            (Some(_), Some(_)) => return bad("http", "give either `http` or `log`, not both".into()),
            (None, None) => {
                return bad(
                    "http",
                    "say where the step comes from: `http: URL` or `log: {stage, pattern}`".into(),
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
        match &self.total {
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
            (None, None) => return Err(ProgressError::Pattern("no source".into())),
        };
        let total = match &self.total {
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
fn compile(pattern: &str) -> Result<regex::Regex, String> {
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

    /// The reading in one log line, if the pattern matches it.
    pub fn read_line(&self, line: &str) -> Option<Reading> {
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

fn as_count(value: &serde_json::Value) -> Option<u64> {
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

    #[test]
    fn a_total_template_that_is_not_a_number_says_so() {
        let s = spec("{http: 'http://h/', step: /s, total: '{config.env.name}'}");
        let err = s.resolve(&BTreeMap::new(), &json!({"env": {"name": "gsm8k"}}), |_| None).unwrap_err();
        assert_eq!(err.to_string(), "progress.total: 'gsm8k' is not a whole number of steps");
    }
}
