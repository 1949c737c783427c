//! The fuzz tier: property tests over everything that reads input (the workflow parser and
//! templating, durations, cron/tz, config values, every HTTP route's body, path and query).
//! The property is always "no panic, and errors are one line". Case counts are bounded so the
//! tier takes seconds; `PROPTEST_CASES` raises them for a longer hunt. `CORPUS` keeps the cases
//! that once panicked or slipped through, as plain regression tests.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use lachesis::cron::{Cron, tick};
use lachesis::environments::{FieldInfo, FieldKind, check_value};
use lachesis::workflow::{BUILTIN_VARS, Dur, MAX_DURATION, Workflow, template};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::TestHome;

mod http;
mod pipelines;

fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(cases);
    Config { cases, failure_persistence: None, ..Config::default() }
}

/// A runner with `cases` cases (`PROPTEST_CASES` overrides). Its seed is fixed, so CI sees the
/// same cases every run; `LACHESIS_FUZZ_RANDOM=1` draws new ones (to hunt, not to gate).
fn fuzz_runner(cases: u32) -> TestRunner {
    let config = config(cases);
    if std::env::var_os("LACHESIS_FUZZ_RANDOM").is_some() {
        TestRunner::new(config)
    } else {
        let rng = proptest::test_runner::TestRng::deterministic_rng(config.rng_algorithm);
        TestRunner::new_with_rng(config, rng)
    }
}

fn one_line(err: &str) {
    assert!(!err.contains(['\n', '\r']), "a multi-line error: {err:?}");
}

/// Values that broke or fooled lachesis once, mixed with ordinary ones.
const HOSTILE: &[&str] = &[
    "1e300",
    "1e19",
    "\"99999999999999999999999h\"",
    "18446744073709551616",
    "-1",
    ".nan",
    ".inf",
    "0",
    "5s",
    "\"1.5s\"",
    "\"30 days\"",
    "\"/etc/passwd\"",
    "\"../../lachesis.db\"",
    "\".status/a.exit.json\"",
    "\"{home}/config.yaml\"",
    "\"a.log\"",
    "\"..\"",
    "\"a/b\"",
    "\"\"",
    "\"a\\nb\"",
    "4294967295",
    "[1, 2]",
    "{a: 1}",
    "null",
    "\"{port.api}\"",
    "\"{tinker_atropos}\"",
    "\"{nope}\"",
    "\"{\"",
];

/// A workflow with `value` put at one of its fields.
fn workflow_with(field: usize, value: &str) -> String {
    let stage =
        |extra: &str| format!("name: t\nports: {{api: auto}}\nstages:\n  - {{name: a, argv: [x]{extra}}}\n");
    match field % 15 {
        0 => stage(&format!(", start_delay: {value}")),
        1 => stage(&format!(", start_timeout: {value}, probe: {{tcp: \"127.0.0.1:1\"}}")),
        2 => stage(&format!(", log: {value}")),
        3 => stage(&format!(", cwd: {value}")),
        4 => format!("name: t\nstages:\n  - {{name: {value}, argv: [x]}}\n"),
        5 => format!("name: t\nstop_grace: {value}\nstages:\n  - {{name: a, argv: [x]}}\n"),
        6 => format!(
            "name: t\nretry: {{max_attempts: {value}, backoff: 1s}}\nstages:\n  - {{name: a, argv: [x]}}\n"
        ),
        7 => format!(
            "name: t\nretry: {{max_attempts: 2, backoff: {value}}}\nstages:\n  - {{name: a, argv: [x]}}\n"
        ),
        8 => format!(
            "name: t\nports: {{api: 1}}\nvars: {{v: {value}}}\nstages:\n  - {{name: a, argv: [x, \"{{v}}\"]}}\n"
        ),
        9 => stage(&format!(", argv: [x, {value}]").replacen(", argv: [x]", "", 1)),
        10 => stage(&format!(", env: {{K: {value}}}")),
        11 => format!(
            "name: t\nstages:\n  - {{name: a, argv: [x]}}\nprogress: {{jsonl: {{file: {value}, step: /step}}}}\n"
        ),
        12 => stage(&format!(", log_max_size: {value}")),
        13 => stage(&format!(", log_max_files: {value}")),
        _ => format!("name: {value}\nstages:\n  - {{name: a, argv: [x]}}\n"),
    }
}

