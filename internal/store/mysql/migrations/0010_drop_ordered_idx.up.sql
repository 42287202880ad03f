-- +goose Up
-- The ordered index of 0002_relay (dead_at, processed_at, seq) is read by no
-- statement: the ordered claims read the events due at once through the
-- scheduled index of 0007_schedule (dead_at, processed_at, due_at; InnoDB
-- appends seq), which holds them in the same order, and the counts read the
-- queue or scheduled index. Every insert, mark and delete still wrote it.
-- Dropping it is online in MySQL 8.0 and MariaDB (a short metadata lock).
-- Herald never drops it itself: on an outbox made before this migration it
-- stays until Migrate runs, and an outbox Herald makes has none.
DROP INDEX `outbox_messages_ordered_idx` ON `outbox_messages`;
