//! Inference-test results read from the groups file that atroposlib's `env.py process` writes
//! (`--env.data_path_to_save_groups`): one JSON object per line, one line per scored group (one
//! step), each with a `scores` array holding one score per completion.
//!
//! The figures and their JSON key names follow the reference tool's inference test so results stay
//! comparable with it: a completion is correct when its score is above zero, `accuracy` is correct
//! over total completions, `step_success_rate` is the share of steps with at least one correct
//! completion, and the summary calls an environment working when any model produced groups.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// How far back `stderr_tail` reads at most, so a log made of one huge line can't exhaust memory.
const TAIL_MAX_BYTES: u64 = 64 * 1024;

/// Why a groups file could not be turned into a clean result. Only ever stored as text in
/// `ModelResult::error`: reading results never fails, it reports.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("output file not created: {path}")]
    Missing { path: String },
    #[error("cannot read output file {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{count} malformed line(s) in {path} (first at line {line}: {reason})")]
    Malformed { path: String, count: u64, line: u64, reason: String },
}

/// One step (one scored group) of an inference test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    /// 1-based, in file order.
    pub step: u64,
    /// Number of scores in the group.
    pub completions: u64,
    /// Scores above zero.
    pub correct: u64,
    /// The group's scores as written; `None` stands for a score that was not a finite number
    /// (Python writes NaN/Infinity, which JSON cannot carry back out).
    pub scores: Vec<Option<f64>>,
    /// Mean of the finite scores; `None` when there are none.
    #[serde(default)]
    pub mean_score: Option<f64>,
}

/// The outcome of testing one model against an environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResult {
    pub model: String,
    /// The groups file (the reference calls it `output_file`).
    #[serde(rename = "output_file", alias = "output_path")]
    pub output_path: String,
    /// The process's log, when the caller kept one (the reference's `log_file`).
    #[serde(rename = "log_file", alias = "log_path", default, skip_serializing_if = "Option::is_none")]
    pub log_path: Option<String>,
    /// Groups read from the file.
    pub steps_tested: u64,
    pub total_completions: u64,
    /// Completions scored above zero.
    pub correct_completions: u64,
    /// `correct_completions / total_completions`, 0 when there were no completions. Kept at full
    /// precision (the reference rounds to 3 places for display only).
    pub accuracy: f64,
    /// Steps with at least one correct completion.
    pub steps_with_correct: u64,
    /// `steps_with_correct / steps_tested`, 0 when no step was read.
    pub step_success_rate: f64,
    /// A verifiers environment's figure: the mean reward over every rollout `vf-eval` scored
    /// (its steps are its examples, their scores the rewards). `None` for an Atropos test, whose
    /// figure is `accuracy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<f64>,
    /// Per-step detail, in file order (the reference's `steps`).
    #[serde(default)]
    pub steps: Vec<StepResult>,
    /// Lines that were not a JSON object with a numeric `scores` array (a cut-off last line is not
    /// counted here: it is expected when the process is killed, and only noted).
    #[serde(default)]
    pub malformed_lines: u64,
    /// Things worth knowing that are not failures (a cut-off last line, non-finite scores, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Why this result can't be trusted; `None` when the file read cleanly.
    #[serde(default)]
    pub error: Option<String>,
    /// How the process ended (exit code, signal, timeout), filled in by whoever ran it.
    #[serde(default)]
    pub exit: Option<String>,
}

impl ModelResult {
    /// An empty result for `model`, for callers that must report a model whose test never got as far
    /// as writing groups (they then set `error`/`exit`).
    pub fn new(model: &str, output_path: &Path) -> Self {
        ModelResult {
            model: model.to_string(),
            output_path: output_path.display().to_string(),
            log_path: None,
            steps_tested: 0,
            total_completions: 0,
            correct_completions: 0,
            accuracy: 0.0,
            steps_with_correct: 0,
            step_success_rate: 0.0,
            reward: None,
            steps: Vec::new(),
            malformed_lines: 0,
            notes: Vec::new(),
            error: None,
            exit: None,
        }
    }

