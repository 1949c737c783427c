-- Several daemons on one database: each is a node holding a lease (its heartbeat) and a fencing
-- token; what a node claims carries its token, and its later writes must still match it.
CREATE TABLE nodes (
    id           TEXT   PRIMARY KEY,
    hostname     TEXT   NOT NULL,
    pid          BIGINT NOT NULL,
    labels       TEXT   NOT NULL, -- JSON object, e.g. {"gpu": "h100"}
    token        BIGINT NOT NULL, -- fencing token of its current lease
    lease_ms     BIGINT NOT NULL,
    started_at   BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    state        TEXT   NOT NULL  -- up | lost | left
);

-- The last fencing token handed out; tokens only grow, across all nodes.
CREATE TABLE fencing (
    id   BIGINT PRIMARY KEY,
    last BIGINT NOT NULL
);
INSERT INTO fencing (id, last) VALUES (1, 0);

ALTER TABLE runs ADD COLUMN node TEXT;
ALTER TABLE runs ADD COLUMN fence BIGINT;
ALTER TABLE runs ADD COLUMN not_before BIGINT; -- a retry's backoff: not claimed before this
CREATE INDEX runs_by_node ON runs (node, fence);

ALTER TABLE jobs ADD COLUMN node TEXT;
ALTER TABLE jobs ADD COLUMN fence BIGINT;

-- The Slurm job running a stage (launcher: slurm): tracked and re-attached by job id.
ALTER TABLE stages ADD COLUMN slurm_job BIGINT;
