//! The sweep file's parse, its members and the hyperband rule, as a user meets them.
//! W&B's own decisions are compared in tests/it/sweep_reference.rs.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn parse(text: &str) -> SweepSpec {
    SweepSpec::parse(text).unwrap_or_else(|err| panic!("{err}\n{text}"))
}

fn error(text: &str) -> String {
    SweepSpec::parse(text).map(|spec| format!("parsed: {spec:?}")).unwrap_or_else(|err| err.to_string())
}

const HEAD: &str = "workflow: demo\n";

/// A goal is read and written as W&B spells it: the sweep file, JSON and what people read.
#[test]
fn a_goal_is_written_as_it_is_read() {
    for goal in Goal::ALL {
        let text = format!(
            "method: grid\nworkflow: w\nmetric: {{name: m, goal: {goal}}}\nparameters: {{a: {{value: 1}}}}\n"
        );
        assert_eq!(parse(&text).metric.unwrap().goal, goal);
        assert_eq!(serde_json::to_value(goal).unwrap(), json!(goal.as_str()));
    }
    assert_eq!(serde_json::to_value(Goal::Maximize).unwrap(), json!("maximize"));
}

#[test]
fn a_wandb_sweep_file_parses_with_its_keys() {
    let spec = parse(
        "name: lr-search
description: find a learning rate
project: rl
entity: team
method: random
metric: {name: reward, goal: maximize, target: 0.9}
run_cap: 12
early_terminate: {type: hyperband, min_iter: 3}
parameters:
  lr: {distribution: log_uniform_values, min: 1.0e-5, max: 1.0e-2}
  batch: {values: [16, 32, 64]}
  rank: {min: 4, max: 64}
  kl: {min: 0.0, max: 0.1}
  optimizer:
    parameters:
      beta1: {value: 0.9}
      name: {values: [adam, sgd], probabilities: [0.75, 0.25], set: optimizer.name}
workflow: grpo
priority: 3
needs: {gpu: 1}
max_live: 4
seed: 7
",
    );
    assert_eq!(spec.method, Method::Random);
    let metric = spec.metric.clone().unwrap();
    assert_eq!((metric.name.as_str(), metric.goal, metric.target), ("reward", Goal::Maximize, Some(0.9)));
    let paths: Vec<&str> = spec.parameters.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["batch", "kl", "lr", "optimizer.beta1", "optimizer.name", "rank"]);
    let domains: Vec<&Domain> = spec.parameters.iter().map(|p| &p.domain).collect();
    assert_eq!(domains[1], &Domain::Uniform { min: 0.0, max: 0.1 });
    assert_eq!(domains[5], &Domain::IntUniform { min: 4, max: 64 });
    assert_eq!(domains[3], &Domain::Constant(json!(0.9)));
    assert_eq!(spec.parameters[4].target, Target::Set("optimizer.name".into()));
    assert_eq!(spec.parameters[2].target, Target::Var("lr".into()));
    assert_eq!(metric.best(&[0.2, f64::NAN, 0.7, f64::INFINITY, 0.5]), Some(0.7));
    assert!(metric.reaches_target(0.95) && !metric.reaches_target(0.85));
    let loss = Metric { name: "loss".into(), goal: Goal::Minimize, target: Some(0.1) };
    assert_eq!(loss.best(&[0.3, 0.2, 0.4]), Some(0.2));
    assert_eq!(loss.best(&[f64::NAN]), None);
    assert!(loss.reaches_target(0.1) && !loss.reaches_target(0.11));
    let hyperband = spec.early_terminate.unwrap();
    assert_eq!((hyperband.eta, hyperband.strict), (3.0, true));
    assert_eq!(&hyperband.bands()[..4], [3, 9, 27, 81]);
    assert_eq!(
        (spec.run_cap, spec.members(), spec.max_live, spec.seed, spec.priority),
        (Some(12), 12, Some(4), 7, 3)
    );
    assert_eq!(spec.needs.iter().collect::<Vec<_>>(), [(&"gpu".to_string(), &1)]);
    assert_eq!(spec.var_names().collect::<Vec<_>>(), ["batch", "kl", "lr", "optimizer.beta1", "rank"]);
    assert_eq!(spec.config_keys().collect::<Vec<_>>(), ["optimizer.name"]);
    assert_eq!((spec.program.as_ref(), spec.project.as_deref()), (None, Some("rl")));
}

