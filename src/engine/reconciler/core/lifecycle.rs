//! What a supervised run's state asks for next (`Reconciler::drive` carries it out): start its
//! next stage, count it up, stop its stages last-started first, and once they are gone end it,
//! queue it again (a retry, a preemption) or let it go. Asked again after every change, and
//! after a restart over what the store holds, so a step cut short by a crash is decided again.

use crate::model::{AfterStop, ProcessState, RunState};

/// What the loop knows of one stage here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageView {
    pub state: ProcessState,
    /// False while a transient failure to start it waits out its backoff.
    pub spawn_due: bool,
}

/// The next step for a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing now (pending; or a stage starts, spawns or waits for its backoff or its exit).
    Wait,
    /// Running: its progress, checkpoints and metrics are watched.
    Watch,
    /// Every stage is up: `starting → running`.
    AllStagesUp,
    Spawn(usize),
    /// Send the stop signal to this stage (the live one started last).
    StopStage(usize),
    /// A preemption's victim whose stages are gone: `stopping ──preempted──▶ pending`.
    RequeuePreempted,
    /// A pbt exploit's loser whose stages are gone: `stopping ──exploited──▶ pending`, to
    /// continue from the donor's checkpoint.
    ContinueExploited,
    /// A stopping run whose stages are gone: `stopping → stopped`.
    AllStagesGone,
    /// A retrying run whose stages are gone: its next attempt is queued.
    RequeueRetry,
    /// Over, nothing live: its last checkpoints and metrics are read and it is let go.
    LetGo,
}

/// The step `state` asks for, with its stages as they stand. `after_stop`: where a stopping run
/// goes once its stages are gone (`Run::after_stop`).
pub fn next_step(state: RunState, after_stop: AfterStop, stages: &[StageView]) -> Step {
    match state {
        RunState::Pending => Step::Wait,
        RunState::Running => Step::Watch,
        RunState::Starting => match stages.iter().position(|s| s.state != ProcessState::Up) {
            None => Step::AllStagesUp,
            Some(idx) if stages[idx].state == ProcessState::Pending && stages[idx].spawn_due => {
                Step::Spawn(idx)
            }
            Some(_) => Step::Wait,
        },
        RunState::Stopping
        | RunState::Retrying
        | RunState::Stopped
        | RunState::Completed
        | RunState::Failed => {
            if stages.iter().any(|s| s.state == ProcessState::Spawning) {
                // Stopped once we know who it is (its spawn reports back).
                Step::Wait
            } else if let Some(idx) = next_to_stop(stages) {
                Step::StopStage(idx)
            } else if state == RunState::Stopping {
                match after_stop {
                    AfterStop::Preempted => Step::RequeuePreempted,
                    AfterStop::Exploited => Step::ContinueExploited,
                    AfterStop::Stopped => Step::AllStagesGone,
                }
            } else if state == RunState::Retrying {
                Step::RequeueRetry
            } else {
                Step::LetGo
            }
        }
    }
}

/// The stage to stop next: the live one started last (env before trainer before api).
pub fn next_to_stop(stages: &[StageView]) -> Option<usize> {
    stages.iter().rposition(|s| matches!(s.state, ProcessState::Starting | ProcessState::Up))
}

#[cfg(test)]
mod tests {
    use super::*;
    use AfterStop as A;
    use ProcessState as P;
    use RunState as R;

    fn stages(states: &[P]) -> Vec<StageView> {
        states.iter().map(|&state| StageView { state, spawn_due: true }).collect()
    }

    #[test]
    fn each_state_asks_its_next_step() {
        // (run state, where a stop goes, its stages) -> step
        let table = [
            (R::Pending, A::Stopped, vec![P::Pending, P::Pending], Step::Wait),
            (R::Starting, A::Stopped, vec![P::Pending, P::Pending], Step::Spawn(0)),
            (R::Starting, A::Stopped, vec![P::Up, P::Pending], Step::Spawn(1)),
            (R::Starting, A::Stopped, vec![P::Up, P::Spawning], Step::Wait),
            (R::Starting, A::Stopped, vec![P::Starting, P::Pending], Step::Wait),
            (R::Starting, A::Stopped, vec![P::Up, P::Up], Step::AllStagesUp),
            (R::Running, A::Stopped, vec![P::Up, P::Up], Step::Watch),
            // Stages stop last-started first.
            (R::Stopping, A::Stopped, vec![P::Up, P::Up], Step::StopStage(1)),
            (R::Stopping, A::Stopped, vec![P::Up, P::Exited], Step::StopStage(0)),
            (R::Failed, A::Stopped, vec![P::Starting, P::Pending], Step::StopStage(0)),
            (R::Stopping, A::Stopped, vec![P::Up, P::Spawning], Step::Wait),
            (R::Stopping, A::Stopped, vec![P::Exited, P::Lost], Step::AllStagesGone),
            (R::Stopping, A::Preempted, vec![P::Exited, P::Exited], Step::RequeuePreempted),
            (R::Stopping, A::Preempted, vec![P::Exited, P::Up], Step::StopStage(1)),
            (R::Stopping, A::Exploited, vec![P::Exited, P::Exited], Step::ContinueExploited),
            (R::Stopping, A::Exploited, vec![P::Up, P::Exited], Step::StopStage(0)),
            (R::Stopping, A::Exploited, vec![P::Spawning], Step::Wait),
            (R::Retrying, A::Stopped, vec![P::Exited, P::Pending], Step::RequeueRetry),
            (R::Retrying, A::Preempted, vec![P::Exited], Step::RequeueRetry),
            (R::Completed, A::Stopped, vec![P::Exited, P::Exited], Step::LetGo),
            (R::Stopped, A::Preempted, vec![P::Exited], Step::LetGo),
            (R::Failed, A::Stopped, vec![], Step::LetGo),
        ];
        for (i, (state, after_stop, now, want)) in table.into_iter().enumerate() {
            assert_eq!(next_step(state, after_stop, &stages(&now)), want, "row {i}");
        }
    }

    #[test]
    fn a_stage_waiting_out_its_backoff_is_not_started_again_yet() {
        let mut waiting = stages(&[P::Up, P::Pending]);
        waiting[1].spawn_due = false;
        assert_eq!(next_step(R::Starting, A::Stopped, &waiting), Step::Wait);
    }
}
