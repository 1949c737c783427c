-- Training metrics by name, from any source (W&B history, a JSONL file, a stage log pattern):
-- one reading per (run, metric, attempt, step), upserted, so a re-read after a restart adds
-- nothing. The key's order is the series read's: one metric of one run, attempt by attempt,
-- step by step.
CREATE TABLE metric_values (
    run_id      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    value       REAL    NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, name, attempt, step)
);
-- The runs with readings newer than a mark (a sweep's look at what changed since its last),
-- read off the index alone.
CREATE INDEX metric_values_by_time ON metric_values (recorded_at, run_id);
-- The four W&B metrics of the old fixed-column history, under their W&B names and the run's
-- current attempt (the old table had none).
INSERT INTO metric_values (run_id, name, attempt, step, value, recorded_at)
    SELECT m.run_id, k.name, COALESCE((SELECT r.attempt FROM runs r WHERE r.id = m.run_id), 1), m.step,
           CASE k.name WHEN 'train/reward_mean' THEN m.reward_mean
                       WHEN 'train/percent_correct' THEN m.percent_correct
                       WHEN 'eval/percent_correct' THEN m.eval_percent_correct
                       ELSE m.loss END,
           m.recorded_at
    FROM metric_history m CROSS JOIN (
        SELECT 'train/reward_mean' AS name UNION ALL SELECT 'train/percent_correct'
        UNION ALL SELECT 'eval/percent_correct' UNION ALL SELECT 'train/loss'
    ) k
    WHERE CASE k.name WHEN 'train/reward_mean' THEN m.reward_mean
                      WHEN 'train/percent_correct' THEN m.percent_correct
                      WHEN 'eval/percent_correct' THEN m.eval_percent_correct
                      ELSE m.loss END IS NOT NULL;
DROP TABLE metric_history;
