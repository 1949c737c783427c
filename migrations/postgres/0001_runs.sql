-- Runs, their stages and their events. Times are milliseconds since the Unix epoch.
CREATE TABLE runs (
    seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- queue order within a priority
    id         TEXT   NOT NULL UNIQUE,
    workflow   TEXT   NOT NULL,
    env_name   TEXT,
    state      TEXT   NOT NULL,
    version    BIGINT NOT NULL,
    priority   BIGINT NOT NULL,
    attempt    BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    started_at BIGINT,
    ended_at   BIGINT,
    reason     TEXT,
    run_dir    TEXT   NOT NULL,
    spec       TEXT   NOT NULL, -- the workflow snapshot, JSON
    params     TEXT   NOT NULL  -- vars, config values, claim-time values, JSON
);
CREATE INDEX runs_by_state ON runs (state, priority DESC, seq);

CREATE TABLE stages (
    run_id     TEXT   NOT NULL REFERENCES runs (id),
    idx        BIGINT NOT NULL,
    name       TEXT   NOT NULL,
    state      TEXT   NOT NULL,
    shim       TEXT, -- process identity JSON: pid, start_time, boot_id
    process    TEXT,
    started_at BIGINT,
    ready_at   BIGINT,
    ended_at   BIGINT,
    exit_code  BIGINT,
    exit_signal BIGINT,
    log_path   TEXT   NOT NULL,
    PRIMARY KEY (run_id, idx)
);

CREATE TABLE events (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     TEXT   NOT NULL,
    at         BIGINT NOT NULL,
    kind       TEXT   NOT NULL,
    from_state TEXT,
    to_state   TEXT,
    stage      TEXT,
    message    TEXT   NOT NULL
);
CREATE INDEX events_by_run ON events (run_id, id);
