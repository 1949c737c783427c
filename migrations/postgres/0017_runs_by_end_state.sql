-- The report counts a window's runs (and tests) by state: with the state in the end-time index,
-- the count reads the index alone, not a row per run of the window. The reads by end time
-- (the report's rows, retention) use it as they used the old one.
DROP INDEX runs_by_end;
CREATE INDEX runs_by_end ON runs (ended_at, state) WHERE ended_at IS NOT NULL;
DROP INDEX tests_by_end;
CREATE INDEX tests_by_end ON tests (ended_at, state) WHERE ended_at IS NOT NULL;
