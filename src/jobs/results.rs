//! Inference-test results, read from the JSONL the environment's `process` mode writes (one
//! line per group, i.e. per step, with a `scores` array). Key names follow the reference tool.

use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub step: usize,
    pub completions: usize,
    pub correct: usize,
    pub scores: Vec<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelResult {
    pub model: String,
    pub steps_tested: usize,
    pub total_completions: usize,
    /// Completions with a score above 0.
    pub correct_completions: usize,
    pub accuracy: f64,
    pub steps_with_correct: usize,
    pub step_success_rate: f64,
    pub steps: Vec<StepResult>,
    pub output_file: String,
    pub log_path: Option<String>,
    /// How the process ended (`code 0`, `signal 9 (SIGKILL)`).
    pub exit: Option<String>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub models_tested: usize,
    pub models_succeeded: usize,
    pub best_model: Option<String>,
    pub average_accuracy: f64,
    pub environment_working: bool,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Never fails: what can't be read becomes the result's `error`. A last line cut short (the
/// process was killed mid-write) is ignored; other unreadable lines are counted in the error.
pub fn read_model_result(model: &str, jsonl: &Path) -> ModelResult {
    let mut result = ModelResult {
        model: model.to_string(),
        output_file: jsonl.display().to_string(),
        ..Default::default()
    };
    let text = match std::fs::read(jsonl) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(err) => {
            result.error = Some(format!("no results file {}: {err}", jsonl.display()));
            return result;
        }
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut unreadable = 0;
    for (i, line) in lines.iter().enumerate() {
        let scores = serde_json::from_str::<serde_json::Value>(line).ok().and_then(|v| {
            v.get("scores")?
                .as_array()
                .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect::<Vec<f64>>())
        });
        let Some(scores) = scores else {
            if i + 1 < lines.len() {
                unreadable += 1;
            }
            continue;
        };
        let correct = scores.iter().filter(|s| **s > 0.0).count();
        result.steps_tested += 1;
        result.total_completions += scores.len();
        result.correct_completions += correct;
        result.steps_with_correct += usize::from(correct > 0);
        result.steps.push(StepResult {
            step: result.steps_tested,
            completions: scores.len(),
            correct,
            scores,
        });
    }
    if result.total_completions > 0 {
        result.accuracy = round3(result.correct_completions as f64 / result.total_completions as f64);
    }
    if result.steps_tested > 0 {
        result.step_success_rate = round3(result.steps_with_correct as f64 / result.steps_tested as f64);
    }
    if unreadable > 0 {
        result.error = Some(format!("{unreadable} unreadable lines in {}", jsonl.display()));
    }
    result
}

/// A model succeeded when it ran clean and produced at least one step.
fn succeeded(result: &ModelResult) -> bool {
    result.error.is_none() && result.steps_tested > 0
}

pub fn summarize(results: &[ModelResult]) -> Summary {
    let ok: Vec<&ModelResult> = results.iter().filter(|r| succeeded(r)).collect();
    let best = ok.iter().fold(None::<&ModelResult>, |best, r| match best {
        Some(b) if b.accuracy >= r.accuracy => Some(b),
        _ => Some(r),
    });
    let average = if ok.is_empty() {
        0.0
    } else {
        round3(ok.iter().map(|r| r.accuracy).sum::<f64>() / ok.len() as f64)
    };
    Summary {
        models_tested: results.len(),
        models_succeeded: ok.len(),
        best_model: best.map(|r| r.model.clone()),
        average_accuracy: average,
        // The environment works if some model got through it and scored at least once.
        environment_working: ok.iter().any(|r| r.correct_completions > 0),
    }
}

/// The last `lines` lines of a log, for an error message.
pub fn stderr_tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read(log).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn results_count_steps_completions_and_correct_ones() {
        let dir = tempfile::tempdir().unwrap();
        let line =
            r#"{"tokens": [[1, 2]], "masks": [[-100, 2]], "scores": [1.0, 0.0, 1.0, 0.0], "messages": null}"#;
        let zero = r#"{"scores": [0.0, -1.0, 0.0, 0.0]}"#;
        let path = write(dir.path(), "m.jsonl", &format!("{line}\n{zero}\n{{\"scores\": [1.0, 1"));
        let r = read_model_result("m", &path);
        assert_eq!((r.steps_tested, r.total_completions, r.correct_completions), (2, 8, 2));
        assert_eq!((r.accuracy, r.steps_with_correct, r.step_success_rate), (0.25, 1, 0.5));
        assert_eq!(r.error, None, "a cut-off last line is not an error");
        assert_eq!(r.steps[0].scores, vec![1.0, 0.0, 1.0, 0.0]);
    }

    #[test]
    fn missing_and_malformed_files_are_errors_not_failures() {
        let dir = tempfile::tempdir().unwrap();
        let r = read_model_result("m", &dir.path().join("none.jsonl"));
        assert!(r.error.unwrap().starts_with("no results file"));
        let path = write(dir.path(), "bad.jsonl", "garbage\n{\"scores\": [1.0]}\n");
        let r = read_model_result("m", &path);
        assert_eq!(r.steps_tested, 1);
        assert!(r.error.unwrap().starts_with("1 unreadable lines"));
    }

    #[test]
    fn the_summary_picks_the_best_working_model() {
        let ok = |model: &str, accuracy: f64, correct: usize| ModelResult {
            model: model.into(),
            steps_tested: 1,
            accuracy,
            correct_completions: correct,
            ..Default::default()
        };
        let broken = ModelResult { model: "c".into(), error: Some("timed out".into()), ..Default::default() };
        let s = summarize(&[ok("a", 0.5, 2), ok("b", 0.75, 3), broken]);
        assert_eq!((s.models_tested, s.models_succeeded), (3, 2));
        assert_eq!(s.best_model.as_deref(), Some("b"));
        assert_eq!(s.average_accuracy, 0.625);
        assert!(s.environment_working);
        assert!(!summarize(&[ok("z", 0.0, 0)]).environment_working);
    }
}