#[test]
fn a_program_sweep_runs_w_and_b_s_command_and_refuses_what_it_cannot_honour() {
    let spec = parse(
        "program: train.py\nmethod: grid\nproject: rl\nmetrics: {log: {stage: program, pattern: 'r=(?P<reward>\\S+) s=(?P<step>\\d+)'}}\n\
         parameters: {lr: {values: [0.1, 0.01]}}\n",
    );
    assert_eq!(spec.workflow, super::PROGRAM_WORKFLOW);
    assert_eq!(spec.program.as_ref().and_then(|p| p.program.as_deref()), Some("train.py"));
    assert!(spec.metrics.is_some() && spec.directory.is_none());
    let refused = |text: &str| SweepSpec::parse(text).unwrap_err().to_string();
    let grid = "method: grid\nparameters: {lr: {values: [1]}}\n";
    assert!(refused(&format!("program: t.py\nworkflow: demo\n{grid}")).contains("either `workflow` or"));
    assert!(refused(grid).contains("workflow: missing"));
    assert!(
        refused(&format!("workflow: demo\nmetrics: {{log: {{stage: a, pattern: x}}}}\n{grid}"))
            .contains("metrics: applies to a `program:` sweep")
    );
    assert!(
        refused(&format!("program: t.py\ndirectory: rel/dir\n{grid}"))
            .contains("directory: must be an absolute path")
    );
    assert!(refused(&format!("program: t.py\nenv: e\n{grid}")).contains("run no environment"));
    assert!(
        refused("program: t.py\nmethod: grid\nparameters: {opt: {parameters: {lr: {values: [1]}}}}\n")
            .contains("flat parameters")
    );
    assert!(
        refused("program: t.py\nmethod: grid\nparameters: {lr: {values: [1], var: x}}\n")
            .contains("`--name=value`")
    );
    assert!(refused(&format!("program: t.py\ncommand: ['${{bogus}}']\n{grid}")).contains("unknown macro"));
}

