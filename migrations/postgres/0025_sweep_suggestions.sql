-- A bayes sweep's member k is suggested from the members before it, so its values cannot be
-- computed again from the file and k (as a grid's or a random sweep's can): they are kept with
-- the member, written in the same transaction as its run (JSON, by parameter path; NULL for
-- grid and random members).
ALTER TABLE sweep_members ADD COLUMN suggestion TEXT;
-- What a bayes sweep's later members are made with beyond its file (JSON): what its submission
-- asked of every member (`--hold`, …) and where a `program:` runs. NULL for grid and random.
ALTER TABLE sweeps ADD COLUMN member_setup TEXT;
