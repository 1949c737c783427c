//! Results of a verifiers environment's inference test, read from what `vf-eval --save-results`
//! wrote in the model's working directory: `outputs/evals/ENV--MODEL/RUN/results.jsonl` (one JSON
//! object per rollout, with its `example_id` and `reward`) and `metadata.json` beside it (how many
//! examples and rollouts per example were asked for).
//!
//! The rollouts fill the same [`ModelResult`] an Atropos test's groups do: an example is a step,
//! its rollouts' rewards are the step's scores, and the model's figure is `reward`, the mean over
//! every rollout. Reading never fails: what is wrong ends up in `error`, in one line.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::results::ModelResult;

/// Where `vf-eval` saves, relative to its working directory (verifiers' `get_results_path`,
/// when no environment directory of that name is beside it).
const EVALS_DIR: &str = "outputs/evals";
pub const RESULTS_FILE: &str = "results.jsonl";
const METADATA_FILE: &str = "metadata.json";
/// `metadata.json` is a few hundred bytes; more is not vf-eval's.
const METADATA_MAX_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("vf-eval wrote no results (no {EVALS_DIR}/*/*/{RESULTS_FILE} under {dir})")]
    NoResults { dir: String },
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("line {line} of {path} is not a rollout: {reason}")]
    BadLine { path: String, line: u64, reason: String },
    #[error("{path} holds {read} rollouts, but vf-eval's metadata.json announces {expected}: cut short")]
    CutShort { path: String, read: u64, expected: u64 },
}

/// The part of a rollout we need; prompts, completions and metrics are skipped unparsed.
#[derive(Deserialize)]
struct Rollout {
    #[serde(default)]
    example_id: serde_json::Value,
    #[serde(default)]
    reward: serde_json::Value,
}

#[derive(Deserialize)]
struct Metadata {
    num_examples: Option<u64>,
    rollouts_per_example: Option<u64>,
}

/// The newest `results.jsonl` that `vf-eval` saved under `model_dir`; `None` when there is none.
pub fn find_results(model_dir: &Path) -> Option<PathBuf> {
    let evals = model_dir.join(EVALS_DIR);
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    for env_model in std::fs::read_dir(evals).ok()?.flatten() {
        let Ok(runs) = std::fs::read_dir(env_model.path()) else { continue };
        for run in runs.flatten() {
            let file = run.path().join(RESULTS_FILE);
            let Ok(modified) = std::fs::metadata(&file).and_then(|m| m.modified()) else { continue };
            if newest.as_ref().is_none_or(|(t, _)| modified > *t) {
                newest = Some((modified, file));
            }
        }
    }
    newest.map(|(_, file)| file)
}

/// Reads what `vf-eval` saved for `model` under `model_dir` (its working directory).
pub fn read_verifiers_result(model: &str, model_dir: &Path) -> ModelResult {
    let Some(file) = find_results(model_dir) else {
        let mut result = ModelResult::new(model, model_dir);
        result.error = Some(ReadError::NoResults { dir: model_dir.display().to_string() }.to_string());
        return result;
    };
    read_results_file(model, &file)
}

/// Reads one `results.jsonl` (and the `metadata.json` beside it, when there is one).
pub fn read_results_file(model: &str, file: &Path) -> ModelResult {
    let mut result = ModelResult::new(model, file);
    match read_rollouts(&mut result, file) {
        Ok(read) => {
            let expected = file.parent().and_then(|dir| expected_rollouts(&dir.join(METADATA_FILE)));
            if let Some(expected) = expected.filter(|e| read < *e) {
                let path = file.display().to_string();
                result.error = Some(ReadError::CutShort { path, read, expected }.to_string());
            }
            if read == 0 && result.error.is_none() {
                result.notes.push("no rollouts were written".to_string());
            }
        }
        Err(err) => result.error = Some(err.to_string()),
    }
    result.finish_rates();
    let rewards: Vec<f64> = result.steps.iter().flat_map(|s| &s.scores).flatten().copied().collect();
    result.reward = (!rewards.is_empty()).then(|| rewards.iter().sum::<f64>() / rewards.len() as f64);
    result
}

