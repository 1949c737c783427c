-- A run may wait for a sweep (`after: [{sweep: ID}]`): the edge names a sweep instead of a run,
-- and is settled in the transaction that stops or ends the sweep. The existing edges wait for runs.
ALTER TABLE run_deps ADD COLUMN after_kind TEXT NOT NULL DEFAULT 'run'; -- run | sweep
-- A sweep's winner, recorded with its move to `done`: the best member by the metric's goal
-- (its place k, its run and its best value), which `{after.NAME.best_*}` hand to the runs
-- waiting for the sweep. NULL while it runs, and for a sweep that ended without one.
ALTER TABLE sweeps ADD COLUMN winner_k BIGINT;
ALTER TABLE sweeps ADD COLUMN winner_run TEXT;
ALTER TABLE sweeps ADD COLUMN winner_value DOUBLE PRECISION;
