//! What lachesis keeps of a W&B run: a `Snapshot` of its summary, stored with the run so that
//! `status` and `results` still answer (saying how old the numbers are) when W&B is
//! unreachable, and its sampled history merged step by step into metric rows.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::RunRef;
use crate::model::MetricReading;

/// The numbers `status` and `results` show, as last read from W&B.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Snapshot {
    /// When it was read, unix milliseconds.
    pub taken_at: i64,
    pub state: Option<String>,
    pub step: Option<i64>,
    pub reward_mean: Option<f64>,
    pub percent_correct: Option<f64>,
    pub eval_percent_correct: Option<f64>,
    pub loss: Option<f64>,
    pub summary: Map<String, Value>,
    pub url: Option<String>,
}

/// The metric names a snapshot is made of, in order of preference.
const STEP_KEYS: &[&str] = &["_step", "train/step"];
const REWARD_MEAN_KEYS: &[&str] = &["train/reward_mean"];
const PERCENT_CORRECT_KEYS: &[&str] = &["train/percent_correct"];
const EVAL_PERCENT_CORRECT_KEYS: &[&str] = &["eval/percent_correct"];
const LOSS_KEYS: &[&str] = &["train/loss", "loss"];

/// The snapshot of `run` taken at `now_ms`. Values that are missing, not numbers, or not finite
/// are left `None`.
pub fn snapshot_from(run: &RunRef, now_ms: i64) -> Snapshot {
    let number = |keys: &[&str]| keys.iter().find_map(|key| lookup(&run.summary, key).and_then(finite));
    Snapshot {
        taken_at: now_ms,
        state: run.state.clone(),
        step: STEP_KEYS.iter().find_map(|key| lookup(&run.summary, key).and_then(whole)),
        reward_mean: number(REWARD_MEAN_KEYS),
        percent_correct: number(PERCENT_CORRECT_KEYS),
        eval_percent_correct: number(EVAL_PERCENT_CORRECT_KEYS),
        loss: number(LOSS_KEYS),
        summary: run.summary.clone(),
        url: run.url.clone(),
    }
}

/// The history keys every run is read for: the ones results and the morning report show
/// (`MetricRow`'s), whatever else the run logs.
pub const HISTORY_KEYS: &[&str] = crate::model::metric_row::ROW_METRICS;

/// Keys named by the caller (the metric of the sweep a run is a member of, then those of the
/// other sweeps polled beside it) read beyond `HISTORY_KEYS`; past this many the rest are left
/// out (the run's own sweep's metric comes first, so it is never one of them).
pub const MAX_NAMED_KEYS: usize = 8;

/// Keys of a run's W&B history read beyond `HISTORY_KEYS` and the named keys: each costs a
/// request per reading.
pub const MAX_OTHER_KEYS: usize = 16;

/// The history keys read of `run`, at most `HISTORY_KEYS.len() + MAX_NAMED_KEYS +
/// MAX_OTHER_KEYS`: `HISTORY_KEYS`, then the first `MAX_NAMED_KEYS` of `named`, then up to
/// `MAX_OTHER_KEYS` of its other keys (W&B's own `_` keys left out), each once. A key is read
/// only when the run logs it, as far as W&B says (it said nothing: every known and named key).
pub fn history_keys_of<'a>(run: &'a RunRef, named: &[&'a str]) -> Vec<&'a str> {
    let logged = |key: &str| run.history_keys.is_empty() || run.history_keys.iter().any(|k| k == key);
    let mut keys: Vec<&'a str> = Vec::new();
    for key in HISTORY_KEYS.iter().copied().chain(named.iter().copied().take(MAX_NAMED_KEYS)) {
        if logged(key) && !keys.contains(&key) {
            keys.push(key);
        }
    }
    let others: Vec<&str> = run
        .history_keys
        .iter()
        .map(String::as_str)
        .filter(|key| !key.starts_with('_') && !keys.contains(key))
        .take(MAX_OTHER_KEYS)
        .collect();
    keys.extend(others);
    keys
}

/// The readings of `key` in W&B history `rows` (each with `_step`): rows without a whole
/// `_step` or a finite number under `key` are skipped.
pub fn history_readings(rows: &[Map<String, Value>], key: &str) -> Vec<MetricReading> {
    rows.iter()
        .filter_map(|row| {
            let step = lookup(row, "_step").and_then(whole)?;
            MetricReading::new(key, step, lookup(row, key).and_then(finite)?)
        })
        .collect()
}

/// How old a snapshot taken at `taken_at_ms` is at `now_ms`, as every surface writes a span:
/// "12s old", "5m 30s old", "3h old". A snapshot from the future (clocks moved) reads as "0s old".
pub fn age_text(taken_at_ms: i64, now_ms: i64) -> String {
    format!("{} old", crate::text::span_ms(now_ms.saturating_sub(taken_at_ms)))
}

/// A summary value by key. wandb stores `train/x` as a flat key; a run that logged a nested dict
/// (`{"train": {"x": ..}}`) has it nested instead, so that is tried second.
fn lookup<'a>(summary: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if let Some(value) = summary.get(key) {
        return Some(value);
    }
    let mut parts = key.split('/');
    let mut current = summary.get(parts.next()?)?;
    for part in parts {
        current = current.as_object()?.get(part)?;
    }
    Some(current)
}

fn finite(value: &Value) -> Option<f64> {
    value.as_f64().filter(|v| v.is_finite())
}

