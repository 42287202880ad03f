-- The outbox as Herald created it from commit 04eb188 until e794342
-- (internal/store/sqlite/migrations/0001_outbox_messages.up.sql): no part_key.
CREATE TABLE IF NOT EXISTS "outbox_messages" (
    seq            INTEGER PRIMARY KEY,
    id             TEXT    NOT NULL UNIQUE,
    type           TEXT    NOT NULL,
    version        INTEGER NOT NULL DEFAULT 1,
    aggregate_type TEXT    NOT NULL DEFAULT '',
    aggregate_id   TEXT    NOT NULL DEFAULT '',
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
