use super::*;
use crate::engine::reconciler::core::testing::run;
use crate::model::RunState;

const VARS: &str = "vars: {base: '', tag: x}\n";

fn waiting(base: &str) -> Run {
    let mut run = run(1, VARS, RunState::Starting, 0, Some(0));
    run.params.after = vec!["sft".into()];
    run.params.vars.insert("base".into(), base.into());
    run
}

fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn a_claimed_run_needs_its_dependency_values_until_they_are_written() {
    let named = waiting("plain");
    assert!(needs_after_values(&named), "a named dependency");
    let mut templated = waiting("{after.sft.run_id}");
    templated.params.after.clear();
    assert!(needs_after_values(&templated), "a value that uses one");
    let mut written = waiting("{after.sft.run_id}");
    written.params.resolved.insert("after.sft.run_id".into(), "r".into());
    assert!(!needs_after_values(&written), "written at the claim: a restart does not read them again");
    let mut none = waiting("plain");
    none.params.after.clear();
    assert!(!needs_after_values(&none));
    assert_eq!(after_templates(&templated), [("base".to_string(), "{after.sft.run_id}".to_string())]);
}

#[test]
fn the_values_read_are_written_and_expanded_or_the_problem_names_the_dependency() {
    let sources = values(&[("after.sft", "run 1a2b3c4d")]);
    let read = values(&[
        ("after.sft.run_id", "1a2b3c4d-0000"),
        ("after.sft.run_dir", "/runs/1a2b"),
        ("after.sft.trained_weights", "tinker://w/9"),
    ]);
    /// Its expanded value, or the problem that fails it.
    type Want = Result<&'static str, &'static str>;
    // (its value, the values read) -> what it gives
    let table: [(&str, &BTreeMap<String, String>, Want); 4] = [
        ("{after.sft.trained_weights}", &read, Ok("tinker://w/9")),
        ("{after.sft.run_dir}/out", &read, Ok("/runs/1a2b/out")),
        (
            "{after.sft.trained_weights}",
            &values(&[("after.sft.run_id", "1a2b3c4d-0000")]),
            Err("after.sft.trained_weights: run 1a2b3c4d reported no trained weights"),
        ),
        ("{after.rl.run_id}", &read, Err("vars.base: {after.rl.run_id} names no dependency value")),
    ];
    for (base, read, want) in table {
        let got = with_values(&waiting(base), read, &sources);
        match (got, want) {
            (Ok((params, note)), Ok(want)) => {
                assert_eq!(params.resolved["base"], want, "{base}");
                assert!(
                    read.keys().all(|k| params.resolved.contains_key(k)),
                    "{base}: every value read is written"
                );
                assert!(note.starts_with("dependency values: after.sft."), "{note}");
            }
            (Err(problem), Err(want)) => assert_eq!(problem, want, "{base}"),
            (got, want) => panic!("{base}: {got:?}, wanted {want:?}"),
        }
    }
}
