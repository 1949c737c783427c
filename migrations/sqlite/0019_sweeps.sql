-- Sweeps: a configuration space searched by member runs (`lachesis sweep start FILE`). The file
-- is kept as given (the daemon parses it again for the metric and hyperband), with the document
-- as JSON beside it for readers that want its keys.
CREATE TABLE sweeps (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT, -- listing order
    id         TEXT    NOT NULL UNIQUE,
    file       TEXT    NOT NULL, -- the sweep file as given
    config     TEXT    NOT NULL, -- the same document, JSON
    workflow   TEXT    NOT NULL,
    members    INTEGER NOT NULL, -- how many member runs it has
    max_live   INTEGER,          -- the most members in flight at once (NULL: no limit)
    state      TEXT    NOT NULL, -- live | target | stopped | done
    reason     TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
-- The claim reads the live sweeps with a max_live, the daemon's decider the live ones: an index
-- range, however many finished sweeps the store keeps.
CREATE INDEX sweeps_by_state ON sweeps (state);
-- A member: run `run_id` is member `k` of the sweep (its parameters are the sweep's member k).
CREATE TABLE sweep_members (
    sweep_id TEXT    NOT NULL,
    k        INTEGER NOT NULL,
    run_id   TEXT    NOT NULL,
    PRIMARY KEY (sweep_id, k)
);
-- From an in-flight run to its sweep: max_live's count starts from the runs in flight.
CREATE UNIQUE INDEX sweep_members_by_run ON sweep_members (run_id);