/// Adds each example's rollouts as one step, in the order examples first appear; returns how
/// many rollouts were read.
fn read_rollouts(result: &mut ModelResult, file: &Path) -> Result<u64, ReadError> {
    let path = file.display().to_string();
    let io = |source| ReadError::Io { path: path.clone(), source };
    let mut reader = BufReader::new(File::open(file).map_err(io)?);
    let mut buf = Vec::new();
    let mut examples: HashMap<String, usize> = HashMap::new();
    let mut rewards: Vec<Vec<Option<f64>>> = Vec::new();
    let (mut line_no, mut read) = (0u64, 0u64);
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(io)? == 0 {
            break;
        }
        line_no += 1;
        let line = buf.trim_ascii();
        if line.is_empty() {
            continue;
        }
        let bad = |reason: String| ReadError::BadLine { path: path.clone(), line: line_no, reason };
        if line.first() != Some(&b'{') {
            return Err(bad("not a JSON object".into()));
        }
        let rollout: Rollout = crate::pyjson::from_slice(line).map_err(|e| bad(e.to_string()))?;
        let reward = rollout.reward.as_f64().filter(|r| r.is_finite()).ok_or_else(|| {
            bad(format!("its reward {} is not a number", short(&rollout.reward.to_string())))
        })?;
        let next = rewards.len();
        let slot = *examples.entry(rollout.example_id.to_string()).or_insert(next);
        if slot == next {
            rewards.push(Vec::new());
        }
        rewards[slot].push(Some(reward));
        read += 1;
    }
    for scores in rewards {
        result.add_step(scores);
    }
    Ok(read)
}

/// Rollouts `metadata.json` says were asked for; `None` when it is missing or unreadable (the
/// results file is then taken as it is).
fn expected_rollouts(metadata: &Path) -> Option<u64> {
    let mut text = Vec::new();
    File::open(metadata).ok()?.take(METADATA_MAX_BYTES).read_to_end(&mut text).ok()?;
    let meta: Metadata = crate::pyjson::from_slice(&text).ok()?;
    meta.num_examples?.checked_mul(meta.rollouts_per_example?)
}