    /// Whether this model counts as having run the environment: it read cleanly and produced groups.
    pub fn succeeded(&self) -> bool {
        self.error.is_none() && self.steps_tested > 0
    }

    /// The figure a test judges this model by: its mean reward when it has one (a verifiers
    /// test), else its accuracy.
    pub fn score(&self) -> f64 {
        self.reward.unwrap_or(self.accuracy)
    }

    /// Masks `secret` in every free-text field, for results built from command lines or logs.
    pub fn redact(&mut self, secret: &str) {
        let mask = |s: &mut String| *s = crate::secrets::redact_text(s, secret);
        mask(&mut self.model);
        mask(&mut self.output_path);
        self.notes.iter_mut().for_each(mask);
        for field in [&mut self.log_path, &mut self.error, &mut self.exit] {
            if let Some(s) = field.as_mut() {
                mask(s);
            }
        }
    }

    pub(super) fn add_step(&mut self, scores: Vec<Option<f64>>) {
        let completions = scores.len() as u64;
        // Non-finite scores (None) never count as correct: a NaN/inf score is a verifier bug.
        let correct = scores.iter().filter(|s| s.is_some_and(|v| v > 0.0)).count() as u64;
        let finite: Vec<f64> = scores.iter().flatten().copied().collect();
        let mean_score = (!finite.is_empty()).then(|| finite.iter().sum::<f64>() / finite.len() as f64);
        self.steps_tested += 1;
        self.total_completions += completions;
        self.correct_completions += correct;
        if correct > 0 {
            self.steps_with_correct += 1;
        }
        self.steps.push(StepResult { step: self.steps_tested, completions, correct, scores, mean_score });
    }

    pub(super) fn finish_rates(&mut self) {
        self.accuracy = ratio(self.correct_completions, self.total_completions);
        self.step_success_rate = ratio(self.steps_with_correct, self.steps_tested);
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

/// The part of a group line we need; everything else (tokens, masks, messages) is skipped unparsed.
#[derive(Deserialize)]
struct GroupLine {
    #[serde(default)]
    scores: Option<Vec<Option<f64>>>,
}

/// Parses one group line into its scores. A missing or null `scores` is an empty group, as the
/// reference treats it; anything that is not an object with a numeric array is an error.
fn parse_group(line: &[u8]) -> Result<Vec<Option<f64>>, String> {
    // serde would also accept a JSON array as a struct; a group is always an object.
    if line.first() != Some(&b'{') {
        return Err("not a JSON object".to_string());
    }
    // atroposlib's writer is Python's json, which emits NaN/Infinity for non-finite floats:
    // those read as "no score" rather than a malformed line.
    crate::pyjson::from_slice::<GroupLine>(line)
        .map(|group| group.scores.unwrap_or_default())
        .map_err(|e| e.to_string())
}

/// How many complete lines `path` holds (0 when it does not exist yet): the groups a running
/// test has written so far.
pub fn lines_in(path: &Path) -> usize {
    std::fs::read(path).map(|b| b.iter().filter(|c| **c == b'\n').count()).unwrap_or(0)
}

/// Reads the groups file a test of `model` wrote. Never fails: a missing or unreadable file, or
/// malformed lines, end up in `error` alongside whatever could be read.
pub fn read_model_result(model: &str, jsonl: &Path) -> ModelResult {
    let mut result = ModelResult::new(model, jsonl);
    if let Err(err) = read_groups(&mut result, jsonl) {
        result.error = Some(err.to_string());
    }
    result.finish_rates();
    let nonfinite = result.steps.iter().flat_map(|s| &s.scores).filter(|s| s.is_none()).count();
    if nonfinite > 0 {
        result.notes.push(format!("{nonfinite} score(s) were not finite numbers and count as incorrect"));
    }
    if result.error.is_none() && result.steps_tested == 0 {
        result.notes.push("no groups were written".to_string());
    }
    result
}

fn read_groups(result: &mut ModelResult, jsonl: &Path) -> Result<(), ReadError> {
    let path = jsonl.display().to_string();
    let file = File::open(jsonl).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ReadError::Missing { path: path.clone() },
        _ => ReadError::Io { path: path.clone(), source },
    })?;
    let mut reader = BufReader::new(file);
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut first_bad: Option<(u64, String)> = None;
    loop {
        buf.clear();
        let read = reader
            .read_until(b'\n', &mut buf)
            .map_err(|source| ReadError::Io { path: path.clone(), source })?;
        if read == 0 {
            break;
        }
        line_no += 1;
        // The writer ends every record with a newline, so only an unterminated last line can be a
        // record cut off by a kill (or still being written).
        let terminated = buf.last() == Some(&b'\n');
        let line = buf.trim_ascii();
        if line.is_empty() {
            continue;
        }
        match parse_group(line) {
            Ok(scores) => result.add_step(scores),
            Err(reason) if !terminated => {
                result.notes.push(format!("ignored incomplete last line {line_no} ({reason})"));
            }
            Err(reason) => {
                result.malformed_lines += 1;
                first_bad.get_or_insert((line_no, reason));
            }
        }
    }
    match first_bad {
        Some((line, reason)) => {
            Err(ReadError::Malformed { path, count: result.malformed_lines, line, reason })
        }
        None => Ok(()),
    }
}