#[test]
fn bad_files_get_one_line_naming_the_key() {
    let random = |params: &str| format!("{HEAD}method: random\nrun_cap: 4\nparameters:\n{params}");
    let table = [
        (
            format!("{HEAD}method: bayes\nparameters: {{a: {{value: 1.0}}}}\n"),
            "run_cap: missing: a bayes sweep needs it (at most 10000)",
        ),
        (
            "workflow: w\nmethod: bayes\nrun_cap: 3\nparameters: {a: {min: 1, max: 2}}\n".to_string(),
            "metric: missing: a bayes sweep fits a model of it",
        ),
        (
            format!(
                "{HEAD}method: bayes\nmetric: {{name: loss}}\nrun_cap: 3\nparameters: {{a: {{value: 1}}}}\n"
            ),
            "parameters: a bayes sweep needs one that is not a constant (`value:`)",
        ),
        (
            format!(
                "{HEAD}method: bayes\nmetric: {{name: loss}}\nrun_cap: 3\nparameters: {{a: {{values: [1, {{b: 2}}]}}}}\n"
            ),
            "parameters.a.values: value 1 is a mapping, which bayes cannot place (W&B reads one as nested parameters): use `parameters:` inside it, or name the choices",
        ),
        (
            format!("{HEAD}method: hill\nparameters: {{a: {{value: 1}}}}\n"),
            "method: unknown method 'hill' (expected grid, random, bayes or pbt)",
        ),
        (random("  lr: {min: 0.1, max: 0.01}\n"), "parameters.lr: min 0.1 is not below max 0.01"),
        (random("  lr: {min: 3, max: 3}\n"), "parameters.lr: min 3 is not below max 3"),
        (random("  lr: {min: .nan, max: 1.0}\n"), "parameters.lr.min: nan is not a finite number"),
        (random("  lr: {min: 0.0, max: .inf}\n"), "parameters.lr.max: inf is not a finite number"),
        (
            random("  lr: {distribution: q_uniform, min: 0, max: 1, q: 0}\n"),
            "parameters.lr.q: 0 must be above 0",
        ),
        (
            random("  lr: {distribution: lognormal}\n"),
            "parameters.lr: unknown distribution 'lognormal' (expected one of:",
        ),
        (
            random("  lr: {distribution: uniform, min: 0, max: 1, mu: 2}\n"),
            "parameters.lr.mu: does not apply to distribution uniform",
        ),
        (
            random("  lr: {distribution: uniform, min: 0}\n"),
            "parameters.lr: missing max (distribution uniform needs min and max)",
        ),
        (
            random("  lr: {distribution: log_uniform_values, min: 0, max: 1}\n"),
            "parameters.lr.min: 0.0 must be above 0",
        ),
        (random("  lr: {values: []}\n"), "parameters.lr.values: is empty"),
        (
            random("  lr: {values: [1, 2], probabilities: [0.5, 0.6]}\n"),
            "parameters.lr.probabilities: sum to 1.1, not 1",
        ),
        (random("  lr: {}\n"), "parameters.lr: missing value, values, min and max, or a distribution"),
        (random("  lr: {value: 1, lr: 2}\n"), "parameters.lr: unknown field `lr`"),
        (random("  9lr: {value: 1}\n"), "parameters.9lr: a parameter name is"),
        (
            random("  lr: {value: 1, var: x}\n  mu: {value: 1, var: x}\n"),
            "parameters.mu: var x is the target of another parameter",
        ),
        (
            format!("{HEAD}method: random\nparameters: {{a: {{value: 1}}}}\n"),
            "run_cap: missing: a random sweep needs it (at most 10000)",
        ),
        (
            format!("{HEAD}method: grid\nrun_cap: 0\nparameters: {{a: {{value: 1}}}}\n"),
            "run_cap: 0 is not between 1 and 10000",
        ),
        (
            format!("{HEAD}method: grid\nrun_cap: 10001\nparameters: {{a: {{value: 1}}}}\n"),
            "run_cap: 10001 is not between 1 and 10000",
        ),
        (
            format!("{HEAD}method: grid\nparameters: {{a: {{min: 0, max: 100}}, b: {{min: 0, max: 100}}}}\n"),
            "parameters: the grid has 10201 points; a sweep runs at most 10000 (`run_cap: N` with `grid: first` runs its first N)",
        ),
        (
            format!(
                "{HEAD}method: grid\nrun_cap: 3\nparameters: {{a: {{values: [1, 2]}}, b: {{values: [1, 2]}}}}\n"
            ),
            "run_cap: the grid has 4 points and run_cap is 3; add `grid: first` to run its first 3 (W&B's order), or raise run_cap",
        ),
        (
            format!(
                "{HEAD}method: grid\nrun_cap: 3\ngrid: all\nparameters: {{a: {{min: 0, max: 1000000000}}}}\n"
            ),
            "run_cap: the grid has 1000000001 points and run_cap is 3; add `grid: first`",
        ),
        (
            format!("{HEAD}method: grid\ngrid: first\nparameters: {{a: {{values: [1, 2]}}}}\n"),
            "grid: first needs run_cap: how many of the grid's points to run",
        ),
        (
            format!("{HEAD}method: grid\nrun_cap: 1\ngrid: some\nparameters: {{a: {{values: [1, 2]}}}}\n"),
            "grid: 'some' is not all or first",
        ),
        (
            format!("{HEAD}method: random\nrun_cap: 1\ngrid: first\nparameters: {{a: {{values: [1, 2]}}}}\n"),
            "grid: applies to method grid only",
        ),
        (
            format!("{HEAD}method: grid\nparameters: {{a: {{min: 0.0, max: 1.0}}}}\n"),
            "parameters.a: distribution uniform cannot be walked by a grid",
        ),
        (
            format!("{HEAD}method: grid\nparameters: {{a: {{values: [1, 2], probabilities: [0.5, 0.5]}}}}\n"),
            "parameters.a: distribution categorical_w_probabilities cannot",
        ),
        (
            format!(
                "{HEAD}method: grid\nmetric: {{name: loss}}\nearly_terminate: {{type: hyperband, min_iter: 3, eta: 1}}\nparameters: {{a: {{value: 1}}}}\n"
            ),
            "early_terminate.eta: 1.0 must be above 1",
        ),
        (
            format!(
                "{HEAD}method: grid\nmetric: {{name: loss}}\nearly_terminate: {{type: hyperband, max_iter: 27}}\nparameters: {{a: {{value: 1}}}}\n"
            ),
            "early_terminate: missing s",
        ),
        (
            format!(
                "{HEAD}method: grid\nmetric: {{name: loss}}\nearly_terminate: {{type: hyperband, max_iter: 2, s: 3, eta: 3}}\nparameters: {{a: {{value: 1}}}}\n"
            ),
            "early_terminate: no band is at least 1",
        ),
        (
            format!(
                "{HEAD}method: grid\nearly_terminate: {{type: hyperband, min_iter: 3}}\nparameters: {{a: {{value: 1}}}}\n"
            ),
            "metric: missing: early_terminate compares members by it",
        ),
        (
            format!(
                "{HEAD}method: grid\nmetric: {{name: loss, goal: lower}}\nparameters: {{a: {{value: 1}}}}\n"
            ),
            "metric.goal: 'lower' is not minimize or maximize",
        ),
        (
            "method: grid\nparameters: {a: {value: 1}}\n".to_string(),
            "workflow: missing: name the workflow each member runs",
        ),
        (
            format!("{HEAD}method: grid\nparameters: {{a: {{values: [2, x, 2.0]}}}}\n"),
            "parameters.a.values: 2.0 is listed twice (a grid point runs once)",
        ),
        (
            format!("{HEAD}method: grid\nparameters: {{a: {{value: 1}}}}\nmetric_s: []\n"),
            "metric_s: unknown field `metric_s`",
        ),
        ("[1, 2".to_string(), "line"),
        (
            random("  lr: 0.1\n"),
            "parameters.lr: invalid type: floating point `0.1`, expected a parameter: a mapping with",
        ),
        (random("  lr: {min: 1, max: x}\n"), "parameters.lr: min, max and q must be numbers"),
        (random("  g: {parameters: {}}\n"), "parameters.g.parameters: no parameter is given"),
        (format!("{HEAD}method: grid\nneeds: {{'a b': 1}}\nparameters: {{a: {{value: 1}}}}\n"), "needs: "),
        (
            "workflow: w\nparameters: {a: {value: 1}}\n".to_string(),
            "method: missing: grid, random, bayes or pbt",
        ),
    ];
    for (text, want) in table {
        let got = error(&text);
        assert!(got.starts_with(want), "got {got:?}, want {want:?}\n{text}");
        assert!(!got.contains('\n'), "{got:?}");
    }
}

