//! Runs for the core's tables: a workflow from a YAML tail, a run of it in a state.

use uuid::Uuid;

use crate::model::{Millis, Run, RunParams, RunState};
use crate::workflow::Workflow;

/// A one-stage workflow (stage `trainer`) with `tail` appended to its YAML.
pub fn workflow(tail: &str) -> Workflow {
    let yaml = format!("name: t\nstages:\n  - {{name: trainer, argv: [x]}}\n{tail}");
    Workflow::parse(std::path::Path::new("t.yaml"), &yaml).unwrap()
}

/// A run of `workflow(tail)` with id `n`, in `state`, of `priority`, its attempt started at
/// `started_at`.
pub fn run(n: u128, tail: &str, state: RunState, priority: i64, started_at: Option<Millis>) -> Run {
    let mut run = Run::queued(
        Uuid::from_u128(n),
        workflow(tail),
        format!("/runs/{n}").into(),
        priority,
        RunParams::default(),
    );
    run.state = state;
    run.started_at = started_at;
    run
}

/// `gpu` → these units.
pub fn gpus(units: &[&str]) -> crate::model::pool::Assignment {
    [("gpu".to_string(), units.iter().map(|u| u.to_string()).collect())].into()
}
