-- +goose Up
-- Herald relay additions to the outbox (SQLite): the partition lease and
-- instance tables of ordered mode, and the indexes of ordered claims, dead
-- events and retention. The relay creates whatever is missing.
CREATE TABLE IF NOT EXISTS "outbox_messages_leases" (
    partition  INTEGER PRIMARY KEY,
    owner      TEXT    NOT NULL DEFAULT '',
    expires_at INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS "outbox_messages_relays" (
    instance TEXT    PRIMARY KEY,
    seen_at  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS "outbox_messages_ordered_idx" ON "outbox_messages" (seq) WHERE processed_at IS NULL AND dead_at IS NULL;
CREATE INDEX IF NOT EXISTS "outbox_messages_aggregate_idx" ON "outbox_messages" (aggregate_type, aggregate_id, seq) WHERE processed_at IS NULL AND dead_at IS NULL;
CREATE INDEX IF NOT EXISTS "outbox_messages_dead_idx" ON "outbox_messages" (dead_at) WHERE dead_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS "outbox_messages_processed_idx" ON "outbox_messages" (processed_at) WHERE processed_at IS NOT NULL;
