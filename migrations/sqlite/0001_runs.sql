-- Runs, their stages and their events. Times are milliseconds since the Unix epoch.
CREATE TABLE runs (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT, -- queue order within a priority
    id         TEXT    NOT NULL UNIQUE,
    workflow   TEXT    NOT NULL,
    env_name   TEXT,
    state      TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    priority   INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    started_at INTEGER,
    ended_at   INTEGER,
    reason     TEXT,
    run_dir    TEXT    NOT NULL,
    spec       TEXT    NOT NULL, -- the workflow snapshot, JSON
    params     TEXT    NOT NULL  -- vars, config values, claim-time values, JSON
);
CREATE INDEX runs_by_state ON runs (state, priority DESC, seq);

CREATE TABLE stages (
    run_id     TEXT    NOT NULL REFERENCES runs (id),
    idx        INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    shim       TEXT, -- process identity JSON: pid, start_time, boot_id
    process    TEXT,
    started_at INTEGER,
    ready_at   INTEGER,
    ended_at   INTEGER,
    exit_code  INTEGER,
    exit_signal INTEGER,
    log_path   TEXT    NOT NULL,
    PRIMARY KEY (run_id, idx)
);

CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id     TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    from_state TEXT,
    to_state   TEXT,
    stage      TEXT,
    message    TEXT    NOT NULL
);
CREATE INDEX events_by_run ON events (run_id, id);