fn check_workflow_text(text: &str, fill: &str) {
    match Workflow::parse(Path::new("workflows/t.yaml"), text) {
        Err(err) => one_line(&err.to_string()),
        Ok(wf) => {
            // Every stage plans without panicking, and a planned log stays in the run directory.
            let mut vars: BTreeMap<String, String> =
                wf.known_vars().into_iter().map(|name| (name, fill.to_string())).collect();
            vars.insert("port.api".into(), "1".into());
            let run_dir = Path::new("/runs/r1");
            for stage in &wf.stages {
                match stage.plan(&vars, run_dir) {
                    Ok(plan) => {
                        let rest = plan.log_path.strip_prefix(run_dir).expect("log outside the run dir");
                        assert!(!rest.starts_with(".status"), "{rest:?}");
                        assert!(!plan.log_path.components().any(|c| c == std::path::Component::ParentDir));
                    }
                    Err(err) => one_line(&err.to_string()),
                }
            }
            // A JSONL progress file resolves inside the run directory, or is refused.
            vars.insert("run_dir".into(), "/runs/r1".into());
            if let Some(progress) = &wf.progress {
                match progress.resolve(&vars, &json!({}), |_| None) {
                    Ok(resolved) => {
                        if let Some(path) = resolved.source.followed_file() {
                            let rest = path.strip_prefix(run_dir).expect("a file outside the run dir");
                            assert!(rest.components().all(|c| matches!(c, std::path::Component::Normal(_))));
                        }
                    }
                    Err(err) => one_line(&err.to_string()),
                }
            }
        }
    }
}

