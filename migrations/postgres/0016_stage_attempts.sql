-- The stages of a run's earlier attempts: a requeue copies the ending attempt's stages here
-- before it resets them for the next one, so a run's page draws every attempt's timeline.
CREATE TABLE stage_attempts (
    run_id      TEXT    NOT NULL,
    attempt     BIGINT  NOT NULL,
    idx         BIGINT  NOT NULL,
    name        TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    shim        TEXT,
    process     TEXT,
    started_at  BIGINT,
    ready_at    BIGINT,
    ended_at    BIGINT,
    exit_code   BIGINT,
    exit_signal BIGINT,
    log_path    TEXT    NOT NULL,
    slurm_job   BIGINT,
    PRIMARY KEY (run_id, attempt, idx)
);
