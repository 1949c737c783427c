//! PBT's decision and explore as tables, and a property over random populations.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::json;

use uuid::Uuid;

use super::*;
use crate::model::sweep::random::Rng;

const SPEC: &str = "method: pbt\nworkflow: w\nrun_cap: 4\nmetric: {name: reward, goal: maximize}\n\
perturbation_interval: 10\nparameters:\n  lr: {distribution: log_uniform_values, min: 1.0e-5, max: 1.0e-2}\n  \
batch: {values: [16, 32, 64]}\n  steps: {value: 100}\n";

fn spec(text: &str) -> SweepSpec {
    SweepSpec::parse(text).unwrap_or_else(|err| panic!("{err}"))
}

/// A member as these tables write it: what [`decide`] reads of it, its [`Line`] and its
/// exploits, in one place ([`inputs`] splits it).
#[derive(Clone, Debug)]
struct Seen {
    k: u64,
    running: bool,
    readings: Vec<(i64, f64)>,
    checkpoints: Vec<(i64, String)>,
    values: BTreeMap<String, serde_json::Value>,
    /// The intervals it was exploited at (applied), with the reading it was compared by then.
    exploited: BTreeMap<i64, f64>,
}

fn member(k: u64, readings: &[(i64, f64)], checkpoints: &[i64]) -> Seen {
    Seen {
        k,
        running: true,
        readings: readings.to_vec(),
        checkpoints: checkpoints.iter().map(|s| (*s, format!("ckpt/{k}/{s}"))).collect(),
        values: BTreeMap::from([
            ("lr".to_string(), json!(0.001 * (k + 1) as f64)),
            ("batch".to_string(), json!(32)),
            ("steps".to_string(), json!(100)),
        ]),
        exploited: BTreeMap::new(),
    }
}

/// The decision's inputs from the members seen: each member (running or pending, its values
/// kept with it as a suggestion), its line, and its exploits, applied.
fn inputs(seen: &[Seen]) -> (Vec<Member>, BTreeMap<u64, Line>, Vec<ExploitRecord>) {
    let members = seen
        .iter()
        .map(|s| Member {
            sweep: Uuid::nil(),
            k: s.k,
            run: Uuid::from_u128(u128::from(s.k) + 1),
            version: 1,
            state: if s.running { RunState::Running } else { RunState::Pending },
            attempt: 1,
            reason: None,
            stopped_by: None,
            started_at: Some(0),
            ended_at: None,
            suggestion: Some(json!(s.values)),
            rerun_marked: false,
            tally: None,
        })
        .collect();
    let lines = seen
        .iter()
        .map(|s| (s.k, Line { readings: s.readings.clone(), checkpoints: s.checkpoints.clone() }))
        .collect();
    let exploits = seen
        .iter()
        .flat_map(|s| {
            s.exploited.iter().map(|(interval, score)| ExploitRecord {
                sweep: Uuid::nil(),
                k: s.k,
                run: Uuid::from_u128(u128::from(s.k) + 1),
                interval: *interval,
                boundary: interval * 10,
                donor: s.k,
                donor_run: Uuid::nil(),
                step: 0,
                path: String::new(),
                before: s.values.clone(),
                values: s.values.clone(),
                score: Some(*score),
                donor_score: None,
                attempt: 1,
                decided_at: 0,
                applied_at: Some(0),
            })
        })
        .collect();
    (members, lines, exploits)
}

fn decide_seen(spec: &SweepSpec, pbt: &Pbt, metric: &Metric, seen: &[Seen]) -> Vec<Exploit> {
    let (members, lines, exploits) = inputs(seen);
    decide(spec, pbt, metric, &members, &lines, &exploits)
}

/// Each exploit as (loser, interval, donor, checkpoint step).
type Decided = Vec<(u64, i64, u64, i64)>;

fn decided(spec: &SweepSpec, members: &[Seen]) -> Decided {
    let exploits = decide_seen(spec, spec.pbt.as_ref().unwrap(), spec.metric.as_ref().unwrap(), members);
    exploits.iter().map(|e| (e.k, e.interval, e.donor, e.step)).collect()
}