/// Totals over the models of one inference test (key names as in the reference's summary).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub models_tested: usize,
    /// Models that read cleanly and produced at least one group.
    pub models_succeeded: usize,
    /// The succeeded model with the highest accuracy; the first one on ties.
    pub best_model: Option<String>,
    /// Mean accuracy over the succeeded models, 0 when none succeeded.
    #[serde(rename = "avg_accuracy", alias = "average_accuracy")]
    pub average_accuracy: f64,
    /// At least one model succeeded. As in the reference this does not require a correct answer:
    /// the test checks that the environment loads, prompts, parses and scores; zero accuracy from
    /// one model is a fact about the model. `models_with_correct` tells the two apart.
    pub environment_working: bool,
    /// Succeeded models with at least one correct completion.
    #[serde(default)]
    pub models_with_correct: usize,
    /// Mean of the succeeded models' mean rewards, for a verifiers test (whose best model is
    /// the one with the highest reward); absent for an Atropos test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avg_reward: Option<f64>,
}

pub fn summarize(results: &[ModelResult]) -> Summary {
    let succeeded: Vec<&ModelResult> = results.iter().filter(|r| r.succeeded()).collect();
    let mut best: Option<&ModelResult> = None;
    for r in &succeeded {
        // Strictly greater keeps the first of equals.
        if best.is_none_or(|b| r.score() > b.score()) {
            best = Some(r);
        }
    }
    let average_accuracy = if succeeded.is_empty() {
        0.0
    } else {
        succeeded.iter().map(|r| r.accuracy).sum::<f64>() / succeeded.len() as f64
    };
    let rewards: Vec<f64> = succeeded.iter().filter_map(|r| r.reward).collect();
    let avg_reward = (!rewards.is_empty()).then(|| rewards.iter().sum::<f64>() / rewards.len() as f64);
    Summary {
        models_tested: results.len(),
        models_succeeded: succeeded.len(),
        best_model: best.map(|r| r.model.clone()),
        average_accuracy,
        environment_working: !succeeded.is_empty(),
        models_with_correct: succeeded.iter().filter(|r| r.correct_completions > 0).count(),
        avg_reward,
    }
}

