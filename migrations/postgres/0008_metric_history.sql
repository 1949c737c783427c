-- Training-metric history read from W&B while a run runs: one row per (run, step), upserted on
-- each reading, so results keep the curve after W&B is unreachable.
CREATE TABLE metric_history (
    run_id               TEXT             NOT NULL,
    step                 BIGINT           NOT NULL,
    reward_mean          DOUBLE PRECISION,
    percent_correct      DOUBLE PRECISION,
    eval_percent_correct DOUBLE PRECISION,
    loss                 DOUBLE PRECISION,
    recorded_at          BIGINT           NOT NULL,
    PRIMARY KEY (run_id, step)
);
