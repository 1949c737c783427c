//! Checking a workflow's `checkpoints:` block (its data is `model::workflow::checkpoints`),
//! resolving it and reading one line; the reconciler follows the source and records the rows.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sha2::Digest;

use super::progress::{as_count, check_file, compile, resolve_run_file};
use super::template;
pub use crate::model::workflow::CheckpointSpec;
use crate::model::{FoundCheckpoint, ResumePoint, Run, RunParams, Start};
use crate::text::one_line;

/// Where a run's checkpoints are read, with every placeholder filled in.
#[derive(Clone, Debug)]
pub enum ResolvedCheckpoints {
    Log {
        path: PathBuf,
        pattern: regex::Regex,
    },
    Jsonl {
        path: PathBuf,
        step: String,
        resumable: Option<String>,
        weights: Option<String>,
        /// The fields of the line that makes the trainer resume from another run's checkpoint.
        resume_line: Option<BTreeMap<String, String>>,
    },
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
                if jsonl.resume_line.is_some() && jsonl.path.is_none() {
                    return bad(
                        "jsonl.resume_line",
                        "needs `path`, the pointer a resumable checkpoint's path is written at".into(),
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
                resume_line: jsonl.resume_line.clone(),
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

impl ResolvedCheckpoints {
    /// The line that makes the trainer resume from `point`, a checkpoint this run did not
    /// write: None unless the source says how (`jsonl.resume_line`).
    pub fn resume_line(&self, point: &ResumePoint) -> Option<String> {
        let ResolvedCheckpoints::Jsonl {
            step, resumable: Some(resumable), resume_line: Some(fields), ..
        } = self
        else {
            return None;
        };
        let mut record = serde_json::Value::Object(
            fields.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect(),
        );
        set_at(&mut record, step, serde_json::Value::from(point.step));
        set_at(&mut record, resumable, serde_json::Value::String(point.path.clone()));
        Some(record.to_string())
    }

    /// Appends [`Self::resume_line`] for `point` to the run's file, unless it is its last line
    /// already (a repeat after a crash adds nothing): true when the source says how and the
    /// line is there. The file is never followed through a symlink.
    pub fn append_resume_line(&self, point: &ResumePoint) -> std::io::Result<bool> {
        use std::io::{Read, Seek, SeekFrom, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let Some(line) = self.resume_line(point) else { return Ok(false) };
        let path = self.file();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(path)?;
        // Only the tail is read: the last line is all that counts.
        let len = file.metadata()?.len();
        let from = len.saturating_sub(line.len() as u64 + 2);
        file.seek(SeekFrom::Start(from))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let tail = String::from_utf8_lossy(&bytes);
        let last = tail.trim_end_matches('\n').rsplit('\n').next().unwrap_or("");
        if last == line {
            return Ok(true);
        }
        let lead = if tail.is_empty() || tail.ends_with('\n') { "" } else { "\n" };
        file.write_all(format!("{lead}{line}\n").as_bytes())?;
        file.sync_data()?;
        Ok(true)
    }
}

/// Appends the line that makes `run`'s trainer resume from `point`, where its workflow's
/// checkpoints say how (`checkpoints.jsonl.resume_line`); nothing otherwise.
pub async fn resume_line_for(run: &Run, point: &ResumePoint) -> Result<(), String> {
    let Some(spec) = &run.spec.checkpoints else { return Ok(()) };
    let source = spec.resolve(&run.params.resolved, |_| None).map_err(|err| err.to_string())?;
    let point = point.clone();
    let file = source.file().display().to_string();
    let appended = tokio::task::spawn_blocking(move || source.append_resume_line(&point)).await;
    match appended {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(format!("cannot write {file}: {err}")),
        Err(err) => Err(format!("cannot write {file}: {err}")),
    }
}

/// Sets `value` at the JSON pointer `pointer` in `record`, making the objects on the way.
fn set_at(record: &mut serde_json::Value, pointer: &str, value: serde_json::Value) {
    let tokens: Vec<String> =
        pointer.split('/').skip(1).map(|t| t.replace("~1", "/").replace("~0", "~")).collect();
    let Some((last, path)) = tokens.split_last() else { return };
    let mut at = record;
    for token in path {
        if !at.get(token).is_some_and(serde_json::Value::is_object) {
            at[token.as_str()] = serde_json::Value::Object(serde_json::Map::new());
        }
        at = &mut at[token.as_str()];
    }
    at[last.as_str()] = value;
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

    fn cookbook_in(dir: &std::path::Path) -> ResolvedCheckpoints {
        let spec: CheckpointSpec = crate::yaml::from_str(
            "jsonl: {file: '{run_dir}/log/checkpoints.jsonl', step: /batch, path: /state_path, resume_line: {name: pbt}}",
        )
        .unwrap();
        let vars = BTreeMap::from([("run_dir".to_string(), dir.display().to_string())]);
        spec.resolve(&vars, |_| None).unwrap()
    }

    #[test]
    fn a_resume_line_is_a_record_the_source_reads_back_at_the_donors_checkpoint() {
        let source = cookbook_in(std::path::Path::new("/runs/r1"));
        let point = ResumePoint { step: 40, path: "tinker://donor/weights/000040".into() };
        let line = source.resume_line(&point).unwrap();
        let record: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            record,
            serde_json::json!({"name": "pbt", "batch": 40, "state_path": "tinker://donor/weights/000040"})
        );
        let read = source.read_line(&line).unwrap().unwrap();
        assert_eq!((read.step, read.path), (40, Some(point.path.clone())));
        // Nested pointers make their objects; a source that does not say how has no line.
        let mut nested = serde_json::json!({"name": "x"});
        set_at(&mut nested, "/loop/batch", serde_json::json!(3));
        set_at(&mut nested, "/name/a~1b", serde_json::json!(1));
        assert_eq!(nested, serde_json::json!({"name": {"a/b": 1}, "loop": {"batch": 3}}));
        assert_eq!(jsonl().resume_line(&point), None);
    }

    #[test]
    fn the_resume_line_is_appended_once_after_the_trainers_own_lines() {
        let dir = tempfile::tempdir().unwrap();
        let source = cookbook_in(dir.path());
        let point = ResumePoint { step: 6, path: "tinker://donor/weights/000006".into() };
        let file = dir.path().join("log/checkpoints.jsonl");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        // The trainer's own last line has no newline yet.
        std::fs::write(
            &file,
            r#"{"name": "000004", "batch": 4, "state_path": "tinker://me/weights/000004"}"#,
        )
        .unwrap();
        assert!(source.append_resume_line(&point).unwrap());
        assert!(source.append_resume_line(&point).unwrap(), "a repeat after a crash adds nothing");
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(source.read_line(lines[1]).unwrap().unwrap().path, Some(point.path.clone()));
        // Never through a symlink.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "").unwrap();
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
        assert!(source.append_resume_line(&point).is_err());
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "");
        // A source that does not say how writes nothing.
        assert!(!jsonl().append_resume_line(&point).unwrap());
    }

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