#[test]
fn a_grid_walks_w_and_b_order_with_the_last_parameter_fastest() {
    let spec = parse(&format!(
        "{HEAD}method: grid
parameters:
  z: {{values: [b, a]}}
  c: {{value: 7}}
  a: {{min: 1, max: 2}}
  m: {{distribution: q_uniform, min: 0, max: 0.3, q: 0.1}}
"
    ));
    assert_eq!(spec.members(), 2 * 3 * 2);
    let members: Vec<Vec<Value>> = (0..spec.members())
        .map(|k| spec.member(k).unwrap().assignments.into_iter().map(|a| a.value).collect())
        .collect();
    assert_eq!(members[0], [json!(1), json!(7), json!(0.0), json!("b")]);
    assert_eq!(members[1], [json!(1), json!(7), json!(0.0), json!("a")]);
    assert_eq!(members[2], [json!(1), json!(7), json!(0.1), json!("b")]);
    assert_eq!(members[11], [json!(2), json!(7), json!(0.2), json!("a")]);
    assert!(spec.member(12).is_none());
    let member = spec.member(3).unwrap();
    assert_eq!(member.vars()["m"], "0.1");
    assert_eq!(member.vars()["z"], "a");
}

#[test]
fn a_grid_runs_its_first_points_only_when_the_file_says_so() {
    let spec = parse(&format!(
        "{HEAD}method: grid\nrun_cap: 5\ngrid: first\nparameters: {{a: {{min: 0, max: 1000000000}}}}\n"
    ));
    assert_eq!((spec.grid, spec.members()), (GridPoints::First, 5));
    assert_eq!(spec.member(4).unwrap().values()["a"], json!(4));
    // A run_cap at or above the grid's size is a bound, not a cut: every point runs.
    let whole = parse(&format!("{HEAD}method: grid\nrun_cap: 9\nparameters: {{a: {{values: [1, 2, 3]}}}}\n"));
    assert_eq!((whole.grid, whole.members()), (GridPoints::All, 3));
    let first = parse(&format!(
        "{HEAD}method: grid\nrun_cap: 3\ngrid: first\nparameters: {{a: {{values: [1, 2, 3]}}}}\n"
    ));
    assert_eq!(first.members(), 3);
}

