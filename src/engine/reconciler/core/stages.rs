//! A stage that started: whether it is up at once (no start delay nor probe: its start, its
//! being up and, for the last stage, its run's `running` are one commit) or awaits its
//! readiness; and whether the stop signal reached it or its end is awaited.

use crate::model::{ProcessState, RunState};

/// How a stage that just started is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    /// Its start only; `readiness`: its delay or probe is awaited (its run is starting).
    Recorded { readiness: bool },
    /// Started and up in one commit; `all_up`: with its run's `starting → running`.
    Up { all_up: bool },
}

/// The record of stage `idx` started while its run is in `run`; `up_at_once`: its plan has
/// neither a start delay nor a probe; `stages` as they stand.
pub fn started(run: RunState, up_at_once: bool, idx: usize, stages: &[ProcessState]) -> Started {
    if run != RunState::Starting || !up_at_once {
        return Started::Recorded { readiness: run == RunState::Starting };
    }
    let all_up = stages.iter().enumerate().all(|(i, s)| i == idx || *s == ProcessState::Up);
    Started::Up { all_up }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProcessState as P;
    use RunState as R;

    #[test]
    fn a_started_stage_is_up_at_once_or_awaits_its_readiness() {
        // (run state, up at once, stage, stages) -> record
        let table: [(R, bool, usize, &[P], Started); 6] = [
            (R::Starting, true, 1, &[P::Up, P::Spawning], Started::Up { all_up: true }),
            (R::Starting, true, 0, &[P::Spawning, P::Pending], Started::Up { all_up: false }),
            (R::Starting, false, 1, &[P::Up, P::Spawning], Started::Recorded { readiness: true }),
            // A run that moved on while its stage started: no readiness awaited, no move.
            (R::Stopping, true, 1, &[P::Up, P::Spawning], Started::Recorded { readiness: false }),
            (R::Running, false, 0, &[P::Spawning], Started::Recorded { readiness: false }),
            (R::Failed, true, 0, &[P::Spawning], Started::Recorded { readiness: false }),
        ];
        for (run, at_once, idx, stages, want) in table {
            assert_eq!(started(run, at_once, idx, stages), want, "{run} {at_once} {idx} {stages:?}");
        }
    }
}
