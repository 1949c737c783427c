//! The SQL fragments several queries share (columns read, state lists), as macros so that they
//! join other literals with `concat!`; declared first in `store/mod.rs` so every file sees them.

/// The run columns every run query reads, in `run_from_row`'s terms.
macro_rules! select_runs_sql {
    () => {
        concat!(
            "SELECT id, workflow, env_name, state, version, priority, attempt, created_at, updated_at, ",
            "started_at, ended_at, reason, run_dir, spec, params, node, fence, not_before, held_at, deps_open, ",
            "preemptions, preempted_work_ms FROM runs "
        )
    };
}

/// The test columns every test query reads, in `test_from_row`'s terms.
macro_rules! select_tests_sql {
    () => {
        concat!(
            "SELECT id, state, version, schedule_id, env_name, spec, created_at, started_at, ended_at, reason, ",
            "results, test_dir, node, fence FROM tests "
        )
    };
}

/// The run states a daemon holds a run in (`RunState::is_in_flight`), as an SQL list's inside;
/// a unit test checks it against the model.
macro_rules! in_flight_states {
    () => {
        "'starting', 'running', 'stopping', 'retrying'"
    };
}

/// The process states of a stage or task that may still be alive (`ProcessState::is_live`), as
/// an SQL list's inside; a unit test checks it against the model.
macro_rules! live_process_states {
    () => {
        "'spawning', 'starting', 'up'"
    };
}

/// The runs a daemon supervises, as a condition on `runs`: in flight, or ended with a stage
/// that may still be alive; never a pending run (the queue's, whatever its stages say). Both
/// halves are indexed lookups (run state; the partial index of live stages), so what a
/// restart touches does not grow with the finished runs a node has kept.
macro_rules! supervised_runs_sql {
    () => {
        concat!(
            "id IN (SELECT id FROM runs WHERE state IN (",
            in_flight_states!(),
            ") UNION SELECT run_id FROM stages WHERE state IN (",
            live_process_states!(),
            ")) AND state <> 'pending'"
        )
    };
}
