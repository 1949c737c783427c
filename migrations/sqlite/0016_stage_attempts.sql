-- The stages of a run's earlier attempts: a requeue copies the ending attempt's stages here
-- before it resets them for the next one, so a run's page draws every attempt's timeline.
CREATE TABLE stage_attempts (
    run_id      TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    idx         INTEGER NOT NULL,
    name        TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    shim        TEXT,
    process     TEXT,
    started_at  INTEGER,
    ready_at    INTEGER,
    ended_at    INTEGER,
    exit_code   INTEGER,
    exit_signal INTEGER,
    log_path    TEXT    NOT NULL,
    slurm_job   BIGINT,
    PRIMARY KEY (run_id, attempt, idx)
);
