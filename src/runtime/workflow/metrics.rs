//! A workflow's `metrics:` block: where a run's training metrics appear, by name (a JSONL file
//! such as tinker-cookbook's `metrics.jsonl`, or a stage's log with a regex's named groups).
//! Parsing, checking and reading one line; the reconciler follows the source and the store keeps
//! the readings (`model::MetricReading`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::progress::{as_count, check_file, compile, resolve_run_file};
use super::template;
use crate::model::MetricReading;
pub use crate::model::workflow::{MetricJsonl, MetricLog, MetricSpec};
use crate::text::one_line;

/// The most readings one line gives: a row with more keys keeps its first ones (in the row's
/// order, flattened), so a stage cannot grow a batch without bound.
pub const MAX_READINGS_PER_LINE: usize = 1_000;

/// Where a run's metrics are read, with every placeholder filled in.
#[derive(Clone, Debug)]
pub enum ResolvedMetrics {
    Log {
        path: PathBuf,
        pattern: regex::Regex,
    },
    /// `step_name` is the step's key as a flattened name, left out of the metrics.
    Jsonl {
        path: PathBuf,
        step: String,
        step_name: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("metrics.log.pattern: {0}")]
    Pattern(String),
    #[error("metrics.jsonl.file: {0}")]
    File(String),
    #[error("metrics: no source")]
    NoSource,
}

/// A line of a metrics source that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("read a line that is not a JSON object")]
    NotObject,
    #[error("read a line that is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("read metrics without a whole-number step at {0}")]
    NoStep(String),
}

impl MetricSpec {
    /// Checks the block; errors are (field, problem). `known` are the workflow's variables.
    pub(in crate::runtime::workflow) fn validate(
        &self,
        stages: &[&str],
        known: &[String],
    ) -> Result<(), (String, String)> {
        let bad = |field: &str, problem: String| Err((format!("metrics.{field}"), problem));
        match (&self.log, &self.jsonl) {
            (Some(_), Some(_)) => bad("log", "give either `log` or `jsonl`, not both".into()),
            (None, None) => bad(
                "log",
                "say where metrics appear: `jsonl: {file, step}` or `log: {stage, pattern}`".into(),
            ),
            (Some(log), None) => {
                if !stages.contains(&log.stage.as_str()) {
                    return bad("log.stage", format!("no stage is called '{}'", one_line(&log.stage)));
                }
                let pattern = compile(&log.pattern).map_err(|e| ("metrics.log.pattern".to_string(), e))?;
                if pattern.capture_names().flatten().all(|n| n == "step") {
                    return bad(
                        "log.pattern",
                        "needs a named group per metric besides `step` (e.g. (?P<loss>\\S+))".into(),
                    );
                }
                Ok(())
            }
            (None, Some(jsonl)) => {
                template::check(&jsonl.file, known).or_else(|e| bad("jsonl.file", e.to_string()))?;
                check_file(&jsonl.file).or_else(|e| bad("jsonl.file", e))?;
                if !jsonl.step.starts_with('/') {
                    return bad(
                        "jsonl.step",
                        format!("'{}' is not a JSON pointer (e.g. /step)", one_line(&jsonl.step)),
                    );
                }
                Ok(())
            }
        }
    }

    /// Fills the placeholders: `vars` are the run's resolved variables, `log_of` each stage's
    /// log path.
    pub fn resolve(
        &self,
        vars: &BTreeMap<String, String>,
        log_of: impl Fn(&str) -> Option<PathBuf>,
    ) -> Result<ResolvedMetrics, MetricsError> {
        match (&self.log, &self.jsonl) {
            (Some(log), _) => Ok(ResolvedMetrics::Log {
                path: log_of(&log.stage).unwrap_or_else(|| PathBuf::from(&log.stage).with_extension("log")),
                pattern: compile(&log.pattern).map_err(MetricsError::Pattern)?,
            }),
            (None, Some(jsonl)) => Ok(ResolvedMetrics::Jsonl {
                path: resolve_run_file(&jsonl.file, vars).map_err(MetricsError::File)?,
                step: jsonl.step.clone(),
                step_name: pointer_name(&jsonl.step),
            }),
            (None, None) => Err(MetricsError::NoSource),
        }
    }

