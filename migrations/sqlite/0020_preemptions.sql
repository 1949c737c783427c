-- Preemption (issue 33): how many times a run was stopped for a run of higher priority and
-- queued again (its own count: a preemption charges no attempt of the retry policy), and the
-- work those stops lost (the time since the last resumable checkpoint, summed, in ms).
ALTER TABLE runs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN preempted_work_ms INTEGER NOT NULL DEFAULT 0;