#[test]
fn the_keys_default_as_ray_tune_and_bad_ones_are_refused_in_one_line() {
    let pbt = spec(SPEC).pbt.unwrap();
    assert_eq!(
        (pbt.perturbation_interval, pbt.quantile_fraction, pbt.resample_probability, pbt.burn_in),
        (10, 0.25, 0.25, 0)
    );
    assert_eq!(pbt.perturbation_factors, vec![1.2, 0.8]);
    let refused = [
        ("quantile_fraction: 0.6\n", "quantile_fraction: 0.6 is not above 0 and at most 0.5"),
        ("quantile_fraction: 0\n", "quantile_fraction: 0.0 is not above 0"),
        ("quantile_fraction: .nan\n", "quantile_fraction: nan is not above 0"),
        ("resample_probability: 2\n", "resample_probability: 2.0 is not between 0 and 1"),
        ("perturbation_factors: []\n", "perturbation_factors: give 1 to 64 factors"),
        ("perturbation_factors: [-1]\n", "perturbation_factors: -1.0 is not a positive factor"),
        ("burn_in: -3\n", "burn_in: -3 is not between 0"),
        ("early_terminate: {type: hyperband, min_iter: 2}\n", "early_terminate: a pbt sweep's losers"),
    ];
    for (extra, said) in refused {
        let err = SweepSpec::parse(&format!("{SPEC}{extra}")).unwrap_err().to_string();
        assert!(err.starts_with(said), "{extra}: {err}");
        assert!(!err.contains('\n'), "{err}");
    }
    for (text, said) in [
        (
            SPEC.replace("perturbation_interval: 10\n", "perturbation_interval: 0\n"),
            "perturbation_interval: 0 is not",
        ),
        (SPEC.replace("perturbation_interval: 10\n", ""), "perturbation_interval: missing"),
        (SPEC.replace("run_cap: 4\n", ""), "run_cap: missing: a pbt sweep"),
        (SPEC.replace("metric: {name: reward, goal: maximize}\n", ""), "metric: missing: a pbt sweep"),
        (
            SPEC.replace("method: pbt", "method: random"),
            "method: perturbation_interval and the other PBT keys",
        ),
    ] {
        let err = SweepSpec::parse(&text).unwrap_err().to_string();
        assert!(err.starts_with(said), "{err}");
    }
    assert_eq!(spec(SPEC).members(), 4, "run_cap is the population");
    assert!(spec(SPEC).member(3).is_some(), "members start as random draws");
}

#[test]
fn the_bottom_quantile_continues_from_the_top_at_each_interval() {
    let spec = spec(SPEC);
    // Maximize: member 0 is worst, member 3 best; all past step 10; each top one checkpointed.
    let members: Vec<Seen> = (0..4).map(|k| member(k, &[(5, 0.0), (11, k as f64)], &[5, 10])).collect();
    // 4 members: ⌈4 · 0.25⌉ = 1 in each quantile; the donor's checkpoint at or before step 10.
    assert_eq!(decided(&spec, &members), vec![(0, 1, 3, 10)]);
    let table: Vec<(&str, Vec<Seen>, Decided)> = vec![
        ("one member alone is not compared", vec![member(0, &[(12, 1.0)], &[10])], vec![]),
        (
            "a member that has not reached the boundary takes no part",
            vec![
                member(0, &[(12, 1.0)], &[10]),
                member(1, &[(9, 0.0)], &[5]),
                member(2, &[(10, 2.0)], &[10]),
            ],
            vec![(0, 1, 2, 10)],
        ),
        (
            "a pending member is not behind",
            {
                let mut waiting = member(0, &[(30, -5.0)], &[10]);
                waiting.running = false;
                vec![waiting, member(1, &[(10, 1.0)], &[10]), member(2, &[(10, 2.0)], &[10])]
            },
            vec![(1, 1, 2, 10)],
        ),
        (
            "once per interval",
            {
                let mut done = member(0, &[(15, 0.0)], &[]);
                done.exploited.insert(1, 0.0);
                vec![done, member(1, &[(10, 1.0)], &[10])]
            },
            vec![],
        ),
        (
            "a member exploited at the boundary still counts there: the next worst is not exploited in its place",
            {
                let mut out = member(0, &[(3, 0.0)], &[]);
                out.running = false;
                out.exploited.insert(1, 0.5);
                vec![out, member(1, &[(10, 1.0)], &[10]), member(2, &[(10, 2.0)], &[10])]
            },
            vec![],
        ),
        (
            "members are compared by their first readings past the boundary, not their latest",
            vec![member(0, &[(10, 5.0), (14, 0.0)], &[10]), member(1, &[(11, 1.0), (14, 9.0)], &[10])],
            vec![(1, 1, 0, 10)],
        ),
        (
            "the next interval counts again",
            {
                let mut done = member(0, &[(21, 0.0)], &[]);
                done.exploited.insert(1, 0.0);
                vec![done, member(1, &[(20, 1.0)], &[10, 20, 25])]
            },
            vec![(0, 2, 1, 20)],
        ),
        (
            "a donor without a checkpoint at or before the boundary gives none",
            vec![member(0, &[(10, 0.0)], &[]), member(1, &[(12, 1.0)], &[12])],
            vec![],
        ),
        (
            "before the first boundary nothing",
            vec![member(0, &[(9, 0.0)], &[]), member(1, &[(9, 1.0)], &[5])],
            vec![],
        ),
    ];
    for (what, members, expected) in table {
        assert_eq!(decided(&spec, &members), expected, "{what}");
    }
    let burn_in = self::spec(&format!("{SPEC}burn_in: 20\n"));
    let members = vec![member(0, &[(15, 0.0)], &[10]), member(1, &[(15, 1.0)], &[10])];
    assert_eq!(decided(&burn_in, &members), vec![], "a boundary below burn_in");
    let minimize = self::spec(&SPEC.replace("maximize", "minimize"));
    assert_eq!(decided(&minimize, &members), vec![(1, 1, 0, 10)], "minimize: the higher one loses");
}

