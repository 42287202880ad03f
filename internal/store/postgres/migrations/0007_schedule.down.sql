-- +goose Down
CREATE INDEX IF NOT EXISTS "outbox_messages_ordered_idx" ON "outbox_messages" (seq) WHERE processed_at IS NULL AND dead_at IS NULL;
DROP INDEX IF EXISTS "outbox_messages_stream_ordered_idx";
DROP INDEX IF EXISTS "outbox_messages_retry_ordered_idx";
DROP INDEX IF EXISTS "outbox_messages_scheduled_idx";
DROP INDEX IF EXISTS "outbox_messages_schedule_key_idx";
ALTER TABLE "outbox_messages" DROP COLUMN IF EXISTS schedule_key;
ALTER TABLE "outbox_messages" DROP COLUMN IF EXISTS due_at;
