//! The `progress:` block, from YAML to readings.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

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
        (&fraction, r#"{"step": 5, "progress/done_frac": 1.5}"#, Ok(Some(Reading { step: 5, total: None }))),
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
