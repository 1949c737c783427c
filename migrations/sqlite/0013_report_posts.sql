-- The morning report's cron post (`lachesis daemon --report-cron`): the last due time handled
-- per cron setting, so a restarted daemon neither posts twice nor misses a due time, and of
-- several daemons on one store one posts.
CREATE TABLE report_posts (
    name       TEXT   PRIMARY KEY,
    last_fired BIGINT NOT NULL
);