    /// The file of a `jsonl:` source, if it resolves.
    pub fn jsonl_file(&self, vars: &BTreeMap<String, String>) -> Option<PathBuf> {
        resolve_run_file(&self.jsonl.as_ref()?.file, vars).ok()
    }

    /// The stage whose log is followed, for a `log:` source.
    pub fn log_stage(&self) -> Option<&str> {
        self.log.as_ref().map(|l| l.stage.as_str())
    }

    /// The names of the metrics the source can give, when they are known before a line is
    /// read: a log pattern's named groups but `step`. None for a JSONL file (any key of a row).
    pub fn known_names(&self) -> Option<Vec<String>> {
        let pattern = compile(&self.log.as_ref()?.pattern).ok()?;
        Some(pattern.capture_names().flatten().filter(|name| *name != "step").map(str::to_string).collect())
    }
}

/// The flattened name a JSON pointer points at: its tokens, unescaped, joined with `/`.
fn pointer_name(pointer: &str) -> String {
    pointer
        .strip_prefix('/')
        .unwrap_or(pointer)
        .split('/')
        .map(|token| token.replace("~1", "/").replace("~0", "~"))
        .collect::<Vec<_>>()
        .join("/")
}

/// A reading of a watched metric (a sweep's) that is not a number: where, and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotNumber {
    pub name: String,
    pub step: i64,
    /// The value as written, on one line and shortened.
    pub text: String,
}

impl NotNumber {
    fn new(name: &str, step: i64, text: &str) -> NotNumber {
        let short: String = text.chars().take(40).collect();
        let more = if short.len() < text.len() { "…" } else { "" };
        NotNumber { name: name.to_string(), step, text: format!("{}{more}", one_line(&short)) }
    }
}

/// Adds the numbers under `value` to `out` as readings at `step`, named by their keys from the
/// row's top joined with `/`; `skip` is the step's own name. A value named `watch` that is no
/// number (a string, a boolean, a list, an object) goes to `odd`; `null`, which is how Python's
/// `json` writes a NaN, is dropped as a NaN is.
fn flatten(
    prefix: &str,
    value: &serde_json::Value,
    step: i64,
    skip: &str,
    out: &mut Vec<MetricReading>,
    watch: Option<&str>,
    odd: &mut Option<NotNumber>,
) {
    if watch == Some(prefix)
        && odd.is_none()
        && !matches!(value, serde_json::Value::Number(_) | serde_json::Value::Null)
    {
        *odd = Some(NotNumber::new(prefix, step, &value.to_string()));
    }
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                if out.len() >= MAX_READINGS_PER_LINE {
                    return;
                }
                let name = if prefix.is_empty() { key.clone() } else { format!("{prefix}/{key}") };
                flatten(&name, value, step, skip, out, watch, odd);
            }
        }
        serde_json::Value::Number(n) if prefix != skip => {
            // NaN and infinities are dropped, as W&B drops them (bare ones read as null).
            if let Some(reading) = n.as_f64().and_then(|v| MetricReading::new(prefix, step, v)) {
                out.push(reading);
            }
        }
        _ => {}
    }
}

impl ResolvedMetrics {
    /// The file followed line by line.
    pub fn file(&self) -> &std::path::Path {
        match self {
            ResolvedMetrics::Log { path, .. } | ResolvedMetrics::Jsonl { path, .. } => path,
        }
    }

    /// The readings in one line: none for a log line that does not match or a blank line, an
    /// error for a line that cannot be read. Values that are not finite numbers are left out.
    pub fn read_line(&self, line: &str) -> Result<Vec<MetricReading>, LineError> {
        self.read_line_watching(line, None).map(|(readings, _)| readings)
    }

