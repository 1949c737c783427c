-- A run's checkpoints, across its attempts: one row per line of the trainer's output that named
-- one. `source_key` (the line's digest) makes a re-read after a restart add nothing.
CREATE TABLE checkpoints (
    run_id     TEXT    NOT NULL,
    attempt    BIGINT  NOT NULL,
    step       BIGINT  NOT NULL,
    path       TEXT,
    weights    TEXT,
    source_key TEXT    NOT NULL,
    at         BIGINT  NOT NULL,
    PRIMARY KEY (run_id, source_key)
);
CREATE INDEX checkpoints_by_run ON checkpoints (run_id, at);
