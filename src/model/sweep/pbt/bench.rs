//! The PBT benchmark (ignored by default), a pure simulation of the decision code the daemon
//! runs: Ray Tune's own PBT benchmark trainer (`pbt_example.py`'s `PBTBenchmarkExample`), whose
//! best learning rate changes as it trains (a triangle over its accuracy: 0.001 at 0, 0.01 at
//! 100, 0.001 at 200; a step more than 3× off it loses accuracy), each member stepping in
//! turn, checkpointing every 5 steps; PBT exploits by [`decide`] at every step, the fixed
//! population keeps its draws. Same population, same draws, and the same steps in all: PBT's
//! members train 300 steps each plus what their exploits rewound, and each fixed member trains
//! its share of that total. Printed side by side: the median over seeds of the best member's
//! final accuracy.
//!
//! ```text
//! cargo test --lib model::sweep::pbt::bench -- --ignored --nocapture
//! ```

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{ExploitRecord, Line, decide};
use crate::model::RunState;
use crate::model::sweep::random::Rng;
use crate::model::sweep::{Member, SweepSpec};

const POPULATION: u64 = 8;
const STEPS: i64 = 300;
const CHECKPOINT_EVERY: i64 = 5;
const SEEDS: u64 = 41;

/// One step of Ray's benchmark trainer at `lr` from `accuracy`.
fn step(accuracy: f64, lr: f64, rng: &mut Rng) -> f64 {
    let midpoint = 100.0;
    let optimal = if accuracy < midpoint {
        0.01 * accuracy / midpoint
    } else {
        0.01 - 0.01 * (accuracy - midpoint) / midpoint
    };
    let optimal = optimal.clamp(0.001, 0.01);
    let q_err = lr.max(optimal) / lr.min(optimal);
    let mut next = accuracy;
    if q_err < 3.0 {
        next += (1.0 / q_err) * rng.unit();
    } else if lr > optimal {
        next -= (q_err - 3.0) * rng.unit();
    }
    (next + 2.0 * rng.normal()).max(0.0)
}

/// The best member's final accuracy, with PBT's exploits or without; the exploits made; the
/// steps trained in all (an exploit's loser trains again from the donor's checkpoint step).
fn simulate(spec: &SweepSpec, seed: u64, exploit: bool, steps: i64) -> (f64, usize, i64) {
    let pbt = spec.pbt.clone().unwrap();
    let metric = spec.metric.clone().unwrap();
    let mut members: Vec<Member> = (0..POPULATION)
        .map(|k| Member {
            sweep: Uuid::nil(),
            k,
            run: Uuid::from_u128(u128::from(k) + 1),
            version: 1,
            state: RunState::Running,
            attempt: 1,
            reason: None,
            stopped_by: None,
            started_at: Some(0),
            ended_at: None,
            suggestion: None,
            rerun_marked: false,
            tally: None,
        })
        .collect();
    let mut lines: BTreeMap<u64, Line> = (0..POPULATION).map(|k| (k, Line::default())).collect();
    let mut lineage: Vec<ExploitRecord> = Vec::new();
    // Each member's state (accuracy) at each checkpoint step, and now.
    let mut states: Vec<(i64, f64)> = vec![(0, 0.0); POPULATION as usize];
    let mut saved: Vec<Vec<(i64, f64)>> = vec![Vec::new(); POPULATION as usize];
    let mut noise = Rng::keyed(seed, u64::MAX, 0);
    let mut exploits = 0;
    let mut trained = 0;
    while members.iter().any(|m| m.state == RunState::Running) {
        for (at, member) in members.iter_mut().enumerate().filter(|(_, m)| m.state == RunState::Running) {
            // Its values now: its last exploit's, else its draw.
            let lr = match lineage.iter().rfind(|e| e.k == member.k) {
                Some(last) => last.values["lr"].as_f64().unwrap(),
                None => spec.member(member.k).unwrap().values()["lr"].as_f64().unwrap(),
            };
            let (step_now, accuracy) = states[at];
            let next = (step_now + 1, step(accuracy, lr, &mut noise));
            states[at] = next;
            trained += 1;
            let line = lines.get_mut(&member.k).unwrap();
            line.readings.push(next);
            if next.0 % CHECKPOINT_EVERY == 0 {
                saved[at].push(next);
                line.checkpoints.push((next.0, format!("{at}/{}", next.0)));
            }
            if next.0 >= steps {
                member.state = RunState::Completed;
            }
        }
        if !exploit {
            continue;
        }
        for e in decide(spec, &pbt, &metric, &members, &lines, &lineage) {
            let (loser, donor) = (e.k as usize, e.donor as usize);
            let state = saved[donor].iter().find(|(s, _)| *s == e.step).copied().unwrap();
            states[loser] = state;
            // Applied at once: the next attempt's readings start from the donor's checkpoint.
            let mut record = ExploitRecord::of(Uuid::nil(), &e, Uuid::nil(), Uuid::nil(), 1, 0);
            record.applied_at = Some(0);
            lineage.push(record);
            lines.get_mut(&e.k).unwrap().readings = vec![state];
            exploits += 1;
        }
    }
    (states.iter().map(|s| s.1).fold(f64::MIN, f64::max), exploits, trained)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[test]
#[ignore = "a benchmark: run it with --ignored --nocapture"]
fn pbt_ends_above_the_best_fixed_member_of_the_same_budget() {
    println!(
        "population {POPULATION}, {STEPS} steps a member, {SEEDS} seeds; best member's final accuracy (median)"
    );
    println!(
        "{:<28} {:>7} {:>7} {:>9} {:>9} {:>12}",
        "setting", "fixed", "pbt", "pbt wins", "exploits", "steps (pbt)"
    );
    for (name, extra) in [
        ("interval 20, quantile 0.25", "perturbation_interval: 20\n"),
        ("interval 10, quantile 0.25", "perturbation_interval: 10\n"),
        ("interval 20, quantile 0.5", "perturbation_interval: 20\nquantile_fraction: 0.5\n"),
    ] {
        let (mut fixed, mut pbt, mut wins, mut made, mut steps) = (Vec::new(), Vec::new(), 0, 0, Vec::new());
        for seed in 0..SEEDS {
            let spec = SweepSpec::parse(&format!(
                "method: pbt\nworkflow: w\nrun_cap: {POPULATION}\nseed: {seed}\nmetric: {{name: acc, goal: maximize}}\n{extra}\
                 parameters:\n  lr: {{min: 0.0001, max: 0.02}}\n"
            ))
            .unwrap();
            let (with, exploits, trained) = simulate(&spec, seed, true, STEPS);
            // The fixed population trains as many steps in all as PBT did (its rewinds count).
            let (without, _, _) =
                simulate(&spec, seed, false, (trained + POPULATION as i64 - 1) / POPULATION as i64);
            steps.push(trained as f64);
            wins += usize::from(with > without);
            made += exploits;
            fixed.push(without);
            pbt.push(with);
        }
        let (fixed, pbt) = (median(fixed), median(pbt));
        let budget = POPULATION as i64 * STEPS;
        println!(
            "{name:<28} {fixed:>7.1} {pbt:>7.1} {wins:>6}/{SEEDS} {:>9.1} {:>5.0} / {budget}",
            made as f64 / SEEDS as f64,
            median(steps)
        );
        assert!(pbt > fixed, "{name}: pbt {pbt} is not above fixed {fixed}");
    }
}
