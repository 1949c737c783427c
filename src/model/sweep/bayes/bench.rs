//! The bayes benchmark (ignored by default: minutes of one core): lachesis' bayes, W&B's
//! (`bayes_search_next_runs` of `sweeps` 0.3.0, driven the same way by
//! tests/python/bayes_bench.py) and lachesis' random search over three noisy test functions,
//! budgets 20 and 40, max_live 1 and 4, many seeds; printed side by side, the medians of each
//! sweep's best value (the noiseless function at the best member tried; lower is better).
//!
//! ```text
//! LACHESIS_TEST_SWEEPS_PYTHON=$(bash tests/python/sweeps.sh) \
//!   cargo test --lib model::sweep::bayes::bench -- --ignored --nocapture
//! ```
//! (`LACHESIS_BAYES_WANDB_JSON=FILE` reads W&B's figures from a file the script wrote instead;
//! `LACHESIS_BAYES_FUNCTIONS=branin-2d,…` runs only the functions named, to iterate on them.)
//!
//! A sweep with max_live L starts L members at once (each later one imputing those before it in
//! flight); then the oldest member in flight ends with its noisy value and one more is
//! suggested, the others still in flight, until the budget is spent.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Observed, Seen, suggest};
use crate::model::sweep::SweepSpec;
use crate::model::sweep::random::Rng;

type Config = BTreeMap<String, Value>;

fn get(config: &Config, key: &str) -> f64 {
    config[key].as_f64().unwrap()
}

fn forrester(c: &Config) -> f64 {
    let x = get(c, "x");
    (6.0 * x - 2.0).powi(2) * (12.0 * x - 4.0).sin()
}

fn branin(c: &Config) -> f64 {
    use std::f64::consts::PI;
    let (x1, x2) = (get(c, "x1"), get(c, "x2"));
    let (b, cc, r, s, t) = (5.1 / (4.0 * PI * PI), 5.0 / PI, 6.0, 10.0, 1.0 / (8.0 * PI));
    (x2 - b * x1 * x1 + cc * x1 - r).powi(2) + s * (1.0 - t) * x1.cos() + s
}

fn hartmann_optimizer(c: &Config) -> f64 {
    const A: [[f64; 3]; 4] = [[3.0, 10.0, 30.0], [0.1, 10.0, 35.0], [3.0, 10.0, 30.0], [0.1, 10.0, 35.0]];
    const P: [[f64; 3]; 4] = [
        [0.3689, 0.1170, 0.2673],
        [0.4699, 0.4387, 0.7470],
        [0.1091, 0.8732, 0.5547],
        [0.0381, 0.5743, 0.8828],
    ];
    const ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];
    let t = [(get(c, "lr").log10() + 4.0) / 3.0, get(c, "u"), get(c, "v")];
    let total: f64 = (0..4)
        .map(|i| {
            let inner: f64 = (0..3).map(|j| A[i][j] * (t[j] - P[i][j]).powi(2)).sum();
            -ALPHA[i] * (-inner).exp()
        })
        .sum();
    let offset = match c["optimizer"].as_str().unwrap() {
        "adam" => 0.0,
        "sgd" => 0.8,
        _ => 0.4,
    };
    total + offset
}

struct Function {
    name: &'static str,
    f: fn(&Config) -> f64,
    noise: f64,
    parameters: &'static str,
}

const FUNCTIONS: [Function; 3] = [
    Function { name: "forrester-1d", f: forrester, noise: 0.5, parameters: "  x: {min: 0.0, max: 1.0}\n" },
    Function {
        name: "branin-2d",
        f: branin,
        noise: 1.0,
        parameters: "  x1: {min: -5.0, max: 10.0}\n  x2: {min: 0.0, max: 15.0}\n",
    },
    Function {
        name: "hartmann-4d-categorical",
        f: hartmann_optimizer,
        noise: 0.1,
        parameters: "  lr: {distribution: log_uniform_values, min: 1.0e-4, max: 1.0e-1}\n  u: {min: 0.0, max: 1.0}\n  v: {min: 0.0, max: 1.0}\n  optimizer: {values: [adam, sgd, rmsprop]}\n",
    },
];

const BUDGETS: [usize; 2] = [20, 40];
const MAX_LIVE: [usize; 2] = [1, 4];

