-- A hold keeps a pending run out of the queue until it is released: a flag on the pending run
-- (when it was held), not a state, so the state machine and everything that reads "pending"
-- stay as they are, and a held run keeps its place and priority.
ALTER TABLE runs ADD COLUMN held_at BIGINT;
-- The claim's scan: pending runs that are not held, in claim order.
CREATE INDEX runs_claimable ON runs (priority DESC, seq) WHERE state = 'pending' AND held_at IS NULL;