#[test]
fn quantiles_are_sized_as_ray_sizes_them() {
    let seen: Vec<Seen> = (0..10).map(|k| member(k, &[(10, k as f64)], &[])).collect();
    let spec = spec(SPEC);
    let (members, lines, exploits) = inputs(&seen);
    let standings: Vec<Standing<'_>> =
        members.iter().map(|m| Standing::of(&spec, m, &lines[&m.k], &exploits)).collect();
    for (count, fraction, size) in
        [(2, 0.25, 1), (4, 0.5, 2), (5, 0.5, 2), (10, 0.25, 3), (10, 0.01, 1), (3, 0.5, 1)]
    {
        let (bottom, top) = quantiles(&standings[..count], 10, 10, fraction, Goal::Maximize).unwrap();
        assert_eq!((bottom.len(), top.len()), (size, size), "{count} at {fraction}");
        assert_eq!(bottom[0].0.k, 0);
        assert_eq!(top.last().unwrap().0.k, count as u64 - 1);
    }
}

#[test]
fn explore_perturbs_numbers_moves_choices_and_resamples() {
    let spec = spec(SPEC);
    let mut pbt = spec.pbt.clone().unwrap();
    let values = member(0, &[], &[]).values;
    pbt.resample_probability = 0.0;
    for seed in 0..50 {
        let explored = explore(&spec.parameters, &pbt, &values, &mut Rng::keyed(seed, 0, 0));
        let lr = explored["lr"].as_f64().unwrap();
        assert!([0.001 * 1.2, 0.001 * 0.8].iter().any(|x| (x - lr).abs() < 1e-15), "{lr}");
        assert!([json!(16), json!(64)].contains(&explored["batch"]), "a neighbour of 32");
        assert_eq!(explored["steps"], json!(100), "constants stay");
    }
    // At an end of the list, the move down clamps.
    let at_end = BTreeMap::from([("batch".to_string(), json!(64))]);
    let moved: BTreeSet<String> = (0..40)
        .map(|seed| {
            explore(&spec.parameters, &pbt, &at_end, &mut Rng::keyed(seed, 0, 0))["batch"].to_string()
        })
        .collect();
    assert_eq!(moved, BTreeSet::from(["32".to_string(), "64".to_string()]));
    pbt.resample_probability = 1.0;
    let resampled = explore(&spec.parameters, &pbt, &values, &mut Rng::keyed(1, 0, 0));
    let lr = resampled["lr"].as_f64().unwrap();
    assert!((1e-5..=1e-2).contains(&lr) && lr != 0.001 * 1.2 && lr != 0.001 * 0.8);
    let ints = self::spec(&SPEC.replace("batch: {values: [16, 32, 64]}", "batch: {min: 10, max: 100}"));
    let mut pbt = ints.pbt.clone().unwrap();
    pbt.resample_probability = 0.0;
    let int_values = BTreeMap::from([("batch".to_string(), json!(33))]);
    let batch = explore(&ints.parameters, &pbt, &int_values, &mut Rng::keyed(3, 0, 0))["batch"].clone();
    assert!(batch == json!(39) || batch == json!(26), "int(33 · factor), as Python truncates: {batch}");
    assert_eq!(
        changes(
            &values,
            &BTreeMap::from([("lr".to_string(), json!(1.2e-5)), ("steps".to_string(), json!(100))])
        ),
        "lr 0.001 → 1.2e-05"
    );
}

