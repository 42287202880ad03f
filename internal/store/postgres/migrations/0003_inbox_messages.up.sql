-- +goose Up
-- Herald inbox table (PostgreSQL). Run as the table's owner; the consumer role
-- needs SELECT, INSERT, DELETE on it. Herald creates it when missing, unless
-- DisableAutoCreate is set.
CREATE TABLE IF NOT EXISTS "inbox_messages" (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS "inbox_messages_processed_idx" ON "inbox_messages" (processed_at);
