-- One-shot work (inference tests): a job runs one task per model; schedules enqueue jobs.
CREATE TABLE jobs (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT    NOT NULL UNIQUE,
    state       TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    schedule_id TEXT,
    env_name    TEXT    NOT NULL,
    spec        TEXT    NOT NULL, -- what to run, JSON (never a secret: keys are named, not stored)
    created_at  INTEGER NOT NULL,
    started_at  INTEGER,
    ended_at    INTEGER,
    reason      TEXT,
    results     TEXT,             -- per-model results and summary, JSON
    job_dir     TEXT    NOT NULL
);
CREATE INDEX jobs_by_state ON jobs (state, seq);
CREATE INDEX jobs_by_schedule ON jobs (schedule_id, seq);

CREATE TABLE job_tasks (
    job_id      TEXT    NOT NULL REFERENCES jobs (id),
    idx         INTEGER NOT NULL,
    model       TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    shim        TEXT,
    process     TEXT,
    started_at  INTEGER,
    ended_at    INTEGER,
    exit_code   INTEGER,
    exit_signal INTEGER,
    timed_out   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, idx)
);

CREATE TABLE schedules (
    id          TEXT    PRIMARY KEY,
    name        TEXT    NOT NULL UNIQUE,
    cron        TEXT    NOT NULL,
    tz          TEXT,
    spec        TEXT    NOT NULL, -- the job each firing enqueues, JSON
    webhooks    TEXT    NOT NULL, -- JSON list of URLs
    policy      TEXT    NOT NULL, -- regression policy, JSON
    paused      INTEGER NOT NULL DEFAULT 0,
    last_fired  INTEGER NOT NULL, -- due times up to here are handled
    created_at  INTEGER NOT NULL
);
