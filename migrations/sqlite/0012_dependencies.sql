-- Dependencies: a run waits for others to end in a way it names (`ok`: completed; `any`;
-- `failed`). One row per edge, in the order given; `settled` stays NULL until the run it waits
-- for ends, then says whether that end met the edge ('met') or never can ('unmet').
CREATE TABLE run_deps (
    run_id   TEXT   NOT NULL, -- the waiting run
    pos      INTEGER NOT NULL, -- the edge's place among the run's own
    after_id TEXT   NOT NULL, -- the run it waits for
    cond     TEXT   NOT NULL, -- ok | any | failed
    name     TEXT,            -- for {after.NAME.*} templates and LACHESIS_AFTER_NAME_* variables
    settled  TEXT,
    PRIMARY KEY (run_id, pos)
);
-- A run's end settles the edges that wait for it: an index range, however many edges there are.
CREATE INDEX run_deps_after ON run_deps (after_id);
-- How many of a run's edges are not met yet: a waiting run is never in the claim's index, so
-- it costs the claim nothing and blocks nothing behind it.
ALTER TABLE runs ADD COLUMN deps_open INTEGER NOT NULL DEFAULT 0;
DROP INDEX runs_claimable;
CREATE INDEX runs_claimable ON runs (state, priority DESC, seq) WHERE held_at IS NULL AND deps_open = 0;
