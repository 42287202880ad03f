-- +goose Up
-- Herald outbox table (SQLite 3.42 or newer). Times are UTC unix microseconds;
-- payload and metadata are JSON text. seq, the rowid, is the insertion order;
-- part_key, a 32-bit hash of the aggregate (of the id for events of none), puts
-- each event in an ordering partition (SQLite has no hash function).
-- Herald creates the same table when it is missing, unless DisableAutoCreate is set.
CREATE TABLE IF NOT EXISTS "outbox_messages" (
    seq            INTEGER PRIMARY KEY,
    id             TEXT    NOT NULL UNIQUE,
    type           TEXT    NOT NULL,
    version        INTEGER NOT NULL DEFAULT 1,
    aggregate_type TEXT    NOT NULL DEFAULT '',
    aggregate_id   TEXT    NOT NULL DEFAULT '',
    part_key       INTEGER NOT NULL DEFAULT 0,
    topic          TEXT    NOT NULL,
    payload        TEXT    NOT NULL,
    metadata       TEXT    NOT NULL DEFAULT '{}',
    occurred_at    INTEGER NOT NULL,
    created_at     INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
    available_at   INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
    attempts       INTEGER NOT NULL DEFAULT 0,
    strikes        INTEGER NOT NULL DEFAULT 0,
    last_error     TEXT,
    last_failed_at INTEGER,
    processed_at   INTEGER,
    dead_at        INTEGER
);
CREATE INDEX IF NOT EXISTS "outbox_messages_pending_idx" ON "outbox_messages" (available_at, seq)
    WHERE processed_at IS NULL AND dead_at IS NULL;
