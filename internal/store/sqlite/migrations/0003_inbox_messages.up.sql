-- +goose Up
-- Herald inbox table (SQLite). processed_at is UTC unix microseconds. Herald
-- creates it when missing, unless DisableAutoCreate is set.
CREATE TABLE IF NOT EXISTS "inbox_messages" (
    consumer     TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    processed_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS "inbox_messages_processed_idx" ON "inbox_messages" (processed_at);
