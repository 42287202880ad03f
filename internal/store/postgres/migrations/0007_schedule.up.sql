-- +goose Up
-- Herald scheduled events (PostgreSQL): due_at is a scheduled event's due
-- time (NULL for an event due at once; its available_at starts there), and
-- schedule_key the name its writer gave it, by which it is cancelled or moved.
-- Adding the columns rewrites no row but takes the table's ACCESS EXCLUSIVE
-- lock for a moment; each index build scans the table under a SHARE lock
-- (writers wait: on a large outbox, build them first with CREATE INDEX
-- CONCURRENTLY under these names). Herald adds them itself when missing,
-- unless DisableAutoCreate is set.
ALTER TABLE "outbox_messages" ADD COLUMN IF NOT EXISTS due_at timestamptz;
ALTER TABLE "outbox_messages" ADD COLUMN IF NOT EXISTS schedule_key text NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS "outbox_messages_schedule_key_idx" ON "outbox_messages" (schedule_key)
    WHERE schedule_key <> '';
CREATE INDEX IF NOT EXISTS "outbox_messages_scheduled_idx" ON "outbox_messages" (due_at)
    WHERE due_at IS NOT NULL AND processed_at IS NULL AND dead_at IS NULL;
-- The retries of ordered mode: where an ordered relay's claims must come back
-- to when a failed event is due again. Small (failing events only); an insert
-- adds no entry to it.
CREATE INDEX IF NOT EXISTS "outbox_messages_retry_ordered_idx" ON "outbox_messages" (available_at)
    WHERE attempts > 0 AND processed_at IS NULL AND dead_at IS NULL;
-- The ordered index again, without the scheduled events: an ordered claim
-- reads the events due at once in seq order through it, and the scheduled
-- ones that are due through the scheduled index, instead of stepping over
-- every event scheduled for later whenever it starts at the head. Herald
-- makes it itself where the index it replaces is not there; on an outbox
-- that has it, it is an index build and drop, for Migrate.
CREATE INDEX IF NOT EXISTS "outbox_messages_stream_ordered_idx" ON "outbox_messages" (seq)
    WHERE processed_at IS NULL AND dead_at IS NULL AND due_at IS NULL;
DROP INDEX IF EXISTS "outbox_messages_ordered_idx";
