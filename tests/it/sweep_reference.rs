//! lachesis' sweep decisions against W&B's own: the `sweeps` package (tests/python/sweeps.sh
//! installs it; tests/python/hyperband_check.py asks it) answers the same generated cases.
//! - hyperband: which running members `hyperband_stop_runs` stops, on random series (ties,
//!   invalid readings, every state, both goals, min_iter and max_iter bands, strict or not);
//! - grid: the members `grid_search_next_runs` makes, in order, with their values' types;
//! - floats: Python's `repr`, which parameter vars follow.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use lachesis::model::sweep::random::Rng;
use lachesis::model::sweep::{Series, SweepSpec, python_float, stop_runs};
use serde_json::{Value, json};

const HYPERBAND_CASES: u64 = 3_000;
const GRID_CASES: u64 = 300;
const FLOATS: u64 = 3_000;

/// The venv's python (LACHESIS_TEST_SWEEPS_PYTHON, from bash tests/python/sweeps.sh), or None,
/// saying why; required when LACHESIS_REQUIRE_SWEEPS is set.
fn reference_python() -> Option<String> {
    let python = std::env::var("LACHESIS_TEST_SWEEPS_PYTHON").ok();
    if python.is_none() {
        assert!(
            std::env::var_os("LACHESIS_REQUIRE_SWEEPS").is_none(),
            "W&B's sweeps package is required: set LACHESIS_TEST_SWEEPS_PYTHON=$(bash tests/python/sweeps.sh)"
        );
        eprintln!(
            "skipped: no W&B sweeps package (LACHESIS_TEST_SWEEPS_PYTHON from bash tests/python/sweeps.sh)"
        );
    }
    python
}

fn ask_reference(python: &str, request: &Value) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/hyperband_check.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the reference python");
    let body = serde_json::to_vec(request).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&body));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        output.status.success(),
        "hyperband_check.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn pick<'a, T>(rng: &mut Rng, items: &'a [T]) -> &'a T {
    &items[rng.below(items.len() as u128) as usize]
}

fn int(rng: &mut Rng, low: i64, high: i64) -> i64 {
    low + rng.below((high - low + 1) as u128) as i64
}