/// An integer, also when W&B wrote it as a float (`120.0`).
pub(super) fn whole(value: &Value) -> Option<i64> {
    if let Some(n) = value.as_i64() {
        return Some(n);
    }
    let f = finite(value)?;
    // The bounds keep the cast exact: i64::MAX itself is not representable as f64.
    (f.fract() == 0.0 && (-9.0e18..=9.0e18).contains(&f)).then_some(f as i64)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn snapshot_picks_the_known_metrics() {
        let run = RunRef::finished_with(json!({
            "_step": 120, "train/step": 60, "train/reward_mean": 0.42, "train/percent_correct": 0.61,
            "eval/percent_correct": 0.58, "train/loss": 0.9, "loss": 5.0, "other": "x",
        }));
        let snap = snapshot_from(&run, 1_000);
        assert_eq!(snap.taken_at, 1_000);
        assert_eq!(snap.state.as_deref(), Some("finished"));
        assert_eq!(snap.step, Some(120));
        assert_eq!(snap.reward_mean, Some(0.42));
        assert_eq!(snap.percent_correct, Some(0.61));
        assert_eq!(snap.eval_percent_correct, Some(0.58));
        assert_eq!(snap.loss, Some(0.9));
        assert_eq!(snap.summary, run.summary);
        assert_eq!(snap.url, run.url);
    }

    #[test]
    fn snapshot_falls_back_and_skips_what_is_not_a_number() {
        let run = RunRef::finished_with(json!({
            "train/step": 60.0, "train": { "reward_mean": 1 }, "train/percent_correct": "n/a",
            "eval/percent_correct": null, "loss": 2.5,
        }));
        let snap = snapshot_from(&run, 0);
        assert_eq!(snap.step, Some(60));
        assert_eq!(snap.reward_mean, Some(1.0));
        assert_eq!(snap.percent_correct, None);
        assert_eq!(snap.eval_percent_correct, None);
        assert_eq!(snap.loss, Some(2.5));
        let empty = snapshot_from(&RunRef::finished_with(json!({ "_step": 1.5 })), 0);
        assert_eq!((empty.step, empty.loss), (None, None));
    }

    #[test]
    fn snapshots_round_trip_and_old_ones_still_load() {
        let snap = snapshot_from(&RunRef::finished_with(json!({ "_step": 3, "train/loss": 0.5 })), 42);
        let text = serde_json::to_string(&snap).expect("encode");
        assert_eq!(serde_json::from_str::<Snapshot>(&text).expect("decode"), snap);
        let old: Snapshot = serde_json::from_str(r#"{"taken_at": 5, "step": 2}"#).expect("old");
        assert_eq!((old.taken_at, old.step, old.loss), (5, Some(2), None));
    }

    #[test]
    fn age_text_reads_as_a_span() {
        assert_eq!(age_text(0, 12_400), "12s old");
        assert_eq!(age_text(0, 5 * 60_000 + 30_000), "5m 30s old");
        assert_eq!(age_text(0, 3 * 3_600_000 + 1), "3h old");
        assert_eq!(age_text(10_000, 0), "0s old");
        assert!(age_text(i64::MIN, i64::MAX).ends_with(" old"), "no overflow");
    }

    #[test]
    fn named_keys_are_read_whatever_the_run_logs_beside_them_and_are_bounded() {
        let mut run = RunRef::finished_with(json!({}));
        // Twenty keys that sort before the sweep's metric, W&B's own, and a known one.
        run.history_keys = (0..20).map(|i| format!("aa/metric_{i:02}")).collect();
        run.history_keys.extend(["_runtime".to_string(), "train/loss".to_string(), "zz/score".to_string()]);
        run.history_keys.sort();
        let unnamed = history_keys_of(&run, &[]);
        assert!(!unnamed.contains(&"zz/score"), "past the other keys' bound: {unnamed:?}");
        assert_eq!(unnamed.len(), 1 + MAX_OTHER_KEYS);

        let named = history_keys_of(&run, &["zz/score", "train/loss", "not/logged"]);
        assert_eq!(&named[..2], ["train/loss", "zz/score"], "known, then named, each once");
        assert!(!named.contains(&"not/logged"), "a key W&B says the run never logged is not asked");
        assert_eq!(named.len(), 2 + MAX_OTHER_KEYS);

        // At most MAX_NAMED_KEYS named keys; the first ones win.
        run.history_keys.clear();
        let many: Vec<String> = (0..MAX_NAMED_KEYS + 3).map(|i| format!("n/{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let keys = history_keys_of(&run, &many);
        assert_eq!(keys.len(), HISTORY_KEYS.len() + MAX_NAMED_KEYS);
        assert_eq!(keys[HISTORY_KEYS.len()..], many[..MAX_NAMED_KEYS]);
    }

    #[test]
    fn history_rows_give_readings_of_their_key_and_skip_what_is_not_a_metric() {
        let rows: Vec<Map<String, Value>> = json!([
            {"_step": 0, "train/reward_mean": 0.25, "train/percent_correct": "n/a"},
            {"_step": 2.0, "train/reward_mean": 0.5, "loss": 0.75},
            {"train/reward_mean": 9.0},
            {"_step": 1.5, "train/reward_mean": 9.0},
            {"_step": 3, "train/reward_mean": "NaN"},
            {"_step": 4, "train": {"reward_mean": 0.75}},
        ])
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_object().unwrap().clone())
        .collect();
        let got: Vec<(String, i64, f64)> = history_readings(&rows, "train/reward_mean")
            .into_iter()
            .map(|r| (r.name, r.step, r.value))
            .collect();
        let name = "train/reward_mean".to_string();
        assert_eq!(got, vec![(name.clone(), 0, 0.25), (name.clone(), 2, 0.5), (name, 4, 0.75)]);
        assert!(history_readings(&rows, "train/percent_correct").is_empty(), "a string is no metric");
    }
}