#[test]
fn a_random_member_is_a_function_of_seed_and_index() {
    let text = |seed: u64| {
        format!(
            "{HEAD}method: random\nrun_cap: 50\nseed: {seed}\nparameters:\n  lr: {{distribution: log_uniform_values, min: 1.0e-5, max: 1.0e-1}}\n  b: {{values: [1, 2, 3]}}\n"
        )
    };
    let spec = parse(&text(1));
    let again = parse(&text(1));
    assert_eq!(spec.member(17), again.member(17));
    assert_ne!(spec.member(17), parse(&text(2)).member(17));
    assert_ne!(spec.member(17).unwrap().values(), spec.member(18).unwrap().values());
    let lr = spec.member(3).unwrap().vars()["lr"].clone();
    assert_eq!(lr.parse::<f64>().unwrap().to_string().parse::<f64>().unwrap(), lr.parse::<f64>().unwrap());
    assert!(spec.member(50).is_none());
}

#[test]
fn a_set_parameter_reaches_the_config_with_its_type() {
    let spec = parse(&format!(
        "{HEAD}method: grid\nparameters:\n  lr: {{values: [0.001], set: trainer.lr}}\n  n: {{value: 4, var: group_size}}\n"
    ));
    let member = spec.member(0).unwrap();
    assert_eq!(member.config()["trainer.lr"], json!(0.001));
    assert_eq!(member.vars()["group_size"], "4");
    assert_eq!(member.vars().len(), 1);
}

fn series(id: &str, running: bool, values: &[f64]) -> (String, bool, Vec<f64>) {
    (id.to_string(), running, values.to_vec())
}

fn stops(
    members: &[(String, bool, Vec<f64>)],
    goal: Goal,
    hyperband: &Hyperband,
) -> Vec<(String, u64, f64, f64)> {
    let series: Vec<Series<String>> = members
        .iter()
        .map(|(id, running, values)| Series { id: id.clone(), running: *running, values })
        .collect();
    let metric = Metric { name: "loss".into(), goal, target: None };
    stop_runs(&series, &metric, hyperband).into_iter().map(|s| (s.id, s.band, s.value, s.threshold)).collect()
}

#[test]
fn hyperband_matches_the_example_of_w_and_b_docs() {
    // The docstring of sweeps.hyperband_stopping.hyperband_stop_runs.
    let members = [
        series("a", false, &[10.0, 9.0]),
        series("b", true, &[10.0, 10.0]),
        series("c", true, &[10.0, 8.0, 8.0]),
        series("d", true, &[10.0, 7.0, 7.0]),
        series("e", false, &[10.0, 6.0, 6.0]),
    ];
    let hyperband = Hyperband { bands: Bands::MaxIter { max_iter: 5, s: 2 }, eta: 2.0, strict: true };
    assert_eq!(hyperband.bands(), [1, 2]);
    assert_eq!(stops(&members, Goal::Minimize, &hyperband), [("b".to_string(), 2, 10.0, 8.0)]);
}

