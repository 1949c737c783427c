-- A member its sweep's hyperband stopped says so in a column, written with the stop, instead of
-- in the prose of its run's reason. Members stopped before this read their reason once, here.
ALTER TABLE sweep_members ADD COLUMN early_terminated INTEGER NOT NULL DEFAULT 0;
UPDATE sweep_members SET early_terminated = 1
    WHERE run_id IN (SELECT id FROM runs WHERE state = 'stopped' AND reason LIKE 'early-terminated by sweep %');