#[test]
fn fuzz_workflows_never_panic_and_errors_are_one_line() {
    let hostile = prop::sample::select(HOSTILE);
    let value =
        prop_oneof![hostile.prop_map(str::to_string), "\\PC{0,12}".prop_map(|s| json!(s).to_string())];
    let mut runner = fuzz_runner(256);
    runner
        .run(&(0..15usize, value, "\\PC{0,8}"), |(field, value, fill)| {
            check_workflow_text(&workflow_with(field, &value), &fill);
            Ok(())
        })
        .unwrap();
    // Whole documents: arbitrary text, and YAML-looking punctuation soup.
    let mut runner = fuzz_runner(256);
    runner
        .run(&prop_oneof!["\\PC{0,200}", "[-:{}\\[\\]\n #a-z0-9'\"]{0,200}"], |text| {
            check_workflow_text(&text, "x");
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_templates_expand_or_fail_on_one_line() {
    let vars: BTreeMap<String, String> =
        BUILTIN_VARS.iter().map(|name| (name.to_string(), format!("<{name}>"))).collect();
    let mut runner = fuzz_runner(512);
    runner
        .run(&prop_oneof!["\\PC{0,40}", "[{}a-z_. \n]{0,40}"], |text| {
            match template::expand(&text, &vars) {
                Ok(_) => prop_assert!(template::variables(&text).is_ok()),
                Err(err) => one_line(&err.to_string()),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_durations_are_bounded_and_never_panic() {
    let mut runner = fuzz_runner(512);
    let text = prop_oneof![
        "\\PC{0,24}",
        "[0-9]{1,30}(\\.[0-9]{0,5})?(ns|us|ms|s|m|h|d|w|M|y| days| hours|e300)?",
        "[0-9.e+-]{1,12}",
    ];
    runner
        .run(&text, |text| {
            match text.parse::<Dur>() {
                Ok(dur) => prop_assert!(dur.0 <= MAX_DURATION),
                Err(err) => one_line(&err),
            }
            Ok(())
        })
        .unwrap();
    let mut runner = fuzz_runner(512);
    runner
        .run(&any::<f64>(), |secs| {
            match Dur::from_seconds(secs) {
                Ok(dur) => prop_assert!(dur.0 <= MAX_DURATION),
                Err(err) => one_line(&err),
            }
            // The same number as YAML goes through the workflow parser's reading.
            let text = format!("name: t\nstop_grace: {secs:e}\nstages:\n  - {{name: a, argv: [x]}}\n");
            if let Err(err) = Workflow::parse(Path::new("t.yaml"), &text) {
                one_line(&err.to_string());
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_pool_and_needs_values_never_panic_and_errors_are_one_line() {
    use lachesis::model::pool::{Needs, PoolSpec, Pools, assign, gpus_listed, parse_need};
    let mut runner = fuzz_runner(512);
    let text = prop_oneof![
        "\\PC{0,24}",
        "[a-zA-Z_-]{0,6}=[0-9a-zA-Z,. -]{0,24}",
        "gpu=(auto|[0-9]{1,12}(,[0-9]{0,3}){0,6})",
        "[a-z]{1,4}=-?[0-9]{1,25}",
    ];
    let pools = Pools::from_specs(&["gpu=0,1,2,3".parse::<PoolSpec>().unwrap()], None).unwrap();
    runner
        .run(&text, |text| {
            match text.parse::<PoolSpec>() {
                Ok(spec) => {
                    // What parses also makes a pool (auto with what nvidia-smi might list).
                    let listed = gpus_listed(&text);
                    if let Err(err) = Pools::from_specs(&[spec], Some(&listed)) {
                        one_line(&err.to_string());
                    }
                }
                Err(err) => one_line(&err.to_string()),
            }
            match parse_need(&text) {
                Ok((name, count)) => {
                    let needs = Needs::from_pairs([(name, count)]).unwrap();
                    match pools.check(&needs) {
                        // A need the pools meet is met by an empty node, within the pool.
                        Ok(()) => {
                            let got = assign(&pools, &Default::default(), &needs);
                            prop_assert!(got.is_some(), "{text}");
                        }
                        Err(err) => one_line(&err.to_string()),
                    }
                }
                Err(err) => one_line(&err.to_string()),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_cron_and_time_zones() {
    let expr = prop_oneof![
        "\\PC{0,30}",
        "([0-9*,/LW#?-]{1,6} ){4}[0-9*,/LW#?A-Z-]{1,6}",
        "@[a-z]{0,9}",
        "(MON|JAN|L|W|[0-9]{1,3}|\\*)( (MON|JAN|L|W|[0-9]{1,3}|\\*)){4}",
    ];
    let tz = prop_oneof![
        Just(None),
        prop::sample::select(
            &["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu"][..]
        )
        .prop_map(|tz| Some(tz.to_string())),
        "\\PC{0,20}".prop_map(Some),
    ];
    let mut runner = fuzz_runner(256);
    runner
        .run(&(expr, tz, 0i64..4_102_444_800, 0i64..10_000_000), |(expr, tz, start, gap)| {
            match Cron::parse(&expr, tz.as_deref()) {
                Ok(cron) => {
                    let last = chrono::DateTime::from_timestamp(start, 0).unwrap();
                    let now = chrono::DateTime::from_timestamp(start + gap, 0).unwrap();
                    if let Some(next) = cron.next_after(last) {
                        prop_assert!(next > last);
                    }
                    let _ = tick(&cron, last, now, gap % 2 == 0);
                    let _ = tick(&cron, now, last, false); // the clock went back
                }
                Err(err) => one_line(&err.to_string()),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_config_values_are_typed_or_refused_on_one_line() {
    let kind = prop::sample::select(
        &[
            FieldKind::Int,
            FieldKind::Float,
            FieldKind::Bool,
            FieldKind::Str,
            FieldKind::List,
            FieldKind::Dict,
            FieldKind::Other,
        ][..],
    );
    let type_name = prop_oneof![
        prop::sample::select(
            &[
                "",
                "int",
                "Optional[int]",
                "Literal['a', 'b']",
                "Literal[1, 2]",
                "Optional[Literal['x', None]]",
                "Literal['a\\'b', \"c\"]",
                "Literal[",
                "List[str]",
                "list[int]",
                "Tuple[float, ...]",
                "Set[bool]",
                "List[",
                "Dict[str, int]",
            ][..]
        )
        .prop_map(str::to_string),
        "\\PC{0,20}",
    ];
    let raw = prop_oneof!["\\PC{0,30}", "[\\[\\]{}\",0-9a-z. -]{0,30}", Just("[1,2]".to_string())];
    let mut runner = fuzz_runner(512);
    runner
        .run(&(kind, type_name, any::<bool>(), raw), |(kind, type_name, optional, raw)| {
            let field = FieldInfo {
                name: "f".into(),
                type_name,
                kind,
                optional,
                required: false,
                default: Value::Null,
                value: Value::Null,
                description: None,
            };
            if let Err(err) = check_value(&field, &raw) {
                one_line(&err.to_string());
            }
            Ok(())
        })
        .unwrap();
}

// ---- the corpus -------------------------------------------------------------------------------

/// Workflow files that panicked the CLI or were accepted though wrong, with the field their
/// error must name.
const WORKFLOW_CORPUS: &[(&str, &str)] = &[
    ("name: t\nstop_grace: 1e300\nstages:\n  - {name: a, argv: [x]}\n", "stop_grace"),
    (
        "name: t\nstages:\n  - {name: a, argv: [x], start_delay: \"99999999999999999999999h\"}\n",
        "stages[0].start_delay",
    ),
    ("name: t\nstages:\n  - {name: a, argv: [x], start_delay: 1e19}\n", "stages[0].start_delay"),
    (
        "name: t\nstages:\n  - {name: a, argv: [x], start_timeout: 1e300, probe: {tcp: \"h:1\"}}\n",
        "stages[0].start_timeout",
    ),
    (
        "name: t\nretry: {max_attempts: 2, backoff: 1e300}\nstages:\n  - {name: a, argv: [x]}\n",
        "retry.backoff",
    ),
    (
        "name: t\nretry: {max_attempts: 4294967295, backoff: 1s}\nstages:\n  - {name: a, argv: [x]}\n",
        "retry.max_attempts",
    ),
    ("name: t\nretry: {max_attempts: 3, backoff: 0}\nstages:\n  - {name: a, argv: [x]}\n", "retry.backoff"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log: /home/u/.lachesis/lachesis.db}\n", "stages[0].log"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log: ../../config.yaml}\n", "stages[0].log"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log: .status/a.exit.json}\n", "stages[0].log"),
    ("name: t\nstages:\n  - {name: \"..\", argv: [x]}\n", "stages[0].name"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log_max_size: 1.5GiB}\n", "stages[0].log_max_size"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log_max_size: 0}\n", "stages[0].log_max_size"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log_max_size: 99999999999TiB}\n", "stages[0].log_max_size"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log_max_files: 0}\n", "stages[0].log_max_files"),
    ("name: t\nstages:\n  - {name: a, argv: [x], log_max_files: -1}\n", "stages[0].log_max_files"),
    ("name: t\nstages:\n  - {name: a/b, argv: [x]}\n", "stages[0].name"),
    (
        "name: t\nports: {api: auto}\nvars: {u: \"http://h:{port.api}\"}\nstages:\n  - {name: a, argv: [x]}\n",
        "vars.u",
    ),
];

#[test]
fn corpus_workflows_are_refused_naming_the_field() {
    for (text, field) in WORKFLOW_CORPUS {
        let err = Workflow::parse(Path::new("workflows/t.yaml"), text).expect_err(text).to_string();
        assert!(err.contains(&format!(": {field}")), "{text:?}: {err}");
        one_line(&err);
    }
    // Deep nesting is refused at once (it took seconds to minutes).
    let began = std::time::Instant::now();
    for depth in [20_000, 100_000] {
        let text = format!("name: t\nstages: {}{}\n", "[".repeat(depth), "]".repeat(depth));
        let err = Workflow::parse(Path::new("t.yaml"), &text).unwrap_err().to_string();
        assert!(err.contains("nested more than"), "{err}");
    }
    assert!(began.elapsed() < Duration::from_secs(2), "{:?}", began.elapsed());
    // What was refused but documented, or the reverse.
    let ok = "name: t\nstages:\n  - {name: a, argv: [\"true\"], cwd: \"{tinker_atropos}\", start_delay: 0}\n";
    Workflow::parse(Path::new("t.yaml"), ok).unwrap();
}