#[test]
fn hyperband_negates_for_maximize_and_says_why() {
    let members = [
        series("low", true, &[0.1, 0.2, 0.3]),
        series("high", true, &[0.5, 0.6, 0.9]),
        series("mid", false, &[0.4, 0.5, f64::NAN, 0.6]),
    ];
    let hyperband = Hyperband { bands: Bands::MinIter(3), eta: 3.0, strict: false };
    let series: Vec<Series<&str>> = members
        .iter()
        .map(|(id, running, values)| Series { id: id.as_str(), running: *running, values })
        .collect();
    let metric = Metric { name: "reward".into(), goal: Goal::Maximize, target: None };
    let stopped = stop_runs(&series, &metric, &hyperband);
    assert_eq!(stopped.len(), 1);
    assert_eq!(
        stopped[0].reason("reward"),
        "best reward 0.3 by iteration 3 is worse than the band-3 threshold 0.6"
    );
    let strict = Stop { strict: true, ..stopped[0].clone() };
    assert_eq!(strict.reason("reward"), "reward 0.3 at iteration 3 is worse than the band-3 threshold 0.6");
}

fn arbitrary_parameter() -> impl Strategy<Value = String> {
    prop_oneof![
        (-5i64..5, 1i64..20).prop_map(|(min, span)| format!("{{min: {min}, max: {}}}", min + span)),
        (-5.0f64..5.0, 0.01f64..10.0)
            .prop_map(|(min, span)| format!("{{min: {min:?}, max: {:?}}}", min + span)),
        (-5.0f64..5.0, 0.01f64..10.0, 0.001f64..3.0).prop_map(|(min, span, q)| format!(
            "{{distribution: q_uniform, min: {min:?}, max: {:?}, q: {q:?}}}",
            min + span
        )),
        (-5i64..5, 1i64..20, 1i64..4).prop_map(|(min, span, q)| format!(
            "{{distribution: q_uniform, min: {min}, max: {}, q: {q}}}",
            min + span
        )),
        (1e-8f64..1.0, 1.0f64..1e3).prop_map(|(min, factor)| format!(
            "{{distribution: log_uniform_values, min: {min:?}, max: {:?}}}",
            min * (1.0 + factor)
        )),
        (1e-8f64..1.0, 1.0f64..1e3).prop_map(|(min, factor)| format!(
            "{{distribution: inv_log_uniform_values, min: {min:?}, max: {:?}}}",
            min * (1.0 + factor)
        )),
        (-10.0f64..10.0, 0.0f64..3.0)
            .prop_map(|(mu, sigma)| format!("{{distribution: normal, mu: {mu:?}, sigma: {sigma:?}}}")),
        (-3.0f64..3.0, 0.0f64..2.0)
            .prop_map(|(mu, sigma)| format!("{{distribution: log_normal, mu: {mu:?}, sigma: {sigma:?}}}")),
        (0.01f64..10.0, 0.01f64..10.0)
            .prop_map(|(a, b)| format!("{{distribution: beta, a: {a:?}, b: {b:?}}}")),
        proptest::collection::vec(0i64..100, 1..5).prop_map(|values| format!("{{values: {values:?}}}")),
        // Extremes: bounds whose span overflows, and the largest quantum ranges accepted.
        Just("{min: -1.0e308, max: 1.0e308}".to_string()),
        Just("{min: -9223372036854775808, max: 9223372036854775807}".to_string()),
        Just("{distribution: q_uniform, min: -1.0e300, max: 1.0e300, q: 1.0e286}".to_string()),
        Just("{distribution: log_uniform, min: -700, max: 700}".to_string()),
        Just("{distribution: log_normal, mu: 600, sigma: 11}".to_string()),
    ]
}

