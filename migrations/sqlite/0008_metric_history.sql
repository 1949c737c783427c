-- Training-metric history read from W&B while a run runs: one row per (run, step), upserted on
-- each reading, so results keep the curve after W&B is unreachable.
CREATE TABLE metric_history (
    run_id               TEXT    NOT NULL,
    step                 INTEGER NOT NULL,
    reward_mean          REAL,
    percent_correct      REAL,
    eval_percent_correct REAL,
    loss                 REAL,
    recorded_at          INTEGER NOT NULL,
    PRIMARY KEY (run_id, step)
);
