//! Checking a workflow's `checkpoints:` block (its data is `model::workflow::checkpoints`),
//! resolving it and reading one line; the reconciler follows the source and records the rows.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sha2::Digest;

use super::progress::{as_count, check_file, compile, resolve_run_file};
use super::template;
pub use crate::model::workflow::CheckpointSpec;
use crate::model::{FoundCheckpoint, ResumePoint, RunParams, Start};
use crate::text::one_line;

/// Where a run's checkpoints are read, with every placeholder filled in.
#[derive(Clone, Debug)]
pub enum ResolvedCheckpoints {
    Log { path: PathBuf, pattern: regex::Regex },
    Jsonl { path: PathBuf, step: String, resumable: Option<String>, weights: Option<String> },
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointsError {
    #[error("checkpoints.log.pattern: {0}")]
    Pattern(String),
    #[error("checkpoints.jsonl.file: {0}")]
    File(String),
    #[error("checkpoints: no source")]
    NoSource,
}

/// A line of a checkpoints file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("read a line that is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("read a checkpoint without a whole-number step at {0}")]
    NoStep(String),
}

impl CheckpointSpec {
    /// Checks the block; errors are (field, problem). `known` are the workflow's variables.
    pub(super) fn validate(&self, stages: &[&str], known: &[String]) -> Result<(), (String, String)> {
        let bad = |field: &str, problem: String| Err((format!("checkpoints.{field}"), problem));
        match (&self.log, &self.jsonl) {
            (Some(_), Some(_)) => bad("log", "give either `log` or `jsonl`, not both".into()),
            (None, None) => bad(
                "log",
                "say where checkpoints appear: `log: {stage, pattern}` or `jsonl: {file, step, path}`".into(),
            ),
            (Some(log), None) => {
                if !stages.contains(&log.stage.as_str()) {
                    return bad("log.stage", format!("no stage is called '{}'", one_line(&log.stage)));
                }
                let pattern =
                    compile(&log.pattern).map_err(|e| ("checkpoints.log.pattern".to_string(), e))?;
                if pattern.capture_names().flatten().all(|n| n != "path" && n != "weights") {
                    return bad(
                        "log.pattern",
                        "needs a `path` or a `weights` group (e.g. (?P<path>\\S+))".into(),
                    );
                }
                Ok(())
            }
            (None, Some(jsonl)) => {
                template::check(&jsonl.file, known).or_else(|e| bad("jsonl.file", e.to_string()))?;
                check_file(&jsonl.file).or_else(|e| bad("jsonl.file", e))?;
                let pointers = [
                    ("step", Some(&jsonl.step)),
                    ("path", jsonl.path.as_ref()),
                    ("weights", jsonl.weights.as_ref()),
                ];
                for (field, pointer) in pointers {
                    if let Some(pointer) = pointer
                        && !pointer.starts_with('/')
                    {
                        return bad(
                            &format!("jsonl.{field}"),
                            format!("'{}' is not a JSON pointer (e.g. /state_path)", one_line(pointer)),
                        );
                    }
                }
                if jsonl.path.is_none() && jsonl.weights.is_none() {
                    return bad("jsonl.path", "give the JSON pointer of a `path` or of `weights`".into());
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
    ) -> Result<ResolvedCheckpoints, CheckpointsError> {
        match (&self.log, &self.jsonl) {
            (Some(log), _) => Ok(ResolvedCheckpoints::Log {
                path: log_of(&log.stage).unwrap_or_else(|| PathBuf::from(&log.stage).with_extension("log")),
                pattern: compile(&log.pattern).map_err(CheckpointsError::Pattern)?,
            }),
            (None, Some(jsonl)) => Ok(ResolvedCheckpoints::Jsonl {
                path: resolve_run_file(&jsonl.file, vars).map_err(CheckpointsError::File)?,
                step: jsonl.step.clone(),
                resumable: jsonl.path.clone(),
                weights: jsonl.weights.clone(),
            }),
            (None, None) => Err(CheckpointsError::NoSource),
        }
    }
}

impl ResolvedCheckpoints {
    /// The file followed line by line.
    pub fn file(&self) -> &std::path::Path {
        match self {
            ResolvedCheckpoints::Log { path, .. } | ResolvedCheckpoints::Jsonl { path, .. } => path,
        }
    }

    /// The checkpoint in one line: `Ok(None)` for a line that names none (a log line that
    /// does not match, a blank line, a record without either path), an error for a JSONL line
    /// that cannot be read.
    pub fn read_line(&self, line: &str) -> Result<Option<FoundCheckpoint>, LineError> {
        let found = match self {
            ResolvedCheckpoints::Log { pattern, .. } => {
                let Some(caps) = pattern.captures(line) else { return Ok(None) };
                let text =
                    |name: &str| caps.name(name).map(|m| m.as_str().to_string()).filter(|s| !s.is_empty());
                let Some(step) = caps.name("step").and_then(|m| m.as_str().parse::<u64>().ok()) else {
                    return Err(LineError::NoStep(one_line(line)));
                };
                (step, text("path"), text("weights"))
            }
            ResolvedCheckpoints::Jsonl { step, resumable, weights, .. } => {
                if line.trim().is_empty() {
                    return Ok(None);
                }
                let record: serde_json::Value = serde_json::from_str(line)?;
                let text = |pointer: &Option<String>| {
                    pointer
                        .as_deref()
                        .and_then(|p| record.pointer(p))
                        .and_then(|v| v.as_str())
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                };
                let (path, weights) = (text(resumable), text(weights));
                if path.is_none() && weights.is_none() {
                    return Ok(None);
                }
                let Some(step) = record.pointer(step).and_then(as_count) else {
                    return Err(LineError::NoStep(step.clone()));
                };
                (step, path, weights)
            }
        };
        let (step, path, weights) = found;
        Ok(Some(FoundCheckpoint {
            step: step.min(i64::MAX as u64) as i64,
            path,
            weights,
            key: line_key(line),
        }))
    }
}

/// A line's key: the digest of its text, so the same line read again (after a restart, or by
/// another attempt) is recognised, whatever offset it is found at.
fn line_key(line: &str) -> String {
    sha2::Sha256::digest(line.trim_end().as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The resolved variable holding the step an attempt resumes from (its absence: from 0).
pub const RESUME_STEP: &str = "resume.step";
/// The resolved variable holding the path an attempt resumes from.
pub const RESUME_PATH: &str = "resume.path";

/// The variables a stage's `resume_args` may use: the workflow's and the resume point's.
pub fn with_resume_vars(known: &[String]) -> Vec<String> {
    let mut all = known.to_vec();
    all.extend([RESUME_STEP.to_string(), RESUME_PATH.to_string()]);
    all
}

/// The resume point among a run's resolved variables, if this attempt resumes; an error for a
/// path that could not be passed safely (it comes from a trainer's output and lands in argv).
pub fn resume_of(vars: &BTreeMap<String, String>) -> Result<Option<ResumePoint>, String> {
    let (Some(step), Some(path)) = (vars.get(RESUME_STEP), vars.get(RESUME_PATH)) else { return Ok(None) };
    let step = step.parse().map_err(|_| format!("step '{}' is not a number", one_line(step)))?;
    check_resume_path(path)?;
    Ok(Some(ResumePoint { step, path: path.clone() }))
}

/// Refuses a checkpoint path with what a shell or an argument parser would read as syntax.
pub fn check_resume_path(path: &str) -> Result<(), String> {
    let bad = |c: char| c.is_whitespace() || c.is_control() || "'\"`;|$&<>\\".contains(c);
    if path.is_empty() || path.chars().any(bad) {
        return Err(format!(
            "the checkpoint path '{}' is empty or holds whitespace, quotes, `;`, `|`, `$` or backquotes",
            one_line(path)
        ));
    }
    Ok(())
}

/// A run's params for an attempt that starts at `start`.
pub fn params_for(params: &RunParams, start: &Start) -> RunParams {
    let mut next = params.clone();
    next.resolved.remove(RESUME_STEP);
    next.resolved.remove(RESUME_PATH);
    if let Start::Resume(point) = start {
        next.resolved.insert(RESUME_STEP.into(), point.step.to_string());
        next.resolved.insert(RESUME_PATH.into(), point.path.clone());
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jsonl() -> ResolvedCheckpoints {
        let spec: CheckpointSpec = crate::yaml::from_str(
            "jsonl: {file: '{run_dir}/log/checkpoints.jsonl', step: /batch, path: /state_path, weights: /sampler_path}",
        )
        .unwrap();
        let vars = BTreeMap::from([("run_dir".to_string(), "/runs/r1".to_string())]);
        spec.resolve(&vars, |_| None).unwrap()
    }

    #[test]
    fn cookbook_lines_give_their_step_and_paths() {
        let source = jsonl();
        assert_eq!(source.file(), std::path::Path::new("/runs/r1/log/checkpoints.jsonl"));
        let both = source
            .read_line(r#"{"name": "000006", "batch": 6, "state_path": "tinker://a/weights/000006", "sampler_path": "tinker://a/sampler_weights/000006"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(both.step, 6);
        assert_eq!(both.path.as_deref(), Some("tinker://a/weights/000006"));
        assert_eq!(both.weights.as_deref(), Some("tinker://a/sampler_weights/000006"));
        let rolling =
            source.read_line(r#"{"name": "000008", "batch": 8, "state_path": "tinker://a/weights/r"}"#);
        assert_eq!(rolling.unwrap().unwrap().weights, None);
        assert!(source.read_line("").unwrap().is_none());
        assert!(source.read_line(r#"{"name": "x", "batch": 1}"#).unwrap().is_none());
        assert!(matches!(source.read_line("{not json"), Err(LineError::NotJson(_))));
        assert!(matches!(source.read_line(r#"{"state_path": "tinker://a"}"#), Err(LineError::NoStep(_))));
    }

    #[test]
    fn the_same_line_has_the_same_key() {
        let source = jsonl();
        let line = r#"{"batch": 2, "state_path": "tinker://a/weights/2"}"#;
        let first = source.read_line(line).unwrap().unwrap();
        assert_eq!(first.key, source.read_line(&format!("{line}\r")).unwrap().unwrap().key);
        let other =
            source.read_line(r#"{"batch": 4, "state_path": "tinker://a/weights/4"}"#).unwrap().unwrap();
        assert_ne!(first.key, other.key);
    }

    #[test]
    fn log_patterns_need_a_step_and_a_path() {
        let check = |yaml: &str| {
            let spec: CheckpointSpec = crate::yaml::from_str(yaml).unwrap();
            spec.validate(&["trainer"], &[]).map_err(|(field, problem)| format!("{field}: {problem}"))
        };
        assert!(check(r"log: {stage: trainer, pattern: 'step (?P<step>\d+): (?P<weights>\S+)'}").is_ok());
        assert!(
            check(r"log: {stage: trainer, pattern: 'step (?P<step>\d+)'}").unwrap_err().contains("`path`")
        );
        assert!(
            check(r"log: {stage: other, pattern: '(?P<step>\d+) (?P<path>\S+)'}")
                .unwrap_err()
                .contains("no stage")
        );
        assert!(
            check("jsonl: {file: '../x.jsonl', step: /batch, path: /state_path}").unwrap_err().contains("..")
        );
        assert!(
            check("jsonl: {file: 'x.jsonl', step: batch, path: /state_path}")
                .unwrap_err()
                .contains("JSON pointer")
        );
        assert!(check("{}").is_err());
    }

    #[test]
    fn a_resume_path_unsafe_for_argv_is_refused() {
        let vars = |path: &str| {
            BTreeMap::from([
                (RESUME_STEP.to_string(), "6".to_string()),
                (RESUME_PATH.to_string(), path.to_string()),
            ])
        };
        let point = resume_of(&vars("tinker://a/weights/000006")).unwrap().unwrap();
        assert_eq!((point.step, point.path.as_str()), (6, "tinker://a/weights/000006"));
        for bad in ["", "tinker://a b", "x;rm", "x|y", "$(id)", "`id`", "a'b", "a\"b", "a\nb"] {
            assert!(resume_of(&vars(bad)).is_err(), "{bad:?} reached argv");
        }
        assert_eq!(resume_of(&BTreeMap::new()), Ok(None), "no resume point: a fresh start");
    }

    #[test]
    fn atropos_log_lines_record_weights() {
        let spec: CheckpointSpec = crate::yaml::from_str(
            r"log: {stage: trainer, pattern: 'Sampling client updated: (?P<weights>tinker://\S+/step_(?P<step>\d+))'}",
        )
        .unwrap();
        let source = spec.resolve(&BTreeMap::new(), |_| Some(PathBuf::from("/runs/r1/trainer.log"))).unwrap();
        let found =
            source.read_line("Sampling client updated: tinker://x/sampler_weights/step_12").unwrap().unwrap();
        assert_eq!(
            (found.step, found.path, found.weights.as_deref()),
            (12, None, Some("tinker://x/sampler_weights/step_12"))
        );
        assert!(source.read_line("Step 12/100").unwrap().is_none());
    }
}
