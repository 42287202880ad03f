-- +goose Up
-- Herald scheduled events (SQLite): due_at is a scheduled event's due time,
-- UTC unix microseconds (NULL for an event due at once; its available_at
-- starts there), and schedule_key the name its writer gave it, by which it is
-- cancelled or moved. Herald adds them itself to an outbox it creates; an
-- outbox made before needs this migration (herald migrate up).
ALTER TABLE "outbox_messages" ADD COLUMN due_at INTEGER NULL;
ALTER TABLE "outbox_messages" ADD COLUMN schedule_key TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS "outbox_messages_schedule_key_idx" ON "outbox_messages" (schedule_key)
    WHERE schedule_key <> '';
CREATE INDEX IF NOT EXISTS "outbox_messages_scheduled_idx" ON "outbox_messages" (due_at)
    WHERE due_at IS NOT NULL AND processed_at IS NULL AND dead_at IS NULL;
-- The ordered index again, without the scheduled events: an ordered claim
-- reads the events due at once in seq order through it, and the scheduled
-- ones that are due through the scheduled index, instead of stepping at each
-- claim over every event scheduled for later. Herald makes it itself only on
-- an outbox it creates in the same call; on an existing one, for Migrate.
CREATE INDEX IF NOT EXISTS "outbox_messages_stream_ordered_idx" ON "outbox_messages" (seq)
    WHERE processed_at IS NULL AND dead_at IS NULL AND due_at IS NULL;
DROP INDEX IF EXISTS "outbox_messages_ordered_idx";
