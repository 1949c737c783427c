-- The pending runs whose retry backoff has an end, by that end: the daemon reads the earliest
-- after its last look at the queue and wakes then, whoever queued the run again (another node,
-- or this daemon before it restarted). Only runs a claim could take once it is over: small.
-- `state` leads, as in `runs_claimable`, so SQLite's planner prefers this index for the read.
CREATE INDEX runs_backing_off ON runs (state, not_before)
    WHERE held_at IS NULL AND deps_open = 0 AND not_before IS NOT NULL;
