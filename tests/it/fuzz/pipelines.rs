//! The fuzz tier over what runs feed back and what chains them: JSONL progress lines,
//! pipelines and dependencies, and commands on several runs.

use super::http::{InProcess, any_json, check_answer};
use super::*;

#[test]
fn fuzz_jsonl_progress_lines_never_panic() {
    use lachesis::workflow::ProgressSpec;
    let spec: ProgressSpec = serde_yaml::from_str(
        "{jsonl: {file: '{run_dir}/m.jsonl', step: /step, total: /n, fraction: /progress~1done_frac}}",
    )
    .unwrap();
    let vars = BTreeMap::from([("run_dir".to_string(), "/runs/r1".to_string())]);
    let resolved = spec.resolve(&vars, &json!({}), |_| None).unwrap();
    // Records with the read keys at any value, whole or cut short (a line still being written),
    // and any text at all.
    let record = (any_json(), any_json(), any_json(), any::<bool>(), 0..200usize).prop_map(
        |(step, n, done, nested, cut)| {
            let text = if nested {
                json!({"step": step, "n": n, "progress": {"done_frac": done}}).to_string()
            } else {
                json!({"step": step, "n": n, "progress/done_frac": done}).to_string()
            };
            text.chars().take(cut.max(1) * 4).collect::<String>()
        },
    );
    let mut runner = fuzz_runner(1024);
    runner
        .run(&prop_oneof![record, "\\PC{0,80}"], |line| {
            let read = resolved.read_jsonl(&line);
            if let Err(err) = &read {
                one_line(&err.to_string());
            }
            prop_assert_eq!(resolved.read_line(&line), read.as_ref().ok().copied().flatten());
            // A resumed attempt's reading of the line is the same one or none, never another.
            let from = resolved.read_followed_from(&line, Some(6));
            prop_assert_eq!(from.is_ok(), read.is_ok());
            if let (Ok(Some(kept)), Ok(all)) = (&from, &read) {
                prop_assert_eq!(Some(*kept), *all);
            }
            Ok(())
        })
        .unwrap();
}

/// What a fuzzed dependency names its target with: one key, or two (refused).
const DEPENDENCY_KEYS: &[&[&str]] = &[&["run"], &["sweep"], &["run", "sweep"], &["step"]];

/// Pipeline files (with run and sweep steps) and `after` lists (of runs and sweeps): parsed or
/// refused on one line, never a panic; over HTTP a refusal is JSON, never a 500, whatever the
/// dependency's run or sweep, condition and name.
#[test]
fn fuzz_pipelines_and_dependencies_never_panic() {
    use lachesis::workflow::pipeline::Pipeline;
    let step = (
        prop::option::of(prop_oneof!["[a-c]", "\\PC{0,6}"]),
        prop::option::of(prop_oneof![
            Just("[]".to_string()),
            "\\[[a-c, ]{0,6}\\]",
            Just("[{step: a, when: any}]".to_string()),
            Just("[{sweep: a, name: t}]".to_string()),
            Just("[{sweep: 0, run: 0}]".to_string()),
            "\\PC{0,10}"
        ]),
        prop::option::of(prop_oneof![Just("\"{after.a.run_id}\"".to_string()), "\\PC{0,10}"]),
    )
        .prop_map(|(name, after, var)| {
            let mut step = "- workflow: demo\n".to_string();
            if let Some(name) = name {
                step.push_str(&format!("  name: {}\n", json!(name)));
            }
            if let Some(after) = after {
                step.push_str(&format!("  after: {after}\n"));
            }
            if let Some(var) = var {
                step.push_str(&format!("  vars: {{steps: {var}}}\n"));
            }
            step
        });
    // A sweep step: a name in the workflows' sweeps/, a mapping, or anything, sometimes with a
    // field a sweep step does not take.
    let sweep_step = (
        prop::option::of(prop_oneof!["[a-c]", "\\PC{0,6}"]),
        prop_oneof![
            Just("demo-sweep".to_string()),
            Just("{method: grid}".to_string()),
            Just("../x".to_string()),
            "\\PC{0,10}"
        ],
        prop::option::of(prop_oneof![Just("workflow: demo".to_string()), Just("after: [a]".to_string())]),
    )
        .prop_map(|(name, sweep, extra)| {
            let mut step = format!("- sweep: {sweep}\n");
            if let Some(name) = name {
                step.push_str(&format!("  name: {}\n", json!(name)));
            }
            if let Some(extra) = extra {
                step.push_str(&format!("  {extra}\n"));
            }
            step
        });
    let step = prop_oneof![3 => step, 1 => sweep_step];
    let text = prop_oneof![
        prop::collection::vec(step, 0..5).prop_map(|steps| steps.concat()),
        "[-:{}\\[\\]\n #a-z0-9'\"]{0,120}",
    ];
    let mut runner = fuzz_runner(384);
    runner
        .run(&text, |text| {
            match Pipeline::parse(Path::new("p.yaml"), &text) {
                Ok(pipeline) => {
                    prop_assert_eq!(pipeline.order.len(), pipeline.steps.len());
                    for step in pipeline.steps.iter().filter(|s| s.is_sweep()) {
                        prop_assert!(step.after.is_empty(), "a sweep step waits for no step");
                    }
                    for (at, step) in pipeline.order.iter().enumerate() {
                        for (target, _) in &pipeline.steps[*step].after {
                            prop_assert!(
                                pipeline.order[..at].contains(target),
                                "queued before what it waits for"
                            );
                        }
                    }
                }
                Err(err) => one_line(&err.to_string()),
            }
            Ok(())
        })
        .unwrap();

    let api = InProcess::new();
    let after = (
        prop_oneof!["\\PC{0,10}", Just("00000000".to_string()), Just(String::new())],
        prop::sample::select(DEPENDENCY_KEYS),
        prop_oneof![Just(json!("ok")), Just(json!("any")), Just(json!("failed")), any_json()],
        prop::option::of(prop_oneof!["\\PC{0,10}".prop_map(Value::from), any_json()]),
    )
        .prop_map(|(id, keys, when, name)| {
            let mut item = json!({"when": when});
            for key in keys {
                item[key] = json!(id);
            }
            if let Some(name) = name {
                item["name"] = name;
            }
            item
        });
    let mut runner = fuzz_runner(256);
    runner
        .run(&(prop::collection::vec(after, 0..3), prop::bool::ANY), |(after, list)| {
            let one = json!({"workflow": "demo", "after": after, "vars": {"steps": "{after.x.run_id}"}});
            let body = if list { json!([one]) } else { one };
            let (status, answer) = api.call("POST", "/runs", body.to_string().into_bytes());
            check_answer("POST", "/runs", status, &answer);
            Ok(())
        })
        .unwrap();
}

