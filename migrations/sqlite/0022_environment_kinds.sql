-- Environments have a kind (atropos, verifiers) and a source (a directory, or an installed
-- package and its version). A selection stored before holds an Atropos environment from a directory.
ALTER TABLE selection ADD COLUMN kind TEXT NOT NULL DEFAULT 'atropos';
ALTER TABLE selection ADD COLUMN source TEXT; -- EnvSource as JSON; NULL in older rows
