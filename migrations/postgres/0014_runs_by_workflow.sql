-- The dashboard's runs page filtered by workflow, newest first: a page costs its rows, however
-- many runs of other workflows the store holds.
CREATE INDEX runs_by_workflow_seq ON runs (workflow, seq);
