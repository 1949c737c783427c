//! An inference test's tasks (one per model): which to start while its `concurrency` allows,
//! and, once none is left to run, whether the test completes (its results read) or is let go.

use crate::model::{ProcessState, TestState};

/// The pending tasks to start now: as many as `concurrency` (at least 1) leaves room for beside
/// the live ones, in order. None for a test not running.
pub fn to_start(state: TestState, tasks: &[ProcessState], concurrency: usize) -> Vec<usize> {
    if state != TestState::Running {
        return Vec::new();
    }
    let live = tasks.iter().filter(|t| t.is_live()).count();
    let room = concurrency.max(1).saturating_sub(live);
    tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| **t == ProcessState::Pending)
        .map(|(i, _)| i)
        .take(room)
        .collect()
}

/// What a test is at once its tasks moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestEnd {
    /// Tasks still run (or wait to); or a cancelled test's tasks are still being killed.
    Going,
    /// Every task ended: read the results and decide the test.
    Complete,
    /// Over, nothing live: its key files go, and it leaves supervision.
    LetGo,
}

/// Whether `state`'s test is over, with its tasks as they stand.
pub fn end(state: TestState, tasks: &[ProcessState]) -> TestEnd {
    let all_ended = tasks.iter().all(|t| !t.is_live() && *t != ProcessState::Pending);
    if !(all_ended || state.is_terminal()) {
        return TestEnd::Going;
    }
    match state {
        TestState::Running => TestEnd::Complete,
        _ if tasks.iter().any(|t| t.is_live()) => TestEnd::Going,
        _ => TestEnd::LetGo,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProcessState as P;
    use TestState as T;

    #[test]
    fn tasks_start_while_the_concurrency_allows() {
        // (test state, tasks, concurrency) -> started
        let table: [(T, &[P], usize, &[usize]); 7] = [
            (T::Running, &[P::Pending, P::Pending, P::Pending], 2, &[0, 1]),
            (T::Running, &[P::Up, P::Pending, P::Pending], 2, &[1]),
            (T::Running, &[P::Starting, P::Spawning, P::Pending], 2, &[]),
            (T::Running, &[P::Exited, P::Lost, P::Pending], 1, &[2]),
            (T::Running, &[P::Pending, P::Pending], 0, &[0]),
            (T::Cancelled, &[P::Pending, P::Pending], 2, &[]),
            (T::Queued, &[P::Pending], 2, &[]),
        ];
        for (state, tasks, concurrency, want) in table {
            assert_eq!(to_start(state, tasks, concurrency), want, "{state:?} {tasks:?} {concurrency}");
        }
    }

    #[test]
    fn a_test_completes_once_every_task_ended_and_is_let_go_once_nothing_lives() {
        let table: [(T, &[P], TestEnd); 7] = [
            (T::Running, &[P::Exited, P::Up], TestEnd::Going),
            (T::Running, &[P::Exited, P::Pending], TestEnd::Going),
            (T::Running, &[P::Exited, P::Lost], TestEnd::Complete),
            (T::Running, &[], TestEnd::Complete),
            (T::Cancelled, &[P::Up, P::Pending], TestEnd::Going),
            (T::Cancelled, &[P::Exited, P::Pending], TestEnd::LetGo),
            (T::Succeeded, &[P::Exited, P::Exited], TestEnd::LetGo),
        ];
        for (state, tasks, want) in table {
            assert_eq!(end(state, tasks), want, "{state:?} {tasks:?}");
        }
    }
}
