//! Which runs `run stop|hold|release|resume` act on (several ids, or a filter), and how each
//! run's outcome is printed and turned into the exit code.

use std::io::Write;

use lachesis::model::RunState;
use lachesis::service::{RunAction, RunOutcome, RunSelection, RunSummary, Service};

use crate::cli::CliResult;
use crate::cli::exit_code::{NOT_OK, REFUSED, SUCCESS, code};
use crate::cli::output::print_json;

const FILTERS: [&str; 4] = ["all", "state", "workflow", "sweep"];

#[derive(clap::Args)]
pub struct SelectionArgs {
    /// The runs (ids or unique prefixes); one that is refused is reported and the others go on
    #[arg(value_name = "ID", required_unless_present_any = FILTERS, conflicts_with_all = FILTERS)]
    ids: Vec<String>,
    /// Every run the command applies to (narrowed by --state, --workflow, --sweep)
    #[arg(long)]
    all: bool,
    /// The runs in this state (one the command applies to)
    #[arg(long, value_name = "STATE")]
    state: Option<RunState>,
    /// The runs of this workflow
    #[arg(long, value_name = "NAME")]
    workflow: Option<String>,
    /// The members of this sweep (its id or a unique prefix)
    #[arg(long, value_name = "SWEEP")]
    sweep: Option<String>,
    /// One JSON object for a single id, as before; an array of {target, run | error} otherwise
    #[arg(long)]
    json: bool,
}

/// Acts on the selected runs and prints each one's outcome: a line per run on stdout (`line`),
/// a refusal per run on stderr. Exits 0 when every run was acted on (or none matched), 3 when
/// every one was refused, 4 when some were and some were not.
pub async fn act(
    service: &Service,
    action: RunAction,
    args: SelectionArgs,
    line: fn(&RunSummary) -> String,
) -> CliResult {
    let SelectionArgs { ids, all, state, workflow, sweep, json } = args;
    let single = ids.len() == 1;
    let selection = RunSelection { ids, all, state, workflow, sweep };
    let outcomes = service.act_on_runs(action, &selection).await?;
    let mut err = std::io::stderr().lock();
    if json {
        match (single, outcomes.first()) {
            (true, Some(RunOutcome { run: Some(run), .. })) => print_json(run)?,
            (true, _) => {}
            (false, _) => print_json(&outcomes)?,
        }
    } else {
        for outcome in &outcomes {
            if let Some(run) = &outcome.run {
                println!("{}", line(run));
            }
        }
        if outcomes.is_empty() {
            let _ = writeln!(err, "no run to {}", action.verb());
        }
    }
    for error in outcomes.iter().filter_map(|o| o.error.as_deref()) {
        let _ = writeln!(err, "lachesis: {error}");
    }
    Ok(code(exit_code(&outcomes)))
}

/// All acted on (or none selected): done; all refused: refused, as one refused id always was;
/// some of each: not ok.
fn exit_code(outcomes: &[RunOutcome]) -> u8 {
    let ok = outcomes.iter().filter(|o| o.ok()).count();
    match ok {
        _ if ok == outcomes.len() => SUCCESS,
        0 => REFUSED,
        _ => NOT_OK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(ok: bool) -> RunOutcome {
        RunOutcome { target: "x".into(), run: None, error: (!ok).then(|| "refused".to_string()) }
    }

    #[test]
    fn the_exit_code_says_whether_every_some_or_no_run_was_acted_on() {
        assert_eq!(exit_code(&[]), SUCCESS);
        assert_eq!(exit_code(&[outcome(true), outcome(true)]), SUCCESS);
        assert_eq!(exit_code(&[outcome(false)]), REFUSED);
        assert_eq!(exit_code(&[outcome(false), outcome(false)]), REFUSED);
        assert_eq!(exit_code(&[outcome(true), outcome(false)]), NOT_OK);
    }
}
