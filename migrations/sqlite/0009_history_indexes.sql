-- Indexes that keep commands and daemon scans as cheap with 100,000 finished runs as with none.
-- `run list --state S`, newest first.
CREATE INDEX runs_by_state_seq ON runs (state, seq);
-- Retention: finished runs and tests by when they ended.
CREATE INDEX runs_by_end ON runs (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX tests_by_end ON tests (ended_at) WHERE ended_at IS NOT NULL;
-- Stages that may still be alive: the daemon looks for these on every recovery and lease check,
-- and they are few however many finished stages the store holds.
CREATE INDEX stages_live ON stages (run_id) WHERE state IN ('spawning', 'starting', 'up');
