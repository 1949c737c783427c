-- One-shot work (inference tests): a job runs one task per model; schedules enqueue jobs.
CREATE TABLE jobs (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id          TEXT    NOT NULL UNIQUE,
    state       TEXT    NOT NULL,
    version     BIGINT  NOT NULL,
    schedule_id TEXT,
    env_name    TEXT    NOT NULL,
    spec        TEXT    NOT NULL, -- what to run, JSON (never a secret: keys are named, not stored)
    created_at  BIGINT  NOT NULL,
    started_at  BIGINT,
    ended_at    BIGINT,
    reason      TEXT,
    results     TEXT,             -- per-model results and summary, JSON
    job_dir     TEXT    NOT NULL
);
CREATE INDEX jobs_by_state ON jobs (state, seq);
CREATE INDEX jobs_by_schedule ON jobs (schedule_id, seq);

CREATE TABLE job_tasks (
    job_id      TEXT    NOT NULL REFERENCES jobs (id),
    idx         BIGINT  NOT NULL,
    model       TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    shim        TEXT,
    process     TEXT,
    started_at  BIGINT,
    ended_at    BIGINT,
    exit_code   BIGINT,
    exit_signal BIGINT,
    timed_out   BIGINT  NOT NULL DEFAULT 0,
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
    paused      BIGINT  NOT NULL DEFAULT 0,
    last_fired  BIGINT  NOT NULL, -- due times up to here are handled
    created_at  BIGINT  NOT NULL
);
