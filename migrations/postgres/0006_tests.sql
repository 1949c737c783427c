-- Inference tests were called jobs inside the code; one word now names them everywhere.
ALTER TABLE jobs RENAME TO tests;
ALTER TABLE tests RENAME COLUMN job_dir TO test_dir;
ALTER TABLE job_tasks RENAME TO test_tasks;
ALTER TABLE test_tasks RENAME COLUMN job_id TO test_id;