fn population() -> impl Strategy<Value = Vec<Seen>> {
    let one = (
        any::<bool>(),
        proptest::collection::vec((0i64..60, -5.0f64..5.0), 0..6),
        proptest::collection::vec(0i64..60, 0..4),
        0i64..6,
    );
    proptest::collection::vec(one, 0..9).prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(k, (running, mut readings, mut checkpoints, exploited))| {
                readings.sort_by_key(|r| r.0);
                checkpoints.sort();
                let mut m = member(k as u64, &readings, &checkpoints);
                m.running = running;
                m.exploited = (1..exploited).map(|n| (n, -1.0)).collect();
                m
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn exploits_hold_to_the_rule(members in population(), fraction in 0.05f64..=0.5, seed in 0u64..1000) {
        let spec = spec(&format!("{SPEC}quantile_fraction: {fraction}\nseed: {seed}\n"));
        let pbt = spec.pbt.clone().unwrap();
        let metric = spec.metric.clone().unwrap();
        let exploits = decide_seen(&spec, &pbt, &metric, &members);
        prop_assert_eq!(&exploits, &decide_seen(&spec, &pbt, &metric, &members), "reproducible");
        let losers: BTreeSet<u64> = exploits.iter().map(|e| e.k).collect();
        prop_assert_eq!(losers.len(), exploits.len(), "a member is exploited once a pass");
        for e in &exploits {
            let loser = &members[e.k as usize];
            let donor = &members[e.donor as usize];
            prop_assert!(loser.running && donor.running);
            prop_assert!(!loser.exploited.contains_key(&e.interval));
            prop_assert!(loser.readings.last().unwrap().0 >= e.boundary && e.boundary >= 10);
            prop_assert!(donor.readings.last().unwrap().0 >= e.boundary);
            prop_assert!(
                !exploits.iter().any(|other| other.k == e.donor && other.boundary == e.boundary),
                "a donor is never a loser of the same boundary"
            );
            prop_assert!(e.step <= e.boundary && donor.checkpoints.contains(&(e.step, e.path.clone())));
            prop_assert!(e.donor_score >= e.score, "{} below {}", e.donor_score, e.score);
            prop_assert!([json!(16), json!(32), json!(64)].contains(&e.values["batch"]));
            let taking_part = members.iter().filter(|m| m.running && m.readings.last().is_some_and(|r| r.0 >= e.boundary)).count();
            prop_assert!(taking_part >= 2);
        }
    }
}

proptest! {
    /// Hostile PBT keys: refused in one line or taken, never a panic; a spec taken explores
    /// any value without one.
    #[test]
    fn hostile_pbt_keys_are_refused_in_one_line_or_explored_safely(
        interval in proptest::sample::select(vec!["0", "-1", "1", "10", "9223372036854775807", "1.5", "x", "[]", "null"]),
        fraction in proptest::sample::select(vec!["0", "0.5", "0.50001", "-0.1", ".nan", ".inf", "1e-300", "x"]),
        resample in proptest::sample::select(vec!["0", "1", "1.1", "-0", ".nan", "x"]),
        factors in proptest::sample::select(vec!["[]", "[1.2, 0.8]", "[0]", "[1e308]", "[.nan]", "2", "[1e-300]"]),
        burn_in in proptest::sample::select(vec!["0", "-1", "5", "1e3", "9223372036854775807"]),
        parameter in proptest::sample::select(vec!["{values: [1, 2]}", "{min: 0, max: 9223372036854775807}", "{min: -1.0e300, max: 1.0e300}", "{values: [a, {b: 1}]}", "{value: 3}", "{distribution: normal, mu: 0, sigma: 1.0e300}"]),
        current in proptest::sample::select(vec![json!(1), json!(9_223_372_036_854_775_807i64), json!(-1.0e308), json!("a"), json!(null), json!([1])]),
    ) {
        let text = format!(
            "method: pbt\nworkflow: w\nrun_cap: 4\nmetric: {{name: r}}\nperturbation_interval: {interval}\n\
             quantile_fraction: {fraction}\nresample_probability: {resample}\nperturbation_factors: {factors}\n\
             burn_in: {burn_in}\nparameters:\n  p: {parameter}\n"
        );
        match SweepSpec::parse(&text) {
            Err(err) => prop_assert!(!err.to_string().contains('\n'), "{}", err),
            Ok(spec) => {
                let pbt = spec.pbt.clone().unwrap();
                prop_assert!(pbt.quantile_fraction > 0.0 && pbt.quantile_fraction <= 0.5);
                prop_assert!(pbt.perturbation_interval >= 1);
                let values = BTreeMap::from([("p".to_string(), current)]);
                for seed in 0..8 {
                    let explored = explore(&spec.parameters, &pbt, &values, &mut Rng::keyed(seed, 0, 0));
                    prop_assert!(explored.contains_key("p"));
                }
            }
        }
    }
}
