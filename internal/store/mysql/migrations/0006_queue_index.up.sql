-- +goose Up
-- The pending index again, with the dead and the processed rows before the
-- pending ones (MySQL 8 and MariaDB 10.8+ honour DESC; earlier MariaDB reads
-- it as the index it replaces). An unordered claim that takes every due event
-- reads, to know it is done, the index entry after them and keeps its lock
-- until its batch ends, even at READ COMMITTED; in 0001's order that entry
-- was a processed or a dead row, whose cleanup, purge or requeue then waited
-- for the batch's publishes. Now it is an event not yet due, or the end of
-- the index. Herald makes this index itself only on an outbox it creates in
-- the same call: on an existing table it is an online index build and an
-- index drop, each taking the table's metadata lock, for Migrate to run when
-- the operator chooses.
CREATE INDEX `outbox_messages_queue_idx` ON `outbox_messages` (dead_at DESC, processed_at DESC, available_at, seq);
DROP INDEX `outbox_messages_pending_idx` ON `outbox_messages`;
