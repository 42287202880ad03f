-- +goose Up
-- The aggregate index of ordered claims, keyed only for the events that can
-- hold the later events of their aggregate back: those that may be pending
-- and not due, retries (attempts > 0) and scheduled events (due_at set).
-- Every other event is due from its insert on (available_at is the insert's
-- clock, requeues and recoveries make rows due at once, and the ordered
-- claims take it as due whatever its available_at says, which is later than
-- the clock only after the clock stepped back), so it never holds its
-- aggregate back: its key is NULL, and the NULL entries sort by seq (the
-- primary key InnoDB appends), in the order events are inserted and
-- published. The aggregate index of 0002_relay kept every event under its
-- aggregate: each insert and each batch's DELETE wrote a scattered leaf page
-- per aggregate. The two generated columns are VIRTUAL: they store nothing
-- in the rows, and adding them is an instant change on MySQL 8.0 and
-- MariaDB 10.3+ (a short metadata lock); the index build is online but for
-- a short metadata lock at its start and end. Herald makes them itself only
-- on an outbox it creates in the same call: on an existing outbox it is a
-- change for Migrate, and until then the ordered claims look up through the
-- aggregate index as before.
ALTER TABLE `outbox_messages` ADD COLUMN blocker_type VARCHAR(255) AS (IF(attempts > 0 OR due_at IS NOT NULL, aggregate_type, NULL)) VIRTUAL;
ALTER TABLE `outbox_messages` ADD COLUMN blocker_id VARCHAR(255) AS (IF(attempts > 0 OR due_at IS NOT NULL, aggregate_id, NULL)) VIRTUAL;
CREATE INDEX `outbox_messages_blockers_idx` ON `outbox_messages` (blocker_type, blocker_id);
DROP INDEX `outbox_messages_aggregate_idx` ON `outbox_messages`;