/// `value` lies in what `domain` declares.
fn within(domain: &Domain, value: &Value) -> bool {
    let x = value.as_f64().unwrap_or(f64::NAN);
    let slack = |q: &Option<Quantum>| q.map_or(0.0, |q| q.q / 2.0 + 1e-9);
    match domain {
        Domain::Constant(constant) => value == constant,
        Domain::Categorical { values, .. } => values.contains(value),
        Domain::IntUniform { min, max } => value.as_i64().is_some_and(|v| (*min..=*max).contains(&v)),
        Domain::Uniform { min, max } => (*min..=*max).contains(&x),
        Domain::QUniform { min, max, q } => {
            let half = q.get() / 2.0 + 1e-9;
            (min.get() - half..=max.get() + half).contains(&x) && (!q.is_int() || value.is_i64())
        }
        Domain::LogUniformValues { min, max, q } => (min - slack(q)..=max + slack(q)).contains(&x),
        Domain::InvLogUniformValues { min, max } => (*min..=*max).contains(&x),
        Domain::LogUniform { min, max, q } => (min.exp() - slack(q)..=max.exp() + slack(q)).contains(&x),
        Domain::InvLogUniform { min, max } => ((-max).exp()..=(-min).exp()).contains(&x),
        Domain::Normal { mu, sigma, q } => {
            (mu - 9.0 * sigma - slack(q)..=mu + 9.0 * sigma + slack(q)).contains(&x)
        }
        Domain::LogNormal { mu, sigma, q } => x >= 0.0 && x <= (mu + 9.0 * sigma).exp() + slack(q),
        Domain::Beta { q, .. } => (-slack(q)..=1.0 + slack(q)).contains(&x),
    }
}

