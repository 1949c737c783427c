-- Held runs, for counting them (the morning report): the held few, not a walk of every pending
-- run to look at its flag. A hold belongs to a pending run, and from now on goes when the run
-- leaves the queue; holds left on runs that already left it are cleared here.
UPDATE runs SET held_at = NULL WHERE held_at IS NOT NULL AND state <> 'pending';
CREATE INDEX runs_held ON runs (held_at) WHERE held_at IS NOT NULL;