/// The best true value among the first b members, for each budget b, of one sweep.
fn run_sweep(function: &Function, method: &str, max_live: usize, seed: u64) -> Vec<f64> {
    let budget = *BUDGETS.iter().max().unwrap();
    let spec = SweepSpec::parse(&format!(
        "method: {method}\nworkflow: w\nmetric: {{name: loss}}\nrun_cap: {budget}\nseed: {seed}\nparameters:\n{}",
        function.parameters
    ))
    .unwrap();
    let mut members: Vec<Observed> = Vec::new();
    let mut in_flight: std::collections::VecDeque<usize> = Default::default();
    let next = |members: &mut Vec<Observed>, in_flight: &mut std::collections::VecDeque<usize>| {
        let k = members.len() as u64;
        let member = match method {
            "bayes" => suggest(&spec, members, k),
            _ => spec.member(k).unwrap(),
        };
        let values = member.values();
        members.push(Observed { values, seen: Seen::InFlight });
        in_flight.push_back(members.len() - 1);
    };
    for _ in 0..max_live.min(budget) {
        next(&mut members, &mut in_flight);
    }
    while let Some(done) = in_flight.pop_front() {
        let noisy = (function.f)(&members[done].values)
            + function.noise * Rng::keyed(10_000 + seed, done as u64, 7).normal();
        members[done].seen = Seen::Ended { counts: true, best: Some(noisy), worst: Some(noisy) };
        if members.len() < budget {
            next(&mut members, &mut in_flight);
        }
    }
    let truth: Vec<f64> = members.iter().map(|m| (function.f)(&m.values)).collect();
    BUDGETS.iter().map(|b| truth[..*b].iter().copied().fold(f64::INFINITY, f64::min)).collect()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

/// W&B's figures: {function: {max_live: {budget: [best by seed]}}}.
fn wandb_figures(seeds: u64) -> Option<Value> {
    if let Ok(path) = std::env::var("LACHESIS_BAYES_WANDB_JSON") {
        // The script may still be writing it (both run at once): wait for the whole document.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3600);
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            match serde_json::from_str(&text) {
                Ok(figures) => return Some(figures),
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_secs(5))
                }
                Err(err) => panic!("{path}: {err}"),
            }
        }
    }
    let python = std::env::var("LACHESIS_TEST_SWEEPS_PYTHON").ok()?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/bayes_bench.py");
    let out = std::process::Command::new(python)
        .args([script, "--seeds", &seeds.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "bayes_bench.py failed");
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
#[ignore = "minutes of one core: run by hand (see the module's doc)"]
fn bayes_benchmark() {
    let seeds: u64 = std::env::var("LACHESIS_BAYES_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let only = std::env::var("LACHESIS_BAYES_FUNCTIONS").ok();
    let chosen = |name: &str| only.as_ref().is_none_or(|only| only.split(',').any(|f| f.trim() == name));
    let mut ours = Vec::new();
    for function in FUNCTIONS.iter().filter(|function| chosen(function.name)) {
        for max_live in MAX_LIVE {
            let bayes: Vec<Vec<f64>> =
                (0..seeds).map(|seed| run_sweep(function, "bayes", max_live, seed)).collect();
            let random: Vec<Vec<f64>> =
                (0..seeds).map(|seed| run_sweep(function, "random", max_live, seed)).collect();
            eprintln!("{} max_live {max_live}: done", function.name);
            ours.push((function, max_live, bayes, random));
        }
    }
    let wandb = wandb_figures(seeds);
    println!(
        "median best value over {seeds} seeds (lower is better)\n{:<26} {:>4} {:>6} {:>10} {:>10} {:>10}",
        "function", "live", "budget", "lachesis", "W&B", "random"
    );
    let mut shortfalls = Vec::new();
    for (function, max_live, bayes, random) in &ours {
        let max_live = *max_live;
        for (i, budget) in BUDGETS.iter().enumerate() {
            let ours = median(&mut bayes.iter().map(|row| row[i]).collect::<Vec<_>>());
            let theirs = wandb.as_ref().map(|w| {
                // The same seeds as ours (the file may hold more).
                let column = w[function.name][max_live.to_string()][budget.to_string()].as_array().unwrap();
                median(
                    &mut column.iter().take(seeds as usize).map(|v| v.as_f64().unwrap()).collect::<Vec<_>>(),
                )
            });
            let drawn = median(&mut random.iter().map(|row| row[i]).collect::<Vec<_>>());
            println!(
                "{:<26} {:>4} {:>6} {:>10.4} {:>10} {:>10.4}",
                function.name,
                max_live,
                budget,
                ours,
                theirs.map_or("-".to_string(), |t| format!("{t:.4}")),
                drawn
            );
            if ours >= drawn {
                shortfalls.push(json!({"function": function.name, "max_live": max_live, "budget": budget, "against": "random"}));
            }
            if theirs.is_some_and(|theirs| ours > theirs) {
                shortfalls.push(json!({"function": function.name, "max_live": max_live, "budget": budget, "against": "W&B"}));
            }
        }
    }
    assert!(shortfalls.is_empty(), "lachesis' bayes is behind: {shortfalls:?}");
}
