-- +goose Down
CREATE INDEX IF NOT EXISTS "outbox_messages_aggregate_idx" ON "outbox_messages" (aggregate_type, aggregate_id, seq) WHERE processed_at IS NULL AND dead_at IS NULL;
DROP INDEX IF EXISTS "outbox_messages_blockers_idx";