/// A reading as both sides take it: the float, and its JSON (strings for NaN and infinities).
fn reading(rng: &mut Rng, style: u64) -> (f64, Value) {
    let special = rng.unit();
    let value = if special < 0.03 {
        *pick(rng, &[f64::NAN, f64::INFINITY, f64::NEG_INFINITY])
    } else {
        match style {
            0 => int(rng, 0, 6) as f64,
            1 => int(rng, -8, 8) as f64 / 4.0,
            _ => rng.uniform(-3.0, 3.0),
        }
    };
    let json = if value.is_nan() {
        json!("nan")
    } else if value.is_infinite() {
        json!(if value > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(value)
    };
    (value, json)
}

struct HyperbandCase {
    config: Value,
    runs: Vec<(String, bool, Vec<f64>)>,
    json_runs: Vec<Value>,
}

fn hyperband_case(k: u64) -> HyperbandCase {
    let mut rng = Rng::keyed(0x5eed, k, 0);
    let mut early = serde_json::Map::new();
    early.insert("type".into(), json!("hyperband"));
    if rng.unit() < 0.5 {
        early.insert("min_iter".into(), json!(int(&mut rng, 1, 5)));
    } else {
        early.insert("max_iter".into(), json!(int(&mut rng, 1, 81)));
        early.insert("s".into(), json!(int(&mut rng, 1, 5)));
    }
    match int(&mut rng, 0, 3) {
        0 => {}
        1 => drop(early.insert("eta".into(), json!(int(&mut rng, 2, 4)))),
        2 => drop(early.insert("eta".into(), json!(*pick(&mut rng, &[1.5, 2.5, 1.1, 3.3])))),
        _ => drop(early.insert("eta".into(), json!((rng.uniform(1.01, 5.0) * 100.0).round() / 100.0))),
    }
    match int(&mut rng, 0, 2) {
        0 => {}
        1 => drop(early.insert("strict".into(), json!(true))),
        _ => drop(early.insert("strict".into(), json!(false))),
    }
    let goal = *pick(&mut rng, &["minimize", "maximize"]);
    let config = json!({
        "workflow": "w",
        "method": "grid",
        "metric": {"name": "m", "goal": goal},
        "early_terminate": early,
        "parameters": {"a": {"value": 1}},
    });
    let states =
        ["running", "running", "running", "finished", "failed", "killed", "crashed", "preempted", "pending"];
    let style = int(&mut rng, 0, 2) as u64;
    let members = int(&mut rng, 1, 12);
    let (mut runs, mut json_runs) = (Vec::new(), Vec::new());
    for m in 0..members {
        let state = *pick(&mut rng, &states);
        let len = int(&mut rng, 0, 30);
        let (values, json_values): (Vec<f64>, Vec<Value>) =
            (0..len).map(|_| reading(&mut rng, style)).unzip();
        let name = format!("r{m}");
        json_runs.push(json!({"name": name, "state": state, "history": json_values}));
        runs.push((name, state == "running", values));
    }
    HyperbandCase { config, runs, json_runs }
}

/// A grid parameter of one of the kinds W&B walks.
fn grid_parameter(rng: &mut Rng) -> Value {
    match int(rng, 0, 5) {
        0 => {
            let pool = [
                json!(1),
                json!(0.1),
                json!("adam"),
                json!(true),
                json!(2.0),
                json!(-3),
                json!(1e-5),
                json!("x"),
                json!(2.5e-7),
            ];
            // Distinct: lachesis refuses a grid value listed twice, where W&B skips the repeat.
            let count = int(rng, 1, 3) as usize;
            let start = rng.below(pool.len() as u128) as usize;
            json!({"values": (0..count).map(|i| pool[(start + i) % pool.len()].clone()).collect::<Vec<_>>()})
        }
        1 => {
            let min = int(rng, -3, 3);
            json!({"min": min, "max": min + int(rng, 1, 4)})
        }
        2 => {
            let min = int(rng, -3, 3);
            json!({"distribution": "q_uniform", "min": min, "max": min + int(rng, 1, 6), "q": int(rng, 1, 3)})
        }
        3 => {
            let min = int(rng, -100, 100) as f64 / 100.0;
            let q = *pick(rng, &[0.1, 0.25, 0.05, 0.3, 0.2]);
            json!({"distribution": "q_uniform", "min": min, "max": min + int(rng, 1, 5) as f64 * 0.17, "q": q})
        }
        4 => {
            let min = int(rng, -3, 3);
            json!({"distribution": "q_uniform", "min": min, "max": min + int(rng, 1, 4)})
        }
        _ => json!({"value": *pick(rng, &[json!(7), json!(0.5), json!("c")])}),
    }
}

fn grid_case(k: u64) -> Value {
    let mut rng = Rng::keyed(0x9e1d, k, 0);
    let mut parameters = serde_json::Map::new();
    for name in ["lr", "b", "z", "a"] {
        if rng.unit() < 0.6 {
            parameters.insert(name.into(), grid_parameter(&mut rng));
        }
    }
    if rng.unit() < 0.4 {
        let mut nested = serde_json::Map::new();
        for name in ["m", "beta"] {
            nested.insert(name.into(), grid_parameter(&mut rng));
        }
        parameters.insert("opt".into(), json!({"parameters": nested}));
    }
    if parameters.is_empty() {
        parameters.insert("k".into(), grid_parameter(&mut rng));
    }
    json!({"workflow": "w", "method": "grid", "parameters": parameters})
}

fn typed(value: &Value) -> Value {
    match value {
        Value::Bool(flag) => json!({"bool": flag}),
        Value::Number(number) if number.is_i64() || number.is_u64() => json!({"int": number}),
        // As text: serde_json's default float parsing is not exact; repr and python_float are
        // (compared below).
        Value::Number(number) => json!({"float": python_float(number.as_f64().unwrap())}),
        other => json!({"other": other}),
    }
}

fn floats(count: u64) -> Vec<f64> {
    let mut rng = Rng::keyed(0xf10a7, 0, 0);
    let mut out: Vec<f64> = (-25..25).map(|e| 10f64.powi(e)).collect();
    out.extend([
        0.0,
        -0.0,
        0.1 + 0.2,
        1e16,
        9999999999999998.0,
        1e-4,
        0.00009999,
        123456789012345680.0,
        5e-324,
    ]);
    while (out.len() as u64) < count {
        let x = match int(&mut rng, 0, 2) {
            0 => f64::from_bits(rng.next_u64()),
            1 => int(&mut rng, -100_000, 100_000) as f64 / 10f64.powi(int(&mut rng, 0, 9) as i32),
            _ => rng.uniform(-1.0, 1.0) * 10f64.powi(int(&mut rng, -30, 30) as i32),
        };
        if x.is_finite() {
            out.push(x);
        }
    }
    out
}

fn clip(text: String) -> String {
    if text.len() > 2_000 { format!("{}…", &text[..text.floor_char_boundary(2_000)]) } else { text }
}

#[test]
fn hyperband_grid_and_float_text_match_w_and_b() {
    let Some(python) = reference_python() else { return };
    let hyperband: Vec<HyperbandCase> = (0..HYPERBAND_CASES).map(hyperband_case).collect();
    let grids: Vec<Value> = (0..GRID_CASES).map(grid_case).collect();
    let specs: Vec<SweepSpec> = grids
        .iter()
        .map(|config| SweepSpec::parse(&config.to_string()).unwrap_or_else(|err| panic!("{err}: {config}")))
        .collect();
    let floats = floats(FLOATS);
    let request = json!({
        "hyperband": hyperband.iter().map(|case| json!({"config": case.config, "runs": case.json_runs})).collect::<Vec<_>>(),
        "grid": grids.iter().zip(&specs).map(|(config, spec)| json!({
            "config": config,
            "paths": spec.parameters.iter().map(|p| p.path.clone()).collect::<Vec<_>>(),
            "limit": spec.members(),
        })).collect::<Vec<_>>(),
        "floats": floats,
    });
    let answer = ask_reference(&python, &request);

    let mut mismatches = Vec::new();
    let (mut stops, mut refused) = (0, 0);
    for (case, wandb) in hyperband.iter().zip(answer["hyperband"].as_array().unwrap()) {
        let ours = match SweepSpec::parse(&case.config.to_string()) {
            Ok(spec) => {
                let series: Vec<Series<String>> = case
                    .runs
                    .iter()
                    .map(|(id, running, values)| Series { id: id.clone(), running: *running, values })
                    .collect();
                let stopped =
                    stop_runs(&series, spec.metric.as_ref().unwrap(), spec.early_terminate.as_ref().unwrap());
                stops += stopped.len();
                json!(stopped.into_iter().map(|stop| stop.id).collect::<Vec<_>>())
            }
            Err(err) => {
                refused += 1;
                json!({"error": err.to_string()})
            }
        };
        let agree = match (&ours, wandb) {
            (Value::Object(_), Value::Object(theirs)) => theirs.contains_key("error"),
            _ => ours == *wandb,
        };
        if !agree {
            let case = json!({"config": case.config, "runs": case.json_runs});
            mismatches.push(clip(format!("hyperband {case}: ours {ours}, W&B {wandb}")));
        }
    }
    for ((spec, config), wandb) in specs.iter().zip(&grids).zip(answer["grid"].as_array().unwrap()) {
        let ours: Vec<Value> = (0..spec.members())
            .map(|k| {
                json!(spec.member(k).unwrap().assignments.iter().map(|a| typed(&a.value)).collect::<Vec<_>>())
            })
            .collect();
        if json!(ours) != *wandb {
            mismatches.push(clip(format!("grid {config}: ours {}, W&B {wandb}", json!(ours))));
        }
    }
    for (x, wandb) in floats.iter().zip(answer["floats"].as_array().unwrap()) {
        if python_float(*x) != wandb.as_str().unwrap() {
            mismatches.push(format!("float {x:e}: ours {}, Python {wandb}", python_float(*x)));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches; the first:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(5)].join("\n")
    );
    eprintln!(
        "matched W&B on {HYPERBAND_CASES} hyperband cases ({stops} stops, {refused} configs refused by both), \
         {GRID_CASES} grids and {FLOATS} floats"
    );
    assert!(stops > HYPERBAND_CASES as usize / 4, "the cases should stop members: {stops}");
}
