-- A run's training step over time: one row per change of step (not per reading), per attempt.
CREATE TABLE progress (
    run_id  TEXT    NOT NULL,
    attempt INTEGER NOT NULL,
    step    INTEGER NOT NULL,
    total   INTEGER,
    at      INTEGER NOT NULL
);
CREATE INDEX progress_by_run ON progress (run_id, attempt, at);
