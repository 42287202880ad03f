-- +goose Up
-- Herald scheduled events (MySQL / MariaDB): due_at is a scheduled event's due
-- time, UTC like the other times (NULL for an event due at once; its
-- available_at starts there), and schedule_key the name its writer gave it,
-- by which it is cancelled or moved ('' for none). The scheduled index serves
-- the figures of the scheduled events (no partial indexes here: the pending
-- ones are the entries whose dead_at and processed_at are NULL). Adding the
-- columns is an instant change on MySQL 8.0.12+ and MariaDB 10.3+; each index
-- is built online (writers go on) but for a short metadata lock at its start
-- and end. Herald adds them itself to an outbox it creates (and an index
-- missing from an outbox that has the columns); an outbox without the
-- columns fails the check at start, naming this migration.
ALTER TABLE `outbox_messages` ADD COLUMN due_at DATETIME(6) NULL;
ALTER TABLE `outbox_messages` ADD COLUMN schedule_key VARCHAR(255) NOT NULL DEFAULT '';
CREATE INDEX `outbox_messages_schedule_key_idx` ON `outbox_messages` (schedule_key);
CREATE INDEX `outbox_messages_scheduled_idx` ON `outbox_messages` (dead_at, processed_at, due_at);