/// A value for a one-line message: at most 40 characters.
fn short(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rollout(example: u64, reward: &str) -> String {
        format!(
            "{{\"example_id\":{example},\"prompt\":[{{\"role\":\"user\",\"content\":\"What is 3 + 11?\"}}],\
             \"completion\":[{{\"role\":\"assistant\",\"content\":\"The answer is 14.\"}}],\"task\":\"default\",\
             \"reward\":{reward},\"error\":null,\"answer\":\"14\",\"correct\":{reward},\"num_turns\":1.0}}\n"
        )
    }

    /// A model directory as vf-eval 0.1.9.post3 leaves it.
    fn saved(rows: &str, metadata: Option<&str>) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("outputs/evals/vf-arith--good-model/b7fc23fa");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(run.join(RESULTS_FILE), rows).unwrap();
        if let Some(meta) = metadata {
            std::fs::write(run.join(METADATA_FILE), meta).unwrap();
        }
        (dir, run.join(RESULTS_FILE))
    }

    const META_2X2: &str = r#"{"env_id": "vf-arith", "env_args": {}, "model": "good-model", "num_examples": 2, "rollouts_per_example": 2, "time_ms": 276.8, "avg_reward": 0.75}"#;

    #[test]
    fn the_mean_reward_is_over_every_rollout_and_examples_are_steps() {
        let rows = [rollout(0, "1.0"), rollout(1, "0.5"), rollout(0, "1.0"), rollout(1, "0.0")].concat();
        let (dir, file) = saved(&rows, Some(META_2X2));
        let result = read_verifiers_result("good-model", dir.path());
        assert_eq!(result.error, None);
        assert_eq!(result.output_path, file.display().to_string());
        assert_eq!(result.reward, Some(0.625));
        assert_eq!(result.score(), 0.625);
        assert_eq!((result.steps_tested, result.total_completions, result.correct_completions), (2, 4, 3));
        assert_eq!(result.steps[0].scores, vec![Some(1.0), Some(1.0)]);
        assert_eq!(result.steps[1].scores, vec![Some(0.5), Some(0.0)]);
        assert!(result.succeeded());
    }

    #[test]
    fn no_results_says_where_it_looked() {
        let dir = tempfile::tempdir().unwrap();
        let result = read_verifiers_result("m", dir.path());
        let error = result.error.clone().unwrap();
        assert!(
            error.starts_with("vf-eval wrote no results (no outputs/evals/*/*/results.jsonl under "),
            "{error}"
        );
        assert!(!result.succeeded());
    }

    #[test]
    fn a_file_cut_short_fails_the_model_in_one_line() {
        // Fewer rollouts than metadata.json announces.
        let (dir, _) =
            saved(&[rollout(0, "1.0"), rollout(0, "1.0"), rollout(1, "1.0")].concat(), Some(META_2X2));
        let result = read_verifiers_result("m", dir.path());
        let error = result.error.clone().unwrap();
        assert!(
            error.ends_with("holds 3 rollouts, but vf-eval's metadata.json announces 4: cut short"),
            "{error}"
        );
        assert!(!result.succeeded());
        // A line cut in the middle.
        let rows = rollout(0, "1.0") + &rollout(0, "1.0")[..40];
        let (dir, _) = saved(&rows, None);
        let error = read_verifiers_result("m", dir.path()).error.unwrap();
        assert!(error.starts_with("line 2 of ") && error.contains("is not a rollout: "), "{error}");
        assert!(!error.contains('\n'));
    }

    #[test]
    fn a_reward_that_is_not_a_number_fails_the_model() {
        for reward in ["\"high\"", "NaN", "null", "Infinity"] {
            let (dir, _) = saved(&[rollout(0, "1.0"), rollout(0, reward)].concat(), None);
            let error = read_verifiers_result("m", dir.path()).error.unwrap();
            assert!(error.starts_with("line 2 of "), "{reward}: {error}");
            assert!(
                error.contains("is not a rollout: its reward ") && error.ends_with(" is not a number"),
                "{error}"
            );
        }
        let (dir, _) = saved(&rollout(0, "{}"), None);
        assert!(
            read_verifiers_result("m", dir.path()).error.unwrap().contains("its reward {} is not a number")
        );
    }

    #[test]
    fn the_newest_run_is_read() {
        let (dir, _) = saved(&rollout(0, "0.0"), None);
        let newer = dir.path().join("outputs/evals/vf-arith--good-model/c0ffee00");
        std::fs::create_dir_all(&newer).unwrap();
        let file = newer.join(RESULTS_FILE);
        std::fs::write(&file, rollout(0, "1.0")).unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        File::options().write(true).open(&file).unwrap().set_modified(later).unwrap();
        assert_eq!(read_verifiers_result("m", dir.path()).reward, Some(1.0));
    }

    proptest! {
        /// Any bytes in the results file and its metadata: a result, never a panic, and an
        /// error in one line whenever the model does not count.
        #[test]
        fn any_bytes_read_without_panicking(
            rows in proptest::collection::vec(any::<u8>(), 0..600),
            meta in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let run = dir.path().join("outputs/evals/e--m/r");
            std::fs::create_dir_all(&run).unwrap();
            std::fs::write(run.join(RESULTS_FILE), &rows).unwrap();
            std::fs::write(run.join(METADATA_FILE), &meta).unwrap();
            let result = read_verifiers_result("m", dir.path());
            if let Some(error) = &result.error {
                prop_assert!(!error.contains('\n'), "{}", error);
            }
            if let Some(reward) = result.reward {
                prop_assert!(reward.is_finite());
            }
        }

        /// Well-formed rollouts with any finite rewards: the mean is over every rollout.
        #[test]
        fn the_reward_is_the_mean_of_the_rollouts(rewards in proptest::collection::vec(-1e6f64..1e6, 1..40)) {
            let rows: String = rewards.iter().enumerate().map(|(i, r)| rollout(i as u64 % 3, &format!("{r:?}"))).collect();
            let (dir, _) = saved(&rows, None);
            let result = read_verifiers_result("m", dir.path());
            prop_assert_eq!(result.error, None);
            let mean = rewards.iter().sum::<f64>() / rewards.len() as f64;
            prop_assert!((result.reward.unwrap() - mean).abs() <= 1e-6 * mean.abs().max(1.0));
            prop_assert_eq!(result.total_completions, rewards.len() as u64);
        }
    }
}
