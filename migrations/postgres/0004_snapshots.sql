-- The last metrics snapshot read from W&B per run, so status and results still answer (saying
-- how old it is) when W&B is unreachable.
CREATE TABLE snapshots (
    run_id   TEXT    PRIMARY KEY,
    taken_at BIGINT  NOT NULL,
    data     TEXT    NOT NULL
);
