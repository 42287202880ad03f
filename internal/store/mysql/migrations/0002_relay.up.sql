-- +goose Up
-- Herald relay additions to the outbox (MySQL / MariaDB): the partition lease
-- and instance tables of ordered mode (the relay role needs SELECT, INSERT,
-- UPDATE, DELETE on them) and the indexes of ordered claims, dead events and
-- retention. The relay creates whatever is missing when it may.
CREATE TABLE IF NOT EXISTS `outbox_messages_leases` (
    `partition` INT          NOT NULL PRIMARY KEY,
    owner       VARCHAR(255) NOT NULL DEFAULT '',
    expires_at  DATETIME(6)  NOT NULL DEFAULT '1970-01-01 00:00:00'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS `outbox_messages_relays` (
    instance VARCHAR(255) NOT NULL PRIMARY KEY,
    seen_at  DATETIME(6)  NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE INDEX `outbox_messages_ordered_idx` ON `outbox_messages` (dead_at, processed_at, seq);
CREATE INDEX `outbox_messages_aggregate_idx` ON `outbox_messages` (aggregate_type, aggregate_id, dead_at, processed_at, seq);
CREATE INDEX `outbox_messages_processed_idx` ON `outbox_messages` (processed_at);
