//! A pipeline file: a YAML list of steps, each a run request (or a sweep) with a name, waiting
//! for other steps (or runs, or sweeps).
//! Parsing checks what only the file can get wrong (names, references, cycles) and gives the
//! order the steps are queued in: each after the steps it waits for, otherwise as written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::request::{DependencyTarget, RunRequest};
use crate::model::When;
use crate::model::dependency::check_name;

/// A pipeline file that cannot be queued, with where and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {field}: {problem}", file.display())]
pub struct InvalidPipeline {
    pub file: PathBuf,
    pub field: String,
    pub problem: String,
}

/// One step: a run request (or a sweep) with a name, waiting for the steps in `after`.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub name: Option<String>,
    /// What it queues.
    pub work: Work,
    /// The steps it waits for, by their place in the file, with the condition (a sweep step
    /// waits for none).
    pub after: Vec<(usize, When)>,
}

/// What a step queues.
#[derive(Clone, Debug, PartialEq)]
pub enum Work {
    /// A run: any field a `--from` line or `POST /runs` takes. Its `after` keeps only what is
    /// outside the pipeline (`{run: ID}`, `{sweep: ID}`); the steps it waits for are the step's.
    Run(RunRequest),
    /// A sweep (`sweep: NAME`, a file of the workflows' `sweeps/`, or the sweep itself as a
    /// mapping), queued with the other steps; a step waiting for it waits for its winner.
    Sweep(SweepSource),
}

/// Where a sweep step's sweep is.
#[derive(Clone, Debug, PartialEq)]
pub enum SweepSource {
    /// A sweep file of the workflows' `sweeps/` directory, by name.
    Named(String),
    /// The sweep itself (W&B's format with lachesis' keys).
    Inline(serde_json::Value),
}

impl Step {
    /// The run request of a run step.
    pub fn request(&self) -> Option<&RunRequest> {
        match &self.work {
            Work::Run(request) => Some(request),
            Work::Sweep(_) => None,
        }
    }

    pub fn is_sweep(&self) -> bool {
        matches!(self.work, Work::Sweep(_))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Pipeline {
    /// In the file's order.
    pub steps: Vec<Step>,
    /// The order to queue them in: each step after every step it waits for.
    pub order: Vec<usize>,
}

impl Pipeline {
    pub fn parse(file: &Path, text: &str) -> Result<Pipeline, InvalidPipeline> {
        let bad = |field: String, problem: String| InvalidPipeline {
            file: file.to_path_buf(),
            field: crate::text::one_line(&field),
            problem: crate::text::one_line(&problem),
        };
        let raw: Vec<serde_json::Map<String, serde_json::Value>> =
            crate::yaml::from_str(text).map_err(|err| {
                let field = err.path.clone().unwrap_or_else(|| {
                    err.line.map_or_else(|| "yaml".to_string(), |line| format!("line {line}"))
                });
                bad(field, format!("{} (a pipeline is a list of steps)", err.message))
            })?;
        if raw.is_empty() {
            return Err(bad("steps".into(), "a pipeline needs at least one step".into()));
        }
        // Each step is a name and a run request (or a sweep): the request is read by the one
        // parser every surface shares, so a field `--from` takes, a step takes.
        let mut named = Vec::with_capacity(raw.len());
        for (i, mut fields) in raw.into_iter().enumerate() {
            let name = match fields.remove("name") {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(name)) => Some(name),
                Some(other) => return Err(bad(format!("[{i}].name"), format!("{other} is not a step name"))),
            };
            if let Some(sweep) = fields.remove("sweep") {
                if let Some(other) = fields.keys().next() {
                    return Err(bad(
                        format!("[{i}].{other}"),
                        "a sweep step takes only `name` and `sweep` (its members' fields are the sweep's), \
                         and waits for no step"
                            .into(),
                    ));
                }
                let source = match sweep {
                    serde_json::Value::String(file) => {
                        check_name(&file).map_err(|_| {
                            bad(
                                format!("[{i}].sweep"),
                                format!(
                                    "'{file}' is not a sweep name (a file of the workflows' sweeps/ directory: \
                                     letters, digits, '-' or '_') nor a sweep (a mapping)"
                                ),
                            )
                        })?;
                        SweepSource::Named(file)
                    }
                    serde_json::Value::Object(sweep) => SweepSource::Inline(serde_json::Value::Object(sweep)),
                    other => {
                        return Err(bad(
                            format!("[{i}].sweep"),
                            format!("{other} is neither a sweep name nor a sweep (a mapping)"),
                        ));
                    }
                };
                named.push((name, Work::Sweep(source)));
                continue;
            }
            let request = RunRequest::from_value(serde_json::Value::Object(fields)).map_err(|err| {
                let field = err.path.map_or_else(|| format!("[{i}]"), |path| format!("[{i}].{path}"));
                bad(field, err.problem)
            })?;
            named.push((name, Work::Run(request)));
        }
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, (name, _)) in named.iter().enumerate() {
            if let Some(name) = name {
                check_name(name).map_err(|p| bad(format!("[{i}].name"), p))?;
                if names.insert(name.as_str(), i).is_some() {
                    return Err(bad(
                        format!("[{i}].name"),
                        format!("another step is already called '{name}'"),
                    ));
                }
            }
        }
        let mut steps = Vec::with_capacity(named.len());
        for (i, (name, work)) in named.iter().enumerate() {
            let mut request = match work {
                Work::Run(request) => request.clone(),
                Work::Sweep(_) => {
                    steps.push(Step { name: name.clone(), work: work.clone(), after: Vec::new() });
                    continue;
                }
            };
            let mut after = Vec::new();
            match request.after.take() {
                None if i == 0 => {}
                None => after.push((i - 1, When::Ok)),
                Some(list) => {
                    let mut outside = Vec::new();
                    for (j, dep) in list.into_iter().enumerate() {
                        let field = format!("[{i}].after[{j}]");
                        let step = match &dep.target {
                            DependencyTarget::Run(_) | DependencyTarget::Sweep(_) => {
                                outside.push(dep);
                                continue;
                            }
                            DependencyTarget::Step(step) => step,
                        };
                        if dep.name.is_some() {
                            return Err(bad(
                                format!("{field}.name"),
                                format!("a step's values are named after it: {{after.{step}.*}}"),
                            ));
                        }
                        let target = *names.get(step.as_str()).ok_or_else(|| {
                            let known: Vec<&str> = names.keys().copied().collect();
                            let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
                            bad(field.clone(), format!("no step is called '{step}' (steps: {known})"))
                        })?;
                        if target == i {
                            return Err(bad(field, format!("step '{step}' cannot wait for itself")));
                        }
                        if after.iter().any(|(t, _)| *t == target) {
                            return Err(bad(field, format!("step '{step}' is named twice")));
                        }
                        after.push((target, dep.when));
                    }
                    request.after = (!outside.is_empty()).then_some(outside);
                }
            }
            // A sweep is waited for until it ends with a winner: no other condition applies.
            if let Some((target, when)) =
                after.iter().find(|(t, w)| matches!(named[*t].1, Work::Sweep(_)) && *w != When::Ok)
            {
                let label = named[*target].0.clone().unwrap_or_else(|| format!("#{}", target + 1));
                return Err(bad(
                    format!("[{i}].after"),
                    format!(
                        "step '{label}' is a sweep: it is waited for until it ends with a winner, not `when: {when}`"
                    ),
                ));
            }
            steps.push(Step { name: name.clone(), work: Work::Run(request), after });
        }
        let order = queue_order(&steps).map_err(|cycle| {
            let names: Vec<String> = cycle.iter().map(|i| step_label(&steps[*i], *i)).collect();
            bad("after".into(), format!("the steps wait for each other in a cycle: {}", names.join(" -> ")))
        })?;
        Ok(Pipeline { steps, order })
    }
}

