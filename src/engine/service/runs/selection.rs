//! Commands on several runs: `run stop|hold|release|resume` given several ids, or a filter
//! (`--all`, `--state`, `--workflow`, `--sweep`), as `pueue kill 1 2 3` and `scancel -u` take
//! them. Each run is acted on through the single-run method; one that is refused is reported
//! and the rest go on. Only a fault of the store itself ends the whole command.

use std::collections::HashSet;

use serde::Serialize;
use uuid::Uuid;

use crate::engine::service::{ErrorKind, Result, Service, ServiceError};
use crate::model::{Run, RunPage, RunState};

use super::RunSummary;

/// What to do to each selected run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunAction {
    Stop,
    Hold,
    Release,
    /// Queue again from the checkpoint at step `from`, or the last resumable one.
    Resume {
        from: Option<i64>,
    },
}

impl RunAction {
    pub fn verb(self) -> &'static str {
        match self {
            RunAction::Stop => "stop",
            RunAction::Hold => "hold",
            RunAction::Release => "release",
            RunAction::Resume { .. } => "resume",
        }
    }

    /// The states a filter looks in: those the action can move a run out of. A filter never
    /// picks a run the action would refuse (`run stop --all` leaves ended runs alone).
    pub fn states(self) -> &'static [RunState] {
        use RunState as S;
        match self {
            RunAction::Stop => &[S::Pending, S::Starting, S::Running, S::Stopping, S::Retrying],
            RunAction::Hold | RunAction::Release => &[S::Pending],
            RunAction::Resume { .. } => &[S::Failed, S::Stopped],
        }
    }

    /// Whether a filter picks `run`: hold takes the pending runs not yet held, release the held.
    fn picks(self, run: &Run) -> bool {
        self.states().contains(&run.state)
            && match self {
                RunAction::Hold => run.held_at.is_none(),
                RunAction::Release => run.held_at.is_some(),
                RunAction::Stop | RunAction::Resume { .. } => true,
            }
    }
}

/// Which runs: the ids (or unique prefixes) given, or every run a filter matches. The CLI
/// refuses both at once and neither; the service takes ids when there are any.
#[derive(Clone, Debug, Default)]
pub struct RunSelection {
    pub ids: Vec<String>,
    /// Every run the action applies to (narrowed by the filters below when they are given).
    pub all: bool,
    pub state: Option<RunState>,
    pub workflow: Option<String>,
    /// A sweep's id or unique prefix: its members.
    pub sweep: Option<String>,
}

impl RunSelection {
    pub fn is_filter(&self) -> bool {
        self.all || self.state.is_some() || self.workflow.is_some() || self.sweep.is_some()
    }
}

/// What became of one run: `target` is the id as given (or the full id a filter found);
/// `run` the run after the action, or `error` why it was refused.
#[derive(Clone, Debug, Serialize)]
pub struct RunOutcome {
    pub target: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<RunSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RunOutcome {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

/// Runs read per page while a filter collects its ids.
const PAGE: i64 = 500;

impl Service {
    /// Acts on every run `selection` names, each through the single-run method, and says what
    /// became of each, in order. A run that is refused (unknown, ambiguous, in a state the
    /// action does not apply to) is reported and the others go on; a fault of the store ends
    /// the command with that error. A filter collects the matching ids first (not whole runs,
    /// and not while acting, so a run a stop moves out of `pending` shifts no page).
    pub async fn act_on_runs(&self, action: RunAction, selection: &RunSelection) -> Result<Vec<RunOutcome>> {
        let targets: Vec<String> = if selection.ids.is_empty() {
            self.selected_runs(action, selection).await?.iter().map(Uuid::to_string).collect()
        } else {
            selection.ids.clone()
        };
        let mut outcomes = Vec::with_capacity(targets.len());
        let mut done: HashSet<Uuid> = HashSet::new();
        for target in targets {
            let result = match self.resolve_run(&target).await {
                // The same run given twice (a prefix and its full id) is acted on once.
                Ok(run) if !done.insert(run.id) => continue,
                Ok(run) => self.act_on(action, &run.id.to_string()).await,
                Err(err) => Err(err),
            };
            let target = crate::text::one_line(&target);
            match result {
                Ok(run) => {
                    outcomes.push(RunOutcome { target, run: Some(RunSummary::from(&run)), error: None })
                }
                Err(err) if refused(&err) => {
                    outcomes.push(RunOutcome { target, run: None, error: Some(err.to_string()) })
                }
                Err(err) => return Err(err),
            }
        }
        Ok(outcomes)
    }

    async fn act_on(&self, action: RunAction, id: &str) -> Result<Run> {
        match action {
            RunAction::Stop => self.stop_run(id).await,
            RunAction::Hold => self.hold_run(id).await,
            RunAction::Release => self.release_run(id).await,
            RunAction::Resume { from } => self.resume_run(id, from).await,
        }
    }

    /// The ids of the runs a filter matches and the action applies to, oldest first.
    async fn selected_runs(&self, action: RunAction, selection: &RunSelection) -> Result<Vec<Uuid>> {
        let states: Vec<RunState> = match selection.state {
            Some(state) if action.states().contains(&state) => vec![state],
            Some(state) => {
                return Err(ServiceError::NotApplicable {
                    action: action.verb(),
                    state,
                    applies: action.states().iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                });
            }
            None => action.states().to_vec(),
        };
        let workflow = selection.workflow.as_deref();
        let wanted = |run: &Run| {
            states.contains(&run.state) && action.picks(run) && workflow.is_none_or(|w| run.workflow == w)
        };
        let mut ids = Vec::new();
        if let Some(sweep) = &selection.sweep {
            let sweep = self.resolve_sweep(sweep).await?;
            let members = self.store.sweep_member_runs(sweep.id).await?;
            ids.extend(members.iter().map(|(_, run)| run).filter(|run| wanted(run)).map(|run| run.id));
            return Ok(ids);
        }
        for state in states.iter().copied() {
            let first = ids.len();
            let mut offset = 0;
            loop {
                let page = RunPage { state: Some(state), workflow, offset, limit: PAGE };
                let runs = self.store.runs_page(&page).await?;
                ids.extend(runs.iter().filter(|run| wanted(run)).map(|run| run.id));
                if (runs.len() as i64) < PAGE {
                    break;
                }
                offset += PAGE;
            }
            // Pages are newest first; act on each state's oldest first, as the queue would.
            ids[first..].reverse();
        }
        Ok(ids)
    }
}

/// Whether `err` refuses this one run (reported, the others go on) rather than being a fault
/// of the store (which would fail every other run the same way).
fn refused(err: &ServiceError) -> bool {
    !err.is_unreachable() && !matches!(err.kind(), ErrorKind::Internal | ErrorKind::StorageFull)
}
