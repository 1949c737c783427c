-- A hold keeps a pending run out of the queue until it is released: a flag on the pending run
-- (when it was held), not a state, so the state machine and everything that reads "pending"
-- stay as they are, and a held run keeps its place and priority.
ALTER TABLE runs ADD COLUMN held_at BIGINT;
-- The claim's scan: runs that are not held, by state in claim order (the planner takes it over
-- runs_by_state, which would walk the held ones too).
CREATE INDEX runs_claimable ON runs (state, priority DESC, seq) WHERE held_at IS NULL;