/// How a step is named in messages: its name, else its place (from 1).
pub fn step_label(step: &Step, index: usize) -> String {
    step.name.clone().unwrap_or_else(|| format!("#{}", index + 1))
}

/// The steps in an order where each comes after every step it waits for, the file's order
/// otherwise; or the steps of a cycle.
fn queue_order(steps: &[Step]) -> Result<Vec<usize>, Vec<usize>> {
    let mut placed = vec![false; steps.len()];
    let mut order = Vec::with_capacity(steps.len());
    while order.len() < steps.len() {
        let ready = (0..steps.len()).find(|&i| !placed[i] && steps[i].after.iter().all(|(t, _)| placed[*t]));
        match ready {
            Some(i) => {
                placed[i] = true;
                order.push(i);
            }
            None => {
                // Every step left waits for another one left: walk back until one repeats.
                let mut at = (0..steps.len()).find(|&i| !placed[i]).unwrap_or(0);
                let mut path = Vec::new();
                while !path.contains(&at) {
                    path.push(at);
                    at = steps[at].after.iter().map(|(t, _)| *t).find(|t| !placed[*t]).unwrap_or(at);
                }
                let start = path.iter().position(|&p| p == at).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(at);
                return Err(cycle);
            }
        }
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Pipeline, InvalidPipeline> {
        Pipeline::parse(Path::new("p.yaml"), text)
    }

    #[test]
    fn steps_wait_for_the_previous_one_by_default() {
        let p = parse(
            "- {name: a, workflow: demo}\n- {workflow: demo}\n- {name: c, workflow: demo, after: []}\n",
        )
        .unwrap();
        assert_eq!(p.steps[0].after, vec![]);
        assert_eq!(p.steps[1].after, vec![(0, When::Ok)]);
        assert_eq!(p.steps[2].after, vec![]);
        assert_eq!(p.order, vec![0, 1, 2]);
    }

    #[test]
    fn a_step_may_wait_for_a_later_one_and_is_queued_after_it() {
        let p = parse("- {name: a, after: [{step: b, when: any}]}\n- {name: b, after: []}\n").unwrap();
        assert_eq!(p.steps[0].after, vec![(1, When::Any)]);
        assert_eq!(p.order, vec![1, 0]);
    }

    #[test]
    fn cycles_unknown_names_and_self_references_are_refused() {
        for (text, want) in [
            (
                "- {name: a, after: [b]}\n- {name: b, after: [a]}\n",
                "after: the steps wait for each other in a cycle: a -> b -> a",
            ),
            ("- {name: a, after: [a]}\n", "[0].after[0]: step 'a' cannot wait for itself"),
            (
                "- {name: a}\n- {name: b, after: [nope]}\n",
                "[1].after[0]: no step is called 'nope' (steps: a, b)",
            ),
            ("- {name: a}\n- {name: a}\n", "[1].name: another step is already called 'a'"),
            ("- {name: \"a b\"}\n", "[0].name: 'a b' is not a dependency name"),
            ("[]\n", "steps: a pipeline needs at least one step"),
            ("- {name: a, after: [{step: a, when: sometimes}]}\n", "p.yaml"),
            ("- {name: a, workflw: demo}\n", "unknown field"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn the_bundled_demo_pipeline_parses() {
        let text =
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows/pipelines/demo-pipeline.yaml"));
        let p = parse(text).unwrap();
        let names: Vec<_> = p.steps.iter().map(|s| s.name.clone().unwrap_or_default()).collect();
        assert_eq!(names, ["train", "eval", "cleanup"]);
        assert_eq!(p.steps[1].after, vec![(0, When::Ok)]);
        assert_eq!(p.steps[2].after, vec![(1, When::Any)]);
        assert!(
            p.steps[1].request().unwrap().vars.values().any(|v| v.contains("{after.train.trained_weights}"))
        );
    }

    #[test]
    fn the_bundled_sweep_pipeline_parses_a_sweep_step_and_its_evaluation() {
        let text = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/workflows/pipelines/demo-sweep-pipeline.yaml"
        ));
        let p = parse(text).unwrap();
        assert_eq!(p.steps[0].work, Work::Sweep(SweepSource::Named("demo-sweep".into())));
        assert_eq!(p.steps[0].after, vec![]);
        assert_eq!(p.steps[1].after, vec![(0, When::Ok)], "the evaluation waits for the sweep");
        assert!(p.steps[1].request().unwrap().vars["weights"].contains("{after.tune.best_trained_weights}"));
    }

    #[test]
    fn sweep_steps_are_named_or_written_out_and_waited_for_by_their_winner() {
        let p = parse(
            "- {name: tune, sweep: {method: grid, workflow: demo-tune, parameters: {lr: {values: [1]}}}}\n\
             - {name: eval, workflow: demo-eval, after: [tune, {sweep: 1a2b, name: other}]}\n",
        )
        .unwrap();
        assert!(matches!(&p.steps[0].work, Work::Sweep(SweepSource::Inline(v)) if v["method"] == "grid"));
        assert_eq!(p.steps[1].after, vec![(0, When::Ok)]);
        let outside = p.steps[1].request().unwrap().dependencies();
        assert_eq!(outside[0].target, crate::workflow::request::DependencyTarget::Sweep("1a2b".into()));
        for (text, want) in [
            ("- {name: t, sweep: 3}\n", "[0].sweep: 3 is neither a sweep name nor a sweep"),
            ("- {name: t, sweep: \"a/b\"}\n", "[0].sweep: 'a/b' is not a sweep name"),
            ("- {name: t, sweep: s, after: []}\n", "[0].after: a sweep step takes only `name` and `sweep`"),
            (
                "- {name: t, sweep: s}\n- {after: [{step: t, when: failed}]}\n",
                "[1].after: step 't' is a sweep",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    /// Text near a pipeline: steps with a name and one field, any of a run request's keys (or
    /// none of them) with values of odd shapes; or any text at all.
    fn pipeline_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let key = prop_oneof![
            "(workflow|env|priority|hold|time_limit|stall_timeout|needs|preemptible|vars|set|after|name|sweep|nope)",
            "\\PC{0,6}",
        ];
        let value = prop_oneof![
            "\\PC{0,12}",
            "\\[[a-c, ]{0,6}\\]",
            "\\{[a-z: 0-9,]{0,16}\\}",
            "\\[\\{(run|step|sweep|when|name): [a-c0-9]{0,4}\\}\\]",
        ];
        let steps = proptest::collection::vec(("[a-c]{1,2}", key, value), 0..5).prop_map(|steps| {
            steps
                .into_iter()
                .map(|(name, key, value)| format!("- name: {name}\n  {key}: {value}\n"))
                .collect()
        });
        prop_oneof!["\\PC{0,200}", steps]
    }

    proptest::proptest! {
        /// Any text, YAML or not, is a pipeline or a one-line refusal, never a panic; steps are
        /// read by the run request's parser, so its fields get arbitrary values here too.
        #[test]
        fn any_text_is_a_pipeline_or_a_one_line_refusal(text in pipeline_text()) {
            if let Err(err) = parse(&text) {
                proptest::prop_assert!(!err.to_string().contains('\n'), "{}", err);
            }
        }
    }
}
