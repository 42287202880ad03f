-- +goose Up
-- Herald outbox table (MySQL 8.0.16+ / MariaDB 10.6+, InnoDB). Times are UTC
-- (Herald writes UTC_TIMESTAMP(6)); payload and metadata are JSON text. seq is
-- the insertion order. The locks table serializes the writers of one aggregate
-- (a writer role needs SELECT, INSERT on the outbox and INSERT, UPDATE on the
-- locks). Herald creates the same tables when missing, unless DisableAutoCreate
-- is set.
CREATE TABLE IF NOT EXISTS `outbox_messages` (
    seq            BIGINT       NOT NULL AUTO_INCREMENT,
    id             CHAR(36)     NOT NULL,
    type           VARCHAR(255) NOT NULL,
    version        INT          NOT NULL DEFAULT 1,
    aggregate_type VARCHAR(255) NOT NULL DEFAULT '',
    aggregate_id   VARCHAR(255) NOT NULL DEFAULT '',
    topic          VARCHAR(255) NOT NULL,
    payload        LONGTEXT     NOT NULL,
    metadata       TEXT         NOT NULL,
    occurred_at    DATETIME(6)  NOT NULL,
    created_at     DATETIME(6)  NOT NULL,
    available_at   DATETIME(6)  NOT NULL,
    attempts       INT          NOT NULL DEFAULT 0,
    strikes        INT          NOT NULL DEFAULT 0,
    last_error     TEXT         NULL,
    last_failed_at DATETIME(6)  NULL,
    processed_at   DATETIME(6)  NULL,
    dead_at        DATETIME(6)  NULL,
    PRIMARY KEY (seq),
    UNIQUE KEY `outbox_messages_id_key` (id),
    KEY `outbox_messages_pending_idx` (dead_at, processed_at, available_at, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS `outbox_messages_locks` (
    k BIGINT NOT NULL PRIMARY KEY
) ENGINE=InnoDB;