/// The last `lines` lines of a log, decoded lossily; empty when the log can't be read. Reads at most
/// the last 64 KiB (`logs::tail`), so the first line returned may be cut short.
pub fn stderr_tail(log: &Path, lines: usize) -> String {
    if lines == 0 {
        return String::new();
    }
    crate::logs::tail(log, lines, TAIL_MAX_BYTES)
        .map(|page| page.text.lines().collect::<Vec<_>>().join("\n"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(dir: &tempfile::TempDir, name: &str, content: &[u8]) -> std::path::PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    /// A line shaped like the ones atroposlib 0.4.0's jsonlines writer produced for the arith test
    /// environment against the stub server (checked against a real run): the same keys in the same
    /// order, `", "`/`": "` separators, non-ASCII kept.
    fn atropos_line(scores: &[f64]) -> String {
        let n = scores.len();
        let prompt = [0u32, 7805, 270, 29568, 3417, 16, 128803, 3085, 344, 223, 1328, 33, 128804];
        let completion = |i: usize| [671u32, 3287, 344, 565, 2170 + i as u32 % 2, 16, 1];
        let tokens: Vec<Vec<u32>> = (0..n).map(|i| [&prompt[..], &completion(i)[..]].concat()).collect();
        let masks: Vec<Vec<i64>> = (0..n)
            .map(|i| {
                let hidden = std::iter::repeat_n(-100i64, prompt.len());
                hidden.chain(completion(i).iter().map(|&t| i64::from(t))).collect()
            })
            .collect();
        let messages: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                serde_json::json!([
                    {"role": "system",
                     "content": "Answer the arithmetic question. End your reply with the integer answer."},
                    {"role": "user", "content": "What is 50 - 98? \"quoted\" — ünïcode"},
                    {"role": "assistant", "content": format!("The answer is {}.", -48 + (i % 2) as i64)}
                ])
            })
            .collect();
        let logprobs: Vec<Vec<f64>> = (0..n)
            .map(|_| std::iter::repeat_n(1.0, prompt.len()).chain(std::iter::repeat_n(-0.25, 7)).collect())
            .collect();
        let fields = [
            ("tokens", serde_json::json!(tokens)),
            ("masks", serde_json::json!(masks)),
            ("scores", serde_json::json!(scores)),
            ("messages", serde_json::json!(messages)),
            ("inference_logprobs", serde_json::json!(logprobs)),
            ("ref_logprobs", serde_json::Value::Null),
            ("overrides", serde_json::Value::Null),
            ("group_overrides", serde_json::Value::Null),
            ("distill_token_ids", serde_json::Value::Null),
            ("distill_logprobs", serde_json::Value::Null),
        ];
        // Built field by field to keep the writer's key order; spaced as Python's json.dumps.
        let body: Vec<String> =
            fields.iter().map(|(k, v)| format!("\"{k}\":{}", serde_json::to_string(v).unwrap())).collect();
        python_spacing(&format!("{{{}}}", body.join(",")))
    }

    /// Re-spaces compact JSON as Python's json.dumps does (", " and ": " outside strings).
    fn python_spacing(compact: &str) -> String {
        let (mut out, mut in_string, mut escaped) = (String::new(), false, false);
        for c in compact.chars() {
            out.push(c);
            if in_string {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => in_string = false,
                    _ => {}
                }
            } else if c == '"' {
                in_string = true;
            } else if c == ',' || c == ':' {
                out.push(' ');
            }
        }
        out
    }

    #[test]
    fn atropos_shaped_file_gives_the_reference_figures() {
        let dir = tempfile::tempdir().unwrap();
        let body =
            format!("{}\n{}\n", atropos_line(&[1.0, 0.0, 1.0, 0.0]), atropos_line(&[1.0, 0.0, 1.0, 0.0]));
        assert!(
            body.contains("\"scores\": [1.0, 0.0, 1.0, 0.0]"),
            "fixture must look like the writer's: {body}"
        );
        let path = write(&dir, "groups.jsonl", body.as_bytes());
        let r = read_model_result("stub", &path);
        assert_eq!(r.error, None);
        assert_eq!((r.steps_tested, r.total_completions, r.correct_completions), (2, 8, 4));
        assert_eq!(r.accuracy, 0.5);
        assert_eq!((r.steps_with_correct, r.step_success_rate), (2, 1.0));
        assert_eq!(r.steps[1].step, 2);
        assert_eq!(r.steps[0].scores, vec![Some(1.0), Some(0.0), Some(1.0), Some(0.0)]);
        assert_eq!(r.steps[0].mean_score, Some(0.5));
        assert_eq!(r.output_path, path.display().to_string());
        assert!(r.notes.is_empty(), "{:?}", r.notes);

        // The serialized keys are the reference's.
        let json = serde_json::to_value(&r).unwrap();
        for key in [
            "model",
            "output_file",
            "steps",
            "steps_tested",
            "total_completions",
            "correct_completions",
            "accuracy",
            "steps_with_correct",
            "step_success_rate",
            "error",
        ] {
            assert!(json.get(key).is_some(), "missing key {key}");
        }
        for key in ["step", "completions", "correct", "scores"] {
            assert!(json["steps"][0].get(key).is_some(), "missing step key {key}");
        }
        let back: ModelResult = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn empty_file_is_no_steps_without_error() {
        let dir = tempfile::tempdir().unwrap();
        let r = read_model_result("m", &write(&dir, "g.jsonl", b""));
        assert_eq!(r.error, None);
        assert_eq!((r.steps_tested, r.total_completions, r.accuracy, r.step_success_rate), (0, 0, 0.0, 0.0));
        assert!(!r.succeeded());
        assert_eq!(r.notes, vec!["no groups were written".to_string()]);
        // Blank lines alone are still an empty file.
        let r = read_model_result("m", &write(&dir, "b.jsonl", b"\n  \n\n"));
        assert_eq!((r.error, r.steps_tested), (None, 0));
    }

    #[test]
    fn missing_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("never.jsonl");
        let r = read_model_result("m", &path);
        assert_eq!(r.error, Some(format!("output file not created: {}", path.display())));
        assert_eq!((r.steps_tested, r.accuracy), (0, 0.0));
        assert!(!r.succeeded());
    }

    #[test]
    fn unreadable_path_is_an_error() {
        // A directory opens on Linux but can't be read as a file.
        let dir = tempfile::tempdir().unwrap();
        let r = read_model_result("m", dir.path());
        let error = r.error.expect("a directory is not a groups file");
        assert!(error.starts_with("cannot read output file"), "{error}");
    }

    #[test]
    fn truncated_last_line_is_noted_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let full = atropos_line(&[1.0, 0.0]);
        let cut = &atropos_line(&[1.0, 1.0])[..40];
        let path = write(&dir, "g.jsonl", format!("{full}\n{cut}").as_bytes());
        let r = read_model_result("m", &path);
        assert_eq!(r.error, None);
        assert_eq!((r.steps_tested, r.malformed_lines, r.correct_completions), (1, 0, 1));
        assert_eq!(r.notes.len(), 1);
        assert!(r.notes[0].starts_with("ignored incomplete last line 2"), "{:?}", r.notes);
        assert!(r.succeeded());

        // A complete record that only lacks its newline still counts.
        let path = write(&dir, "h.jsonl", format!("{full}\n{full}").as_bytes());
        let r = read_model_result("m", &path);
        assert_eq!((r.error, r.steps_tested), (None, 2));
    }

    #[test]
    fn malformed_middle_lines_are_counted_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let good = atropos_line(&[1.0, 0.0]);
        let body =
            format!("{good}\n{{\"scores\": [1.0, \n{good}\n[1.0]\n{{\"scores\": [\"yes\"]}}\n{good}\n");
        let r = read_model_result("m", &write(&dir, "g.jsonl", body.as_bytes()));
        assert_eq!((r.steps_tested, r.malformed_lines, r.total_completions), (3, 3, 6));
        let error = r.error.clone().expect("malformed lines are an error");
        assert!(error.starts_with("3 malformed line(s) in "), "{error}");
        assert!(error.contains("first at line 2"), "{error}");
        assert!(!r.succeeded());
        // Stray bytes: inside a field we skip they don't matter; where a value belongs they make the
        // line malformed. Neither panics.
        let mut bytes = format!("{good}\n{{\"scores\": [1.0], \"x\": \"").into_bytes();
        bytes.extend_from_slice(&[0xff, 0xfe]);
        bytes.extend_from_slice(b"\"}\n{\"scores\": [1.0], \"x\": ");
        bytes.extend_from_slice(&[0xff, 0xfe]);
        bytes.extend_from_slice(format!("}}\n{good}\n").as_bytes());
        let r = read_model_result("m", &write(&dir, "u.jsonl", &bytes));
        assert_eq!((r.steps_tested, r.malformed_lines), (3, 1));
        assert!(r.error.unwrap().contains("first at line 3"));
    }

    #[test]
    fn all_zero_scores_read_cleanly_with_zero_accuracy() {
        let dir = tempfile::tempdir().unwrap();
        let body = format!("{}\n{}\n", atropos_line(&[0.0, 0.0, 0.0]), atropos_line(&[-1.0, 0.0, 0.0]));
        let r = read_model_result("m", &write(&dir, "g.jsonl", body.as_bytes()));
        assert_eq!(r.error, None);
        assert_eq!((r.steps_tested, r.total_completions, r.correct_completions), (2, 6, 0));
        assert_eq!((r.accuracy, r.steps_with_correct, r.step_success_rate), (0.0, 0, 0.0));
        assert!(r.succeeded());
    }

    #[test]
    fn step_success_rate_counts_steps_with_any_correct() {
        let dir = tempfile::tempdir().unwrap();
        let body =
            [atropos_line(&[0.0, 0.0]), atropos_line(&[0.0, 0.5]), atropos_line(&[0.0, 0.0])].join("\n");
        let r = read_model_result("m", &write(&dir, "g.jsonl", format!("{body}\n").as_bytes()));
        assert_eq!((r.steps_with_correct, r.steps_tested), (1, 3));
        assert!((r.step_success_rate - 1.0 / 3.0).abs() < 1e-12);
        assert!((r.accuracy - 1.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn python_nonfinite_scores_are_read_as_missing() {
        let dir = tempfile::tempdir().unwrap();
        let body = "{\"scores\": [NaN, Infinity, -Infinity, 1.0], \"note\": \"NaN stays in strings\"}\n\
                    {\"tokens\": [[1]], \"masks\": [[1]]}\n";
        let r = read_model_result("m", &write(&dir, "g.jsonl", body.as_bytes()));
        assert_eq!(r.error, None);
        assert_eq!(r.steps[0].scores, vec![None, None, None, Some(1.0)]);
        assert_eq!((r.total_completions, r.correct_completions, r.steps_tested), (4, 1, 2));
        assert_eq!(r.steps[0].mean_score, Some(1.0));
        // A group without scores is an empty step, as in the reference.
        assert_eq!((r.steps[1].completions, r.steps[1].mean_score), (0, None));
        assert!(r.notes.iter().any(|n| n.starts_with("3 score(s) were not finite")), "{:?}", r.notes);
        // Non-finite values survive a JSON round trip as null.
        let back: ModelResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    fn ok(model: &str, accuracy: f64) -> ModelResult {
        let mut r = ModelResult::new(model, Path::new("/x.jsonl"));
        r.steps_tested = 2;
        r.total_completions = 10;
        r.correct_completions = (accuracy * 10.0) as u64;
        r.accuracy = accuracy;
        r
    }

    #[test]
    fn summary_skips_failures() {
        let mut crashed = ok("crashed", 0.9);
        crashed.error = Some("process exited with code 1".into());
        let empty = ModelResult::new("empty", Path::new("/e.jsonl"));
        let results = vec![crashed, ok("a", 0.2), empty, ok("b", 0.6)];
        let s = summarize(&results);
        assert_eq!((s.models_tested, s.models_succeeded), (4, 2));
        assert_eq!(s.best_model.as_deref(), Some("b"));
        assert!((s.average_accuracy - 0.4).abs() < 1e-12);
        assert!(s.environment_working);
        assert_eq!(s.models_with_correct, 2);
        let json = serde_json::to_value(&s).unwrap();
        for key in ["models_tested", "models_succeeded", "best_model", "avg_accuracy", "environment_working"]
        {
            assert!(json.get(key).is_some(), "missing key {key}");
        }
    }

    #[test]
    fn summary_of_nothing_that_worked() {
        let mut failed = ok("f", 0.5);
        failed.error = Some("boom".into());
        for results in [vec![], vec![failed]] {
            let s = summarize(&results);
            assert_eq!((s.models_succeeded, s.best_model, s.average_accuracy), (0, None, 0.0));
            assert!(!s.environment_working);
        }
    }

    #[test]
    fn summary_zero_accuracy_still_means_working() {
        let s = summarize(&[ok("z", 0.0)]);
        assert!(s.environment_working);
        assert_eq!((s.models_with_correct, s.best_model.as_deref()), (0, Some("z")));
    }

    #[test]
    fn best_model_ties_go_to_the_first() {
        let s = summarize(&[ok("low", 0.1), ok("first", 0.7), ok("second", 0.7), ok("third", 0.7)]);
        assert_eq!(s.best_model.as_deref(), Some("first"));
        let s = summarize(&[ok("zero-a", 0.0), ok("zero-b", 0.0)]);
        assert_eq!(s.best_model.as_deref(), Some("zero-a"));
    }

    #[test]
    fn redacting_covers_every_text_field() {
        let mut r = ModelResult::new("m", Path::new("/runs/sk-1/g.jsonl"));
        r.error = Some("401 for key sk-1".into());
        r.exit = Some("exit 1 (sk-1)".into());
        r.log_path = Some("/logs/sk-1.log".into());
        r.notes.push("sk-1".into());
        r.redact("sk-1");
        let json = serde_json::to_string(&r).unwrap();
        assert!(!json.contains("sk-1"), "{json}");
        assert_eq!(r.error.as_deref(), Some("401 for key ***"));
    }

    #[test]
    fn stderr_tail_returns_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "log", b"one\ntwo\r\nthree\nfour\n");
        assert_eq!(stderr_tail(&path, 2), "three\nfour");
        assert_eq!(stderr_tail(&path, 10), "one\ntwo\nthree\nfour");
        assert_eq!(stderr_tail(&path, 0), "");
        // No trailing newline, invalid UTF-8 decoded lossily.
        let path = write(&dir, "log2", b"a\nb\xff\nc");
        assert_eq!(stderr_tail(&path, 2), "b\u{fffd}\nc");
        assert_eq!(stderr_tail(&dir.path().join("missing"), 5), "");
        assert_eq!(stderr_tail(&write(&dir, "empty", b""), 5), "");
    }

    #[test]
    fn stderr_tail_reads_only_the_end_of_big_logs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.log");
        let mut f = File::create(&path).unwrap();
        for i in 0..50_000 {
            writeln!(f, "line {i}").unwrap();
        }
        writeln!(f, "Traceback: boom").unwrap();
        drop(f);
        assert_eq!(stderr_tail(&path, 2), "line 49999\nTraceback: boom");
        // A single line larger than the cap comes back cut to the cap, not whole.
        let path = write(&dir, "huge.log", &vec![b'x'; 200 * 1024]);
        assert_eq!(stderr_tail(&path, 3).len(), TAIL_MAX_BYTES as usize);
    }
}