proptest! {
    #[test]
    fn parsing_any_text_never_panics(text in "\\PC{0,300}") {
        let _ = SweepSpec::parse(&text);
    }

    #[test]
    fn parsing_yaml_shaped_text_never_panics(
        method in proptest::sample::select(vec!["grid", "random", "bayes", "x"]),
        key in proptest::sample::select(vec!["min", "max", "q", "values", "value", "distribution", "mu", "sigma", "probabilities", "parameters"]),
        value in proptest::sample::select(vec!["1", "-1", "0", ".nan", ".inf", "1e308", "[1, 2]", "{}", "uniform", "q_uniform", "null", "9223372036854775807"]),
        eta in proptest::sample::select(vec!["1", "3", "1.0000001", "1e308", ".nan", "-2"]),
        cap in proptest::sample::select(vec!["1", "0", "-1", "100000000000", "5"]),
        grid in proptest::sample::select(vec!["", "grid: first\n", "grid: all\n", "grid: x\n", "grid: [1]\n"]),
    ) {
        let text = format!(
            "{HEAD}method: {method}\n{grid}run_cap: {cap}\nmetric: {{name: l}}\nearly_terminate: {{type: hyperband, min_iter: 1, eta: {eta}}}\nparameters:\n  p: {{{key}: {value}, min: 0, max: {value}}}\n  r: {{{key}: {value}}}\n"
        );
        if let Ok(spec) = SweepSpec::parse(&text) {
            for k in 0..spec.members().min(20) {
                let _ = spec.member(k);
            }
            if let Some(hyperband) = spec.early_terminate {
                let _ = hyperband.bands();
            }
        }
    }

    /// A grid runs every point, or the file says `grid: first`: never cut in silence.
    #[test]
    fn a_grid_is_never_cut_unless_it_says_so(
        sizes in proptest::collection::vec(1usize..6, 1..4),
        cap in 1u64..40,
        first in any::<bool>(),
    ) {
        let body: String = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("  p{i}: {{values: {:?}}}\n", (0..*n).collect::<Vec<_>>()))
            .collect();
        let size: u64 = sizes.iter().map(|n| *n as u64).product();
        let grid = if first { "grid: first\n" } else { "" };
        match SweepSpec::parse(&format!("{HEAD}method: grid\nrun_cap: {cap}\n{grid}parameters:\n{body}")) {
            Ok(spec) if first => prop_assert_eq!(spec.members(), size.min(cap)),
            Ok(spec) => prop_assert_eq!(spec.members(), size),
            Err(err) => {
                prop_assert!(!first && size > cap, "{}", err);
                prop_assert!(err.to_string().contains("add `grid: first`"), "{}", err);
            }
        }
    }

    #[test]
    fn members_stay_in_their_domains(params in proptest::collection::vec(arbitrary_parameter(), 1..5), seed in any::<u64>()) {
        let body: String = params.iter().enumerate().map(|(i, p)| format!("  p{i}: {p}\n")).collect();
        let spec = parse(&format!("{HEAD}method: random\nrun_cap: 30\nseed: {seed}\nparameters:\n{body}"));
        for k in 0..30 {
            let member = spec.member(k).unwrap();
            for (param, assignment) in spec.parameters.iter().zip(&member.assignments) {
                prop_assert!(within(&param.domain, &assignment.value), "{:?} gave {}", param.domain, assignment.value);
            }
        }
    }

    /// Whatever the members before it showed (values or none, in flight or ended, even values
    /// outside the domain), a bayes suggestion is a value of each domain, and never a panic.
    #[test]
    fn bayes_suggestions_stay_in_their_domains(
        params in proptest::collection::vec(arbitrary_parameter(), 1..4),
        seed in any::<u64>(),
        seen in proptest::collection::vec((0u8..4, -1e6f64..1e6, any::<bool>()), 0..7),
        maximize in any::<bool>(),
    ) {
        use super::bayes::{Observed, Seen, suggest};
        let body: String = params.iter().enumerate().map(|(i, p)| format!("  p{i}: {p}\n")).collect();
        let goal = if maximize { "maximize" } else { "minimize" };
        let Ok(spec) = SweepSpec::parse(&format!(
            "{HEAD}method: bayes\nmetric: {{name: m, goal: {goal}}}\nrun_cap: 30\nseed: {seed}\nparameters:\n{body}"
        )) else {
            // Only constants: refused, and that is checked elsewhere.
            return Ok(());
        };
        let mut members: Vec<Observed> = Vec::new();
        for (k, (kind, value, stray)) in seen.iter().enumerate() {
            let member = suggest(&spec, &members, k as u64);
            for (param, assignment) in spec.parameters.iter().zip(&member.assignments) {
                prop_assert!(within(&param.domain, &assignment.value), "{:?} gave {}", param.domain, assignment.value);
            }
            let mut values = member.values();
            if *stray {
                values.insert("p0".into(), serde_json::json!(value));
            }
            let seen = match kind {
                0 => Seen::InFlight,
                1 => Seen::Ended { counts: true, best: Some(*value), worst: Some(*value) },
                2 => Seen::Ended { counts: false, best: Some(*value), worst: Some(value * 2.0) },
                _ => Seen::Ended { counts: true, best: None, worst: None },
            };
            members.push(Observed { values, seen });
        }
    }

    #[test]
    fn hyperband_never_stops_a_member_that_is_not_running(
        members in proptest::collection::vec((any::<bool>(), proptest::collection::vec(-10.0f64..10.0, 0..30)), 0..12),
        min_iter in 1u64..5, eta in 1.5f64..4.0, strict in any::<bool>(), maximize in any::<bool>(),
    ) {
        let series: Vec<Series<usize>> = members.iter().enumerate().map(|(id, (running, values))| Series { id, running: *running, values }).collect();
        let metric = Metric { name: "m".into(), goal: if maximize { Goal::Maximize } else { Goal::Minimize }, target: None };
        let hyperband = Hyperband { bands: Bands::MinIter(min_iter), eta, strict };
        for stop in stop_runs(&series, &metric, &hyperband) {
            prop_assert!(members[stop.id].0);
            prop_assert!(stop.band as usize <= members[stop.id].1.len());
        }
    }
}