/// Commands on several runs (`run stop|hold|release|resume` with ids or filters): whatever ids,
/// workflow, sweep and state a caller gives, each id gets one outcome, every refusal is one line,
/// and nothing panics or fails the whole command.
#[test]
fn fuzz_commands_on_several_runs_report_each_run() {
    use lachesis::model::RunState;
    use lachesis::service::{RunAction, RunSelection};
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut home = TestHome::new();
    let service = runtime.block_on(home.service());
    let known: Vec<String> = (0..3).map(|_| home.submit(&["-w", "demo"]).to_string()).collect();
    let id = prop_oneof![
        "\\PC{0,12}",
        Just(String::new()),
        Just("..".to_string()),
        Just("\0".to_string()),
        prop::sample::select(known.clone()),
        prop::sample::select(known.clone()).prop_map(|id| id[..4].to_string()),
    ];
    let action = prop_oneof![
        Just(RunAction::Stop),
        Just(RunAction::Hold),
        Just(RunAction::Release),
        any::<Option<i64>>().prop_map(|from| RunAction::Resume { from }),
    ];
    let filter = (
        any::<bool>(),
        prop::option::of(prop::sample::select(&RunState::ALL[..])),
        prop::option::of(prop_oneof![Just("demo".to_string()), "\\PC{0,8}"]),
        prop::option::of(prop_oneof![Just("0000".to_string()), "\\PC{0,8}"]),
    );
    let mut runner = fuzz_runner(256);
    runner
        .run(
            &(action, prop::collection::vec(id, 0..5), filter),
            |(action, ids, (all, state, workflow, sweep))| {
                let selection = RunSelection { ids: ids.clone(), all, state, workflow, sweep };
                match runtime.block_on(service.act_on_runs(action, &selection)) {
                    Ok(outcomes) => {
                        if !ids.is_empty() {
                            assert!(outcomes.len() <= ids.len(), "{ids:?}: {outcomes:?}");
                        }
                        for outcome in &outcomes {
                            assert!(outcome.run.is_some() != outcome.error.is_some(), "{outcome:?}");
                            one_line(outcome.error.as_deref().unwrap_or_default());
                            one_line(&outcome.target);
                        }
                    }
                    // Only a filter's own refusal (a state the action never applies to, an unknown
                    // or ambiguous sweep) fails the whole command.
                    Err(err) => {
                        assert!(ids.is_empty(), "{ids:?}: {err}");
                        one_line(&err.to_string());
                    }
                }
                Ok(())
            },
        )
        .unwrap();
}