    /// `read_line`, and the line's value of metric `watch` when it is there and no number (a
    /// log group's text that does not read as one; a JSON string, boolean, list or object).
    pub fn read_line_watching(
        &self,
        line: &str,
        watch: Option<&str>,
    ) -> Result<(Vec<MetricReading>, Option<NotNumber>), LineError> {
        match self {
            ResolvedMetrics::Log { pattern, .. } => {
                let Some(caps) = pattern.captures(line) else { return Ok((Vec::new(), None)) };
                let Some(step) = caps.name("step").and_then(|m| m.as_str().parse::<i64>().ok()) else {
                    return Err(LineError::NoStep(one_line(line)));
                };
                let mut odd = None;
                let readings = pattern
                    .capture_names()
                    .flatten()
                    .filter(|name| *name != "step")
                    .filter_map(|name| {
                        let text = caps.name(name)?.as_str().trim();
                        let Ok(value) = text.parse::<f64>() else {
                            if watch == Some(name) {
                                odd = Some(NotNumber::new(name, step, text));
                            }
                            return None;
                        };
                        MetricReading::new(name, step, value)
                    })
                    .collect();
                Ok((readings, odd))
            }
            ResolvedMetrics::Jsonl { step, step_name, .. } => {
                if line.trim().is_empty() {
                    return Ok((Vec::new(), None));
                }
                // Python's json writes a NaN bare: the value is dropped, the rest of the row kept.
                let record: serde_json::Value = crate::pyjson::from_str(line)?;
                if !record.is_object() {
                    return Err(LineError::NotObject);
                }
                let Some(at) = record.pointer(step).and_then(as_count) else {
                    return Err(LineError::NoStep(step.clone()));
                };
                let (mut readings, mut odd) = (Vec::new(), None);
                let at = at.min(i64::MAX as u64) as i64;
                flatten("", &record, at, step_name, &mut readings, watch, &mut odd);
                Ok((readings, odd))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(yaml: &str) -> ResolvedMetrics {
        let spec: MetricSpec = crate::yaml::from_str(yaml).unwrap();
        spec.validate(&["trainer"], &["run_dir".to_string()]).unwrap();
        let vars = BTreeMap::from([("run_dir".to_string(), "/runs/r1".to_string())]);
        spec.resolve(&vars, |_| Some(PathBuf::from("/runs/r1/trainer.log"))).unwrap()
    }

    fn named(readings: Vec<MetricReading>) -> Vec<(String, i64, f64)> {
        readings.into_iter().map(|r| (r.name, r.step, r.value)).collect()
    }

    #[test]
    fn cookbook_rows_give_every_number_by_its_key() {
        let jsonl = source("jsonl: {file: '{run_dir}/cookbook/metrics.jsonl', step: /step}");
        assert_eq!(jsonl.file(), std::path::Path::new("/runs/r1/cookbook/metrics.jsonl"));
        let line = r#"{"step": 3, "env/all/reward/total": 0.5, "progress/done_frac": 0.04, "optim/lr": 1e-05, "name": "x", "ok": true}"#;
        assert_eq!(
            named(jsonl.read_line(line).unwrap()),
            vec![
                ("env/all/reward/total".into(), 3, 0.5),
                ("optim/lr".into(), 3, 1e-05),
                ("progress/done_frac".into(), 3, 0.04)
            ]
        );
        // Nested objects are flattened with `/`; the step's own key is no metric.
        let nested = source("jsonl: {file: m.jsonl, step: /progress/batch}");
        let line = r#"{"progress": {"batch": 7, "frac": 0.5}, "env": {"all": {"reward": 2}}}"#;
        assert_eq!(
            named(nested.read_line(line).unwrap()),
            vec![("env/all/reward".into(), 7, 2.0), ("progress/frac".into(), 7, 0.5)]
        );
        let escaped = source("jsonl: {file: m.jsonl, step: /progress~1batch}");
        assert_eq!(
            named(escaped.read_line(r#"{"progress/batch": 2, "loss": 1}"#).unwrap()),
            vec![("loss".into(), 2, 1.0)]
        );
        assert!(jsonl.read_line("  ").unwrap().is_empty());
        assert!(matches!(jsonl.read_line("{not json"), Err(LineError::NotJson(_))));
        assert_eq!(
            named(jsonl.read_line(r#"{"loss": NaN, "step": 1, "kl": -Infinity, "reward": 2}"#).unwrap()),
            vec![("reward".into(), 1, 2.0)],
            "NaN and infinities are dropped, the rest of the row kept"
        );
        assert!(matches!(jsonl.read_line("[1, 2]"), Err(LineError::NotObject)));
        assert!(matches!(jsonl.read_line(r#"{"loss": 1}"#), Err(LineError::NoStep(_))));
    }

    #[test]
    fn a_row_gives_at_most_its_bound_of_readings() {
        let jsonl = source("jsonl: {file: m.jsonl, step: /step}");
        let keys: Vec<String> = (0..MAX_READINGS_PER_LINE + 50).map(|i| format!("\"k{i}\": {i}")).collect();
        let line = format!("{{\"step\": 1, {}}}", keys.join(", "));
        assert_eq!(jsonl.read_line(&line).unwrap().len(), MAX_READINGS_PER_LINE);
    }

    #[test]
    fn log_lines_give_each_named_group_but_the_step() {
        let log = source(
            r"log: {stage: trainer, pattern: 'step (?P<step>\d+) loss=(?P<loss>\S+) reward=(?P<reward>\S+)'}",
        );
        assert_eq!(
            named(log.read_line("step 4 loss=0.25 reward=nan").unwrap()),
            vec![("loss".into(), 4, 0.25)],
            "NaN is dropped"
        );
        assert_eq!(
            named(log.read_line("step 5 loss=inf reward=-1.5").unwrap()),
            vec![("reward".into(), 5, -1.5)]
        );
        assert!(log.read_line("unrelated").unwrap().is_empty());
    }

    #[test]
    fn a_watched_metric_that_is_no_number_is_told_not_dropped_in_silence() {
        let jsonl = source("jsonl: {file: m.jsonl, step: /step}");
        let read = |line: &str| jsonl.read_line_watching(line, Some("loss")).unwrap();
        let (readings, odd) = read(r#"{"step": 4, "loss": "0.5", "kl": 1}"#);
        assert_eq!(named(readings), vec![("kl".into(), 4, 1.0)]);
        assert_eq!(odd, Some(NotNumber { name: "loss".into(), step: 4, text: "\"0.5\"".into() }));
        for (line, text) in [(r#"{"step": 1, "loss": true}"#, "true"), (r#"{"step": 1, "loss": [1]}"#, "[1]")]
        {
            assert_eq!(read(line).1.map(|n| n.text), Some(text.to_string()), "{line}");
        }
        // NaN (bare, or the null it reads as) is dropped as W&B drops it; other keys are not
        // watched; a number is a reading.
        for line in
            [r#"{"step": 1, "loss": NaN}"#, r#"{"step": 1, "loss": null}"#, r#"{"step": 1, "name": "x"}"#]
        {
            assert_eq!(read(line).1, None, "{line}");
        }
        assert_eq!(named(read(r#"{"step": 2, "loss": 0.25}"#).0), vec![("loss".into(), 2, 0.25)]);
        let long = format!(r#"{{"step": 3, "loss": "{}"}}"#, "x".repeat(100));
        assert!(read(&long).1.unwrap().text.ends_with('…'));
        assert_eq!(jsonl.read_line_watching(r#"{"step": 1, "loss": "a"}"#, None).unwrap().1, None);

        let log =
            source(r"log: {stage: trainer, pattern: 'step (?P<step>\d+) loss=(?P<loss>\S+) r=(?P<r>\S+)'}");
        let (readings, odd) = log.read_line_watching("step 7 loss=abc r=x", Some("loss")).unwrap();
        assert!(readings.is_empty());
        assert_eq!(odd, Some(NotNumber { name: "loss".into(), step: 7, text: "abc".into() }));
        assert_eq!(
            log.read_line_watching("step 7 loss=nan r=1", Some("loss")).unwrap().1,
            None,
            "NaN is a number"
        );
    }

    #[test]
    fn a_log_pattern_knows_its_metrics_and_a_jsonl_file_does_not() {
        let spec: MetricSpec = crate::yaml::from_str(
            r"log: {stage: t, pattern: 'step (?P<step>\d+) (?P<loss>\S+) (?P<kl>\S+)'}",
        )
        .unwrap();
        assert_eq!(spec.known_names(), Some(vec!["loss".to_string(), "kl".to_string()]));
        let spec: MetricSpec = crate::yaml::from_str("jsonl: {file: m.jsonl, step: /step}").unwrap();
        assert_eq!(spec.known_names(), None);
    }

    #[test]
    fn bad_blocks_are_refused_with_their_field() {
        let check = |yaml: &str| {
            let spec: MetricSpec = crate::yaml::from_str(yaml).unwrap();
            spec.validate(&["trainer"], &[]).map_err(|(field, problem)| format!("{field}: {problem}"))
        };
        assert!(
            check(r"log: {stage: trainer, pattern: 'step (?P<step>\d+)'}")
                .unwrap_err()
                .contains("named group")
        );
        assert!(
            check(r"log: {stage: other, pattern: '(?P<step>\d+) (?P<x>\S+)'}")
                .unwrap_err()
                .contains("no stage")
        );
        assert!(check(r"log: {stage: trainer, pattern: '(?P<x>\S+)'}").unwrap_err().contains("step"));
        assert!(check("jsonl: {file: '../m.jsonl', step: /step}").unwrap_err().contains(".."));
        assert!(check("jsonl: {file: m.jsonl, step: step}").unwrap_err().contains("JSON pointer"));
        assert!(check("{}").is_err());
        assert!(crate::yaml::from_str::<MetricSpec>("jsonl: {file: m.jsonl, step: /s, extra: 1}").is_err());
    }

    proptest::proptest! {
        /// Whatever YAML a workflow holds under `metrics:`, parsing, checking and resolving it
        /// return (an error or a source) and never panic.
        #[test]
        fn any_block_is_refused_or_read_without_panicking(yaml in "\\PC{0,200}", line in "\\PC{0,200}") {
            if let Ok(spec) = crate::yaml::from_str::<MetricSpec>(&yaml)
                && spec.validate(&["trainer"], &[]).is_ok()
            {
                let vars = BTreeMap::from([("run_dir".to_string(), "/r".to_string())]);
                if let Ok(source) = spec.resolve(&vars, |_| None) {
                    let _ = source.read_line(&line);
                }
            }
        }

        /// Structured blocks, closer to what users write, go the same way.
        #[test]
        fn shaped_blocks_never_panic(
            kind in proptest::sample::select(vec!["jsonl", "log"]),
            a in "\\PC{0,40}",
            b in "\\PC{0,40}",
            line in "\\PC{0,200}",
        ) {
            let yaml = if kind == "jsonl" {
                format!("jsonl: {{file: {a:?}, step: {b:?}}}")
            } else {
                format!("log: {{stage: trainer, pattern: {b:?}}}")
            };
            if let Ok(spec) = crate::yaml::from_str::<MetricSpec>(&yaml)
                && spec.validate(&["trainer"], &[]).is_ok()
            {
                let vars = BTreeMap::from([("run_dir".to_string(), "/r".to_string())]);
                if let Ok(source) = spec.resolve(&vars, |_| None) {
                    let _ = source.read_line(&line);
                    let _ = source.read_line(&format!("{{\"s\": 1, {line:?}: 2}}"));
                }
            }
        }
    }
}
