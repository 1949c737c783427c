-- The selected environment and its configurable values, shared by every surface. One row.
CREATE TABLE selection (
    id           BIGINT PRIMARY KEY CHECK (id = 1),
    env_name     TEXT    NOT NULL,
    env_file     TEXT    NOT NULL,
    class_name   TEXT    NOT NULL,
    config_class TEXT    NOT NULL,
    fields       TEXT    NOT NULL, -- introspected field descriptions, JSON
    config       TEXT    NOT NULL, -- current values of the configurable fields, JSON
    updated_at   BIGINT NOT NULL
);
