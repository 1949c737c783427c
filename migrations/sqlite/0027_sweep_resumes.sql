-- `sweep resume` re-runs the members its decision chose: each is marked with the version its
-- run had when the decision was committed (with the sweep's move back to live), and re-run
-- only while its run is still at that version, so a daemon killed between the move and the
-- re-runs repairs them on its next pass and never queues one twice. NULL: nothing to re-run.
ALTER TABLE sweep_members ADD COLUMN rerun_version INTEGER;
-- A sweep's stop marks the members it stops (those not ended at its move), in the move's
-- transaction: `sweep resume` re-runs those, not the ones a user or hyperband stopped.
ALTER TABLE sweep_members ADD COLUMN stopped_by_sweep INTEGER NOT NULL DEFAULT 0;
-- The decider's pass reads the marked members alone: a partial index holds only them.
CREATE INDEX sweep_members_to_rerun ON sweep_members (sweep_id) WHERE rerun_version IS NOT NULL;
-- A sweep's moves (live → target, stopped, done; stopped → live by a resume), each written in
-- the transaction of its move.
CREATE TABLE sweep_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    sweep_id   TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    from_state TEXT    NOT NULL,
    to_state   TEXT    NOT NULL,
    message    TEXT    NOT NULL
);
CREATE INDEX sweep_events_by_sweep ON sweep_events (sweep_id, id);
